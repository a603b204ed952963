"""A small client of the Chat Completions wire format on httpcore, the HTTP transport beneath httpx.

What :class:`~dcaf_like.runtimes.openai_chat.OpenAIRuntime` sends when it is not given an SDK client:
``POST {base_url}/chat/completions`` with the body as JSON, the key as a bearer token, the answer read
as JSON or as server-sent events. It keeps what the ``openai`` SDK does that a caller relies on (its
retries and their delays, one time limit for connecting, writing and each read, proxies named by the
environment, ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID``) and leaves the rest (request models, response
models, httpx's client) out, which is most of what a model call cost in CPU (docs/benchmarks.md,
"Provider client"). Its failures are :class:`WireError`; the runtime types them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import time
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import httpcore

#: As the SDK: half a second, doubled per retry, at most 8, less up to a quarter (jitter).
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
#: A server's Retry-After is honoured up to two minutes; a longer one is not retried.
MAX_RETRY_AFTER = 120.0
#: The SDK's connection limits.
MAX_CONNECTIONS = 1000
MAX_KEEPALIVE = 100


class WireError(Exception):
    """A call that failed: an HTTP status with the provider's message, a time limit, or no connection."""

    def __init__(self, message: str, *, status: int | None = None, kind: str = "status") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        #: ``"status"`` (the server answered an error), ``"timeout"`` or ``"connection"``.
        self.kind = kind


