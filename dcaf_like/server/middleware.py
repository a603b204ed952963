"""ASGI middleware: a request id on every request, the perimeter's checks, and a cap on request body
size."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from contextvars import ContextVar
from typing import Any

from dcaf_like.server.errors import HttpError
from dcaf_like.server.perimeter import Perimeter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("dcaf_like.server")

#: The largest request body a server takes, unless told otherwise (``max_body_bytes``).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024

request_id_var: ContextVar[str] = ContextVar("dcaf_like_request_id", default="-")

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def current_request_id() -> str:
    return request_id_var.get()


class RequestMiddleware:
    """What every HTTP request gets, in one layer (each layer costs every request):

    - an id: the caller's ``X-Request-ID`` when it is a sane token, else a minted one; returned as a
      header, put in the access log line, and available to error bodies;
    - the perimeter's checks (`perimeter`: Host, Origin, Content-Type; see ``perimeter.py``);
    - a body the server can measure: ``Transfer-Encoding`` with ``Content-Length``, or a
      ``Content-Length`` that is not a plain number, is a 400 (RFC 9112 6.3: the framing is ambiguous);
    - a cap on the body: over `max_bytes` is a 413, counting the bytes received whatever the headers
      declared, and never holding more than `max_bytes` of them;
    - a client that hangs up before its body is whole is one WARNING line, and the app never runs.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, perimeter: Perimeter | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.perimeter = perimeter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket" and self.perimeter is not None:
                refused = self.perimeter.refusal(scope, dict(scope["headers"]))
                if refused is not None:  # before the handshake: the client gets a 403
                    logger.info(
                        "websocket %s refused: %s: %s", scope.get("path"), refused.code, refused.message
                    )
                    await send({"type": "websocket.close", "code": 1008})
                    return
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = dict(scope["headers"])
        supplied = headers.get(b"x-request-id")
        request_id = supplied.decode("latin-1") if supplied else ""
        if not (request_id and _CLIENT_ID.fullmatch(request_id)):
            request_id = os.urandom(16).hex()
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 0
        logged = False
        aborted = ""

        def log_access() -> None:
            nonlocal logged
            logged = True
            level = logging.WARNING if aborted else logging.INFO
            if not logger.isEnabledFor(level):
                return
            duration = (time.perf_counter() - started) * 1000
            state = scope.get("state") or {}
            logger.log(
                level,
                "%s %s -> %s in %.1f ms [request_id=%s]%s",
                scope.get("method"),
                scope.get("path"),
                status or "aborted",
                duration,
                request_id,
                aborted,
                extra={
                    "request_id": request_id,
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status or None,
                    "duration_ms": round(duration, 3),
                    "conversation_id": state.get("conversation_id"),
                    "user": state.get("identity"),
                },
            )

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", request_id.encode())]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                log_access()  # before the last byte leaves, so the log never lags the client
            await send(message)

        try:
            refused = self.perimeter.refusal(scope, headers) if self.perimeter is not None else None
            if refused is not None:
                await _refuse(refused, send_with_id)
            elif b"content-length" not in headers and b"transfer-encoding" not in headers:
                await self.app(scope, receive, send_with_id)  # no body at all (HTTP/1.1, RFC 9112 6.3)
            else:
                received = await self._body(headers, receive, send_with_id)
                if isinstance(received, str):
                    aborted = received
                elif received is not None:
                    await self.app(scope, _replay(received, receive), send_with_id)
        finally:
            if not logged:
                log_access()
            request_id_var.reset(token)

    async def _body(self, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> bytes | str | None:
        """The whole body; None once refused (the answer sent); a sentence when the client hung up."""
        declared = headers.get(b"content-length")
        if declared is not None:
            if b"transfer-encoding" in headers:
                error = HttpError(
                    400,
                    "ambiguous_body_length",
                    "a request may not carry both Transfer-Encoding and Content-Length (RFC 9112 6.3)",
                    field="Content-Length",
                )
                await _refuse(error, send, close=True)
                return None
            if not declared.isdigit() or len(declared) > 18:  # ASCII digits only: no sign, space, list
                shown = declared.decode("latin-1")[:40]
                error = HttpError(
                    400, "invalid_content_length", f"Content-Length {shown!r} is not a number of bytes",
                    field="Content-Length",
                )  # fmt: skip
                await _refuse(error, send, close=True)
                return None
            if int(declared) > self.max_bytes:
                await _refuse(self._too_large(), send, close=True)
                return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                expected = f" of {int(declared)}" if declared is not None else ""
                return f": the client closed the connection after {size}{expected} bytes of its body"
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:  # counted, whatever the headers said
                await _refuse(self._too_large(), send, close=True)
                return None
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _too_large(self) -> HttpError:
        return HttpError(
            413,
            "body_too_large",
            f"the request body is over the server's limit of {self.max_bytes} bytes: send less, or raise "
            "the limit where the server is started (dcaf-like serve --max-body-bytes N, or "
            "max_body_bytes=N for serve() and create_app())",
            field="body",
        )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the app `body` whole, then whatever the connection says next."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(error: HttpError, send: Send, *, close: bool = False) -> None:
    """`error` as the JSON answer; with `close`, the connection closes after it (the rest of a body
    the server will not read is not read)."""
    body = json.dumps(error.body(current_request_id())).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
