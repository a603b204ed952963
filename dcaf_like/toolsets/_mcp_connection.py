"""One MCP client session, opened and held by a task on an event loop of its own.

An MCP session (``mcp.Client``) is an async context manager whose task groups belong to the task that
entered it, and to that task's event loop. An agent runs from blocking code, from a test's loop, from
uvicorn's: so the session lives on a :class:`~dcaf_like.concurrency.portal.Portal` loop, entered and
exited by one keeper task, and every caller hands its request to that loop. Closing sets the keeper free
to leave the session, which stops the server's process (stdio) or ends its HTTP session.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from dcaf_like.application.errors import ToolsetUnavailable
from dcaf_like.concurrency.portal import Portal

logger = logging.getLogger("dcaf_like.toolsets.mcp")

_MAX_PAGES = 100  # a server whose tool listing never ends cannot hang a connection


class MCPServerUnavailable(ToolsetUnavailable):
    """An MCP server could not be started or reached, or did not answer the handshake in time.
    `server` names it; the run stops before the model is called."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(server, reason)
        self.server = server
        self.args = (f"MCP server {server!r} is unavailable: {reason}",)

    def __str__(self) -> str:
        return str(self.args[0])


class Connection:
    """Open on first use (:meth:`tools`), reopened on a later use if the server went away, closed by
    :meth:`close` or at interpreter exit. `client` makes a fresh, unentered ``mcp.Client``."""

    def __init__(self, server: str, client: Callable[[], Any], *, connect_timeout: float) -> None:
        self.server = server
        self._new_client = client
        self._connect_timeout = connect_timeout
        self._portal: Portal | None = None
        self._lock = threading.Lock()
        # Touched only on the portal's loop:
        self._client: Any = None
        self._keeper: asyncio.Task[None] | None = None
        self._opened: asyncio.Future[list[Any]] | None = None
        self._closing: asyncio.Event | None = None

    @property
    def portal(self) -> Portal:
        with self._lock:
            if self._portal is None:
                self._portal = Portal(f"dcaf-like-mcp-{self.server}")
                atexit.register(self.close)  # reap the server's process even if nobody closes us
            return self._portal

    # -- run on the portal's loop -------------------------------------------------------------------

    async def tools(self) -> list[Any]:
        """The server's tools (``mcp_types.Tool``), connecting first if not connected."""
        if self._keeper is None or self._keeper.done():
            loop = asyncio.get_running_loop()
            self._opened = loop.create_future()
            self._closing = asyncio.Event()
            self._keeper = loop.create_task(self._keep(self._opened, self._closing))
        keeper, opened = self._keeper, self._opened
        assert opened is not None
        try:
            return await asyncio.wait_for(asyncio.shield(opened), self._connect_timeout)
        except TimeoutError:
            keeper.cancel()
            with contextlib.suppress(BaseException):
                await keeper
            if opened.done() and not opened.cancelled():
                opened.exception()  # retrieved: the timeout is what the caller hears about
            raise MCPServerUnavailable(
                self.server, f"no answer to the MCP handshake within {self._connect_timeout:g} s"
            ) from None

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float | None) -> Any:
        """``tools/call`` on the open session (reopened first if it was lost)."""
        await self.tools()
        client = self._client
        if client is None:
            raise MCPServerUnavailable(self.server, "the connection closed")
        try:
            return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except Exception as exc:
            if not _connection_lost(exc):
                raise
            # Not retried: the call may have reached the server. The next call opens a new session.
            await self._shutdown()
            raise MCPServerUnavailable(self.server, f"the connection was lost ({_reason(exc)})") from exc

    async def _keep(self, opened: asyncio.Future[list[Any]], closing: asyncio.Event) -> None:
        try:
            async with self._new_client() as client:
                listed = await _list_tools(client)
                self._client = client
                opened.set_result(listed)
                await closing.wait()
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(MCPServerUnavailable(self.server, _reason(exc)))
            elif not closing.is_set():
                logger.warning("MCP server %r: the connection was lost: %s", self.server, _reason(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    async def _shutdown(self) -> None:
        keeper = self._keeper
        if keeper is None:
            return
        if self._closing is not None:
            self._closing.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(keeper, 15)
        self._keeper = None

    # -- from any thread ----------------------------------------------------------------------------

    def close(self) -> None:
        """Leave the session (the server's process exits and is reaped) and stop the loop."""
        with self._lock:
            portal, self._portal = self._portal, None
        if portal is None:
            return
        atexit.unregister(self.close)
        if portal.loop.is_running():
            portal.run(self._shutdown())
            portal.run(portal.loop.shutdown_asyncgens())
        portal.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


async def _list_tools(client: Any) -> list[Any]:
    listed: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return listed


def _connection_lost(exc: BaseException) -> bool:
    import anyio
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream)


def _reason(exc: BaseException) -> str:
    """The innermost cause, in words (anyio wraps failures in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, asyncio.CancelledError):
        return "the connection was cancelled"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