class ChatCompletions:
    """One provider's endpoint: a blocking connection pool, and one asyncio pool per event loop
    (the runtime keeps them, :class:`~dcaf_like.concurrency.bridges.PerLoop`)."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float, max_retries: int) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_retries = max_retries
        headers = [
            (b"Authorization", f"Bearer {api_key}".encode()),
            (b"Content-Type", b"application/json"),
            (b"Accept", b"application/json"),
            (b"User-Agent", b"dcaf_like"),
        ]
        for name, variable in (
            ("OpenAI-Organization", "OPENAI_ORG_ID"),
            ("OpenAI-Project", "OPENAI_PROJECT_ID"),
        ):
            if value := os.environ.get(variable):
                headers.append((name.encode(), value.encode()))
        self._headers = [(b"Host", self.url.split("/", 3)[2].encode()), *headers]
        self._extensions = {
            "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        }
        self._proxy = _proxy_for(self.url)
        self._pool: httpcore.ConnectionPool | None = None

    def __repr__(self) -> str:  # never the headers: they hold the key
        return f"ChatCompletions({self.url!r})"

    # -- blocking ---------------------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        content = json.dumps(body).encode()
        for attempt in range(self.max_retries + 1):
            headers: Iterable[tuple[bytes, bytes]] = ()
            try:
                response = self._blocking().request(
                    "POST",
                    self.url,
                    headers=self._with_length(content),
                    content=content,
                    extensions=self._extensions,
                )
            except (httpcore.TimeoutException, httpcore.NetworkError) as exc:
                failure = _cut(exc)
            else:
                if response.status < 400:
                    return _json(response.content)
                failure = _status_error(response.status, response.content)
                headers = response.headers
            time.sleep(self._retry_after(attempt, failure, headers))
        raise AssertionError("unreachable")  # pragma: no cover

    def stream(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        content = json.dumps(body).encode()
        for attempt in range(self.max_retries + 1):
            headers: Iterable[tuple[bytes, bytes]] = ()
            try:
                with self._blocking().stream(
                    "POST",
                    self.url,
                    headers=self._with_length(content),
                    content=content,
                    extensions=self._extensions,
                ) as response:
                    if response.status < 400:
                        yield from _events(response.iter_stream())  # a failure from here on is not retried
                        return
                    failure = _status_error(response.status, b"".join(response.iter_stream()))
                    headers = response.headers
            except (httpcore.TimeoutException, httpcore.NetworkError) as exc:
                failure = _cut(exc)
            time.sleep(self._retry_after(attempt, failure, headers))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __del__(self) -> None:
        # As the SDK's client: a runtime nobody closed releases its idle connections when collected.
        with contextlib.suppress(Exception):
            self.close()

    def _blocking(self) -> httpcore.ConnectionPool:
        if self._pool is None:
            if self._proxy:
                self._pool = httpcore.HTTPProxy(
                    proxy_url=self._proxy,
                    max_connections=MAX_CONNECTIONS,
                    max_keepalive_connections=MAX_KEEPALIVE,
                )
            else:
                self._pool = httpcore.ConnectionPool(
                    max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE
                )
        return self._pool

    # -- asyncio ----------------------------------------------------------------------------------

    def async_pool(self) -> httpcore.AsyncConnectionPool | AsyncConnections:
        """The connections of the running event loop (they belong to that loop)."""
        if self._proxy:
            return httpcore.AsyncHTTPProxy(
                proxy_url=self._proxy,
                max_connections=MAX_CONNECTIONS,
                max_keepalive_connections=MAX_KEEPALIVE,
            )
        return AsyncConnections(self.url)

    async def acreate(
        self, pool: httpcore.AsyncConnectionPool | AsyncConnections, body: dict[str, Any]
    ) -> dict[str, Any]:
        content = json.dumps(body).encode()
        for attempt in range(self.max_retries + 1):
            headers: Iterable[tuple[bytes, bytes]] = ()
            try:
                response = await pool.request(
                    "POST",
                    self.url,
                    headers=self._with_length(content),
                    content=content,
                    extensions=self._extensions,
                )
            except (httpcore.TimeoutException, httpcore.NetworkError) as exc:
                failure = _cut(exc)
            else:
                if response.status < 400:
                    return _json(response.content)
                failure = _status_error(response.status, response.content)
                headers = response.headers
            await asyncio.sleep(self._retry_after(attempt, failure, headers))
        raise AssertionError("unreachable")  # pragma: no cover

    async def astream(
        self, pool: httpcore.AsyncConnectionPool | AsyncConnections, body: dict[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        content = json.dumps(body).encode()
        for attempt in range(self.max_retries + 1):
            headers: Iterable[tuple[bytes, bytes]] = ()
            try:
                async with pool.stream(
                    "POST",
                    self.url,
                    headers=self._with_length(content),
                    content=content,
                    extensions=self._extensions,
                ) as response:
                    if response.status < 400:
                        async for event in _aevents(response.aiter_stream()):  # not retried from here on
                            yield event
                        return
                    failure = _status_error(
                        response.status, b"".join([c async for c in response.aiter_stream()])
                    )
                    headers = response.headers
            except (httpcore.TimeoutException, httpcore.NetworkError) as exc:
                failure = _cut(exc)
            await asyncio.sleep(self._retry_after(attempt, failure, headers))

    def _retry_after(self, attempt: int, failure: WireError, headers: Iterable[tuple[bytes, bytes]]) -> float:
        """How long to wait before trying again after `failure`, or `failure` raised when the SDK
        would not try again (a status it does not retry, or the last attempt)."""
        if failure.kind == "status" and not _retries(failure.status or 0, headers):
            raise failure
        if attempt == self.max_retries:
            raise failure
        return _delay(attempt, headers)

    def _with_length(self, content: bytes) -> list[tuple[bytes, bytes]]:
        return [*self._headers, (b"Content-Length", str(len(content)).encode())]


class AsyncConnections:
    """Keep-alive connections to one server for one event loop: a request takes an idle connection or
    opens one, and gives it back once its answer was read (at most :data:`MAX_KEEPALIVE` kept idle).

    Not httpcore's ``AsyncConnectionPool``: it looks at every connection for every request it places
    (``_assign_requests_to_connections``), so its cost per call grows with the calls in flight, and a
    server holding a thousand turns waiting on their model spent most of its CPU there
    (docs/benchmarks.md, "Runs in flight"). Here taking and giving back a connection costs the same
    however many are open. There is no limit on connections in flight: each waits on its own answer.
    """

    def __init__(self, url: str) -> None:
        self.origin = httpcore.URL(url).origin
        self.idle: list[httpcore.AsyncHTTPConnection] = []

    async def request(
        self, method: str, url: str, *, headers: Any, content: bytes, extensions: Any
    ) -> httpcore.Response:
        connection = await self._take()
        try:
            return await connection.request(
                method, url, headers=headers, content=content, extensions=extensions
            )
        finally:
            await self._give_back(connection)

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, url: str, *, headers: Any, content: bytes, extensions: Any
    ) -> AsyncIterator[httpcore.Response]:
        connection = await self._take()
        try:
            async with connection.stream(
                method, url, headers=headers, content=content, extensions=extensions
            ) as response:
                yield response
        finally:
            await self._give_back(connection)

    async def aclose(self) -> None:
        idle, self.idle = self.idle, []
        for connection in idle:
            await connection.aclose()

    async def _take(self) -> httpcore.AsyncHTTPConnection:
        while self.idle:
            connection = self.idle.pop()
            if connection.is_idle() and not connection.has_expired():
                return connection
            await connection.aclose()  # the server closed it, or it idled too long
        return httpcore.AsyncHTTPConnection(self.origin)

    async def _give_back(self, connection: httpcore.AsyncHTTPConnection) -> None:
        if connection.is_idle() and len(self.idle) < MAX_KEEPALIVE:
            self.idle.append(connection)
        elif not connection.is_closed():
            await connection.aclose()


# -- reading answers --------------------------------------------------------------------------------


def _json(content: bytes) -> dict[str, Any]:
    try:
        value = json.loads(content)
    except ValueError:
        raise WireError(f"the server answered with no JSON: {content[:200]!r}", kind="status") from None
    if not isinstance(value, dict):
        raise WireError(f"the server answered with no JSON object: {content[:200]!r}", kind="status")
    return value


def _events(pieces: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    lines = _Lines()
    try:
        for piece in pieces:
            for event in lines.add(piece):
                if event is None:
                    return
                yield event
    except (httpcore.TimeoutException, httpcore.NetworkError) as exc:
        raise _cut(exc) from exc


async def _aevents(pieces: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    lines = _Lines()
    try:
        async for piece in pieces:
            for event in lines.add(piece):
                if event is None:
                    return
                yield event
    except (httpcore.TimeoutException, httpcore.NetworkError) as exc:
        raise _cut(exc) from exc


def _cut(exc: Exception) -> WireError:
    """A request cut by a timeout or the network (a stream cut once it had begun is never tried again:
    what was shown cannot be taken back)."""
    return _timeout(exc) if isinstance(exc, httpcore.TimeoutException) else _no_connection(exc)


class _Lines:
    """Server-sent events as they arrive in pieces: each event's ``data`` read as JSON; None at
    ``[DONE]``. An event that carries an ``error`` is raised, as the SDK does."""

    def __init__(self) -> None:
        self.pending = b""
        self.data: list[bytes] = []

    def add(self, piece: bytes) -> Iterator[dict[str, Any] | None]:
        self.pending += piece
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if line:
                if line.startswith(b"data:"):
                    value = line[5:]
                    self.data.append(value[1:] if value.startswith(b" ") else value)
                continue
            if not self.data:
                continue
            data, self.data = b"\n".join(self.data), []
            if data == b"[DONE]":
                yield None
                return
            event = _json(data)
            if isinstance(event.get("error"), dict | str):
                raise WireError(_message(event), kind="status")
            yield event


def _message(body: dict[str, Any]) -> str:
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return str(error if error is not None else body)[:500]


def _status_error(status: int, content: bytes) -> WireError:
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    detail = _message(body) if isinstance(body, dict) else content.decode("utf-8", "replace")[:500]
    return WireError(detail or f"HTTP {status}", status=status)


def _timeout(exc: Exception) -> WireError:
    return WireError("Request timed out.", kind="timeout")


def _no_connection(exc: Exception) -> WireError:
    return WireError(f"Connection error: {type(exc).__name__}", kind="connection")


# -- retries, as the SDK decides them -----------------------------------------------------------------


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _retry_after(headers: Iterable[tuple[bytes, bytes]]) -> float | None:
    """Seconds a server asks to wait (``retry-after-ms``, ``retry-after`` in seconds or as a date)."""
    headers = list(headers)
    for name, divisor in ((b"retry-after-ms", 1000), (b"retry-after", 1)):
        value = _header(headers, name)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        return delay / divisor if math.isfinite(delay) else MAX_RETRY_AFTER + 1
    value = _header(headers, b"retry-after")
    if value is None:
        return None
    import email.utils

    try:
        return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        return None


def _retries(status: int, headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether an error answer is tried again: as the SDK, a server's ``x-should-retry`` first, then
    408, 409, 429 and 5xx; never when the server asks to wait more than two minutes."""
    headers = list(headers)
    after = _retry_after(headers)
    if after is not None and after > MAX_RETRY_AFTER:
        return False
    said = _header(headers, b"x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    return status in (408, 409, 429) or status >= 500


def _delay(attempt: int, headers: Iterable[tuple[bytes, bytes]]) -> float:
    """Seconds before retry number `attempt` + 1: the server's Retry-After up to two minutes, else
    half a second doubled per retry (at most 8), less up to a quarter."""
    after = _retry_after(headers)
    if after is not None and 0 < after <= MAX_RETRY_AFTER:
        return after
    return min(INITIAL_RETRY_DELAY * 2.0**attempt, MAX_RETRY_DELAY) * (1 - 0.25 * random.random())


def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``,
    ``NO_PROXY``), as httpx, and so the SDK, would use it."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rsplit(":", 1)[0]
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy
