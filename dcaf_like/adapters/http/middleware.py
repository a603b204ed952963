"""ASGI middleware: a request id on every request, and a cap on request body size."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("dcaf_like.server")

request_id_var: ContextVar[str] = ContextVar("dcaf_like_request_id", default="-")

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def current_request_id() -> str:
    return request_id_var.get()


class RequestMiddleware:
    """What every HTTP request gets, in one layer (each layer costs every request):

    - an id: the caller's ``X-Request-ID`` when it is a sane token, else a minted one; returned as a
      header, put in the access log line, and available to error bodies;
    - a cap on the body: over `max_bytes` is a 413, whether or not the body declared its length.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        supplied = declared = None
        for key, value in scope["headers"]:
            if key == b"x-request-id":
                supplied = bytes(value).decode("latin-1")
            elif key == b"content-length":
                declared = bytes(value)
        request_id = supplied if supplied and _CLIENT_ID.fullmatch(supplied) else os.urandom(16).hex()
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 0
        logged = False

        def log_access() -> None:
            nonlocal logged
            logged = True
            if not logger.isEnabledFor(logging.INFO):
                return
            duration = (time.perf_counter() - started) * 1000
            state = scope.get("state") or {}
            logger.info(
                "%s %s -> %s in %.1f ms [request_id=%s]",
                scope.get("method"),
                scope.get("path"),
                status or "aborted",
                duration,
                request_id,
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
            if scope.get("method") in _BODILESS:
                await self.app(scope, receive, send_with_id)
            elif declared is not None and declared.isdigit():
                # The server reads no more than a declared length: checking it is enough.
                if int(declared) > self.max_bytes:
                    await self._refuse(send_with_id)
                else:
                    await self.app(scope, receive, send_with_id)
            else:
                await self._counted(scope, receive, send_with_id)
        finally:
            if not logged:
                log_access()
            request_id_var.reset(token)

    async def _counted(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A body of undeclared length (chunked): read it whole, refusing it once over the limit,
        then hand it to the app."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {
                "error": {
                    "code": "body_too_large",
                    "message": f"the request body is over the server's limit of {self.max_bytes} bytes",
                    "field": "body",
                    "request_id": current_request_id(),
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})


_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})
