"""MCPToolset: the tools of an MCP server (over stdio or streamable HTTP) as an agent's tools."""

from __future__ import annotations

import contextlib
import fnmatch
import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from dcaf_like.application.messages import ToolSpec
from dcaf_like.application.ports import ToolContext, ToolOutput
from dcaf_like.domain import MAX_PARTS_BYTES, Attachment, InvalidPart, attachment
from dcaf_like.domain.attachment import check_total
from dcaf_like.extras import missing
from dcaf_like.toolsets import SEPARATOR, Toolset, safe_name
from dcaf_like.toolsets._mcp_connection import Connection, MCPServerUnavailable

__all__ = ["MCPServerUnavailable", "MCPTool", "MCPToolError", "MCPToolset"]

Patterns = str | Iterable[str]


class MCPToolError(Exception):
    """The MCP server answered a tool call with an error result (``isError``). Its text goes to the
    model as the call's failure."""

    def __init__(self, server: str, tool: str, text: str) -> None:
        self.server = server
        self.tool = tool
        self.text = text
        super().__init__(f"{server}/{tool}: {text}")


class MCPToolset(Toolset):
    """The tools of one MCP server, each needing approval unless `allow` names it.

    ``MCPToolset("k8s", command=["python", "k8s_server.py"])`` starts the server as a subprocess and
    speaks MCP over its stdin/stdout; ``MCPToolset("docs", url="http://127.0.0.1:8001/mcp")`` connects
    over streamable HTTP (`headers` are sent with every request: an ``Authorization`` header, say).

    - `allow`: tool names or glob patterns (``"list_*"``) of the server's tools that run without
      approval. Every other tool needs a human's approval: a server's own hints (``readOnlyHint``) are
      not trusted, since the server is what the gate protects against.
    - `editable`: names or patterns of tools whose arguments an approver may edit.
    - `secret`: names or patterns of arguments, in any of the server's tools, whose values people,
      logs and responses see masked (``@tool(secret=...)``, docs/approvals.md).
    - `namespaced`: always offer the tools as ``<name>__<tool>``; without it only a name another tool
      of the agent also has is namespaced.

    Nothing starts until an agent's first run needs the tools; then the connection stays open for
    later runs, until :meth:`close` (or the end of the process).
    """

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        allow: Patterns = (),
        editable: Patterns = (),
        secret: Patterns = (),
        namespaced: bool = False,
        connect_timeout: float = 30.0,
        call_timeout: float | None = None,
    ) -> None:
        try:
            import mcp  # noqa: F401
        except ImportError as exc:
            raise missing("MCPToolset needs the MCP SDK", "mcp", exc) from exc
        if not name or safe_name(name) != name or SEPARATOR in name:
            raise ValueError(
                f"MCP server name {name!r} may hold only letters, digits, '-' and single '_' "
                "(it prefixes tool names)"
            )
        if (command is None) == (url is None):
            raise ValueError(f"MCP server {name!r}: give either command=[...] (stdio) or url=... (HTTP)")
        if command is not None and (isinstance(command, str) or not command):
            raise ValueError(f"MCP server {name!r}: command is a list: the program, then its arguments")
        if connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive")
        self.name = name
        self.command = list(command) if command is not None else None
        self.url = url
        self.allow = _patterns(allow)
        self.editable = _patterns(editable)
        self.secret = _patterns(secret)
        self.namespaced = namespaced
        self.call_timeout = call_timeout
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._headers = dict(headers) if headers is not None else None
        self._connection = Connection(name, self._client, connect_timeout=connect_timeout)
        self._tools: list[MCPTool] | None = None

    def __repr__(self) -> str:
        where = f"command={self.command!r}" if self.command is not None else f"url={self.url!r}"
        return f"MCPToolset({self.name!r}, {where}, allow={list(self.allow)!r})"

    # -- Toolset ------------------------------------------------------------------------------------

    def load(self) -> list[MCPTool]:
        connection = self._connection
        return self._made(connection.portal.run(connection.tools()))

    async def aload(self) -> list[MCPTool]:
        connection = self._connection
        return self._made(await connection.portal.arun(connection.tools()))

    def close(self) -> None:
        self._connection.close()

    async def aclose(self) -> None:
        await self._connection.aclose()

    def __enter__(self) -> MCPToolset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------------------

    def _made(self, listed: list[Any]) -> list[MCPTool]:
        if self._tools is None:  # the first listing is the agent's; a reconnection keeps it
            self._tools = [self._tool(t) for t in listed]
        return self._tools

    def _tool(self, listed: Any) -> MCPTool:
        remote: str = listed.name
        name = safe_name(f"{self.name}{SEPARATOR}{remote}" if self.namespaced else remote)
        input_schema = dict(listed.input_schema or {"type": "object"})
        arguments = input_schema.get("properties") or {}
        return MCPTool(
            self,
            remote=remote,
            name=name,
            description=(listed.description or listed.title or remote).strip(),
            input_schema=input_schema,
            requires_approval=not _matches(remote, self.allow),
            editable=_matches(remote, self.editable),
            secret_arguments=frozenset(a for a in arguments if _matches(a, self.secret)),
        )

    def _client(self) -> Any:
        """A fresh ``mcp.Client`` for this server (made on the connection's loop, entered there)."""
        from mcp import Client

        if self.url is not None:
            if self._headers is None:
                return Client(self.url)
            return Client(_http_with_headers(self.url, self._headers))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert self.command is not None
        program, *args = self.command
        params = StdioServerParameters(command=program, args=args, env=self._env, cwd=self._cwd)
        return Client(stdio_client(params))


class MCPTool:
    """One tool of an MCP server. Its arguments are checked against the server's schema before the
    call is recorded, so an approver sees exactly what will be sent."""

    is_async = False  # blocking callers are served by the connection's own loop, not a new one

    def __init__(
        self,
        toolset: MCPToolset,
        *,
        remote: str,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        requires_approval: bool,
        editable: bool,
        secret_arguments: frozenset[str] = frozenset(),
    ) -> None:
        from dcaf_like.tools import schema as _schema

        self.toolset = toolset
        self.remote = remote
        self.name = name
        self.description = description
        self.requires_approval = requires_approval
        self.editable = editable
        self.secret_arguments = secret_arguments
        self._arguments = _schema.from_dict(name, input_schema)

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self._arguments.json_schema)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._arguments.validate(arguments)

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str | ToolOutput:
        connection = self.toolset._connection
        return self._output(connection.portal.run(self._call(arguments)))

    async def ainvoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str | ToolOutput:
        connection = self.toolset._connection
        return self._output(await connection.portal.arun(self._call(arguments)))

    async def _call(self, arguments: Mapping[str, Any]) -> Any:
        toolset = self.toolset
        return await toolset._connection.call(self.remote, dict(arguments), toolset.call_timeout)

    def _output(self, result: Any) -> str | ToolOutput:
        """The result as the model reads it: its text, and its images and files (``ImageContent``, an
        ``EmbeddedResource``'s blob) as attachments within the limits of a message's; one it cannot
        take is named in the text instead. An error result raises :class:`MCPToolError`."""
        blocks = result.content or ()
        attachments: list[Attachment] = []
        parts: list[str] = []
        for block in blocks:
            found = None if result.is_error else _attachment(block, len(attachments))
            if isinstance(found, Attachment):
                attachments.append(found)
                try:
                    check_total(attachments)
                except InvalidPart:
                    attachments.pop()
                    parts.append(
                        f"[{found.describe()} of {found.size} bytes left out: with it the result's images "
                        f"and files come to more than {MAX_PARTS_BYTES} bytes]"
                    )
            else:
                parts.append(found or _content_text(block))
        text = "\n".join(p for p in parts if p)
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
        if result.is_error:
            raise MCPToolError(self.toolset.name, self.remote, text or "the tool failed without saying why")
        return ToolOutput(text, tuple(attachments)) if attachments else text

    def __repr__(self) -> str:
        approval = "requires approval" if self.requires_approval else "runs without approval"
        return f"<MCPTool {self.name} ({self.toolset.name}/{self.remote}): {approval}>"


@contextlib.asynccontextmanager
async def _http_with_headers(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """Streamable HTTP with our own HTTP client, to send `headers` (the MCP SDK's timeouts: 30 s to
    connect, 300 s to read, since a server may hold a response stream open)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def _attachment(block: Any, index: int) -> Attachment | str | None:
    """An image block, or an embedded resource's blob, as an attachment (an image for an ``image/*``
    type, else a file named by its URI's last segment); a sentence saying why one is left out (too
    large, not base64, no media type); None for any other block. Nothing is fetched: a resource link
    stays a link."""
    kind = getattr(block, "type", "")
    if kind == "image":
        media_type, data, name = block.mime_type, block.data, None
    elif kind == "resource" and getattr(block.resource, "blob", None) is not None:
        resource = block.resource
        media_type, data = resource.mime_type or "application/octet-stream", resource.blob
        name = str(resource.uri).rstrip("/").rsplit("/", 1)[-1] or str(resource.uri)
    else:
        return None
    part = "image" if (media_type or "").startswith("image/") else "file"
    try:
        return attachment(part, media_type=media_type, data=data, name=name, index=index)
    except InvalidPart as exc:
        return f"[{part} {name or media_type or ''} of {len(data or '') * 3 // 4} bytes left out: {exc}]"


def _content_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if kind == "resource_link":
        return f"[resource {block.uri}]"
    if kind == "resource":
        text = getattr(block.resource, "text", None)
        return str(text) if text is not None else f"[resource {block.resource.uri}]"
    return f"[{kind or 'content'}]"


def _patterns(value: Patterns) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
