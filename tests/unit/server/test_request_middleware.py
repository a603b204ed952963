"""RequestMiddleware and the Perimeter at the ASGI level, with header values exactly as a server might
pass them on: uvicorn's h11 parser already normalises or refuses some (``Content-Length: " 10"``),
other servers (httptools, hypercorn) may not, and the middleware must not depend on which."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from dcaf_like.server.middleware import RequestMiddleware
from dcaf_like.server.perimeter import Perimeter

BODY = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()


class Exchange:
    """One request through the middleware: what the app received, and what was sent back."""

    def __init__(self, max_bytes: int = 1024, perimeter: Perimeter | None = None) -> None:
        self.app_bodies: list[bytes] = []
        self.sent: list[dict[str, Any]] = []
        self.received_messages = 0
        self.middleware = RequestMiddleware(self.app, max_bytes, perimeter or Perimeter([], []))

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.app_bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    def run(self, headers: list[tuple[bytes, bytes]], messages: list[dict[str, Any]], **scope: Any) -> None:
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            self.received_messages += 1
            return queue.pop(0) if queue else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            self.sent.append(message)

        base = {"type": "http", "method": "POST", "path": "/api/chat", "scheme": "http"}
        full = {**base, "server": ("127.0.0.1", 8000), "headers": headers, **scope}
        asyncio.run(self.middleware(full, receive, send))

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = json.loads(self.sent[1]["body"])["error"]
        return error


def head(*extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"), *extra]


def body(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": data, "more_body": more}


@pytest.mark.parametrize("declared", [b" 10", b"+10", b"10,10", b"10 ", b"1_0", b"\xd9\xa1\xd9\xa0", b""])
def test_a_content_length_that_is_not_plain_digits_is_a_400_and_the_app_never_runs(declared):
    exchange = Exchange()

    exchange.run(head((b"content-length", declared)), [body(BODY)])

    assert exchange.status == 400
    assert exchange.error["code"] == "invalid_content_length"
    assert exchange.app_bodies == []
    assert (b"connection", b"close") in exchange.sent[0]["headers"]


def test_transfer_encoding_with_content_length_is_a_400_before_the_body_is_read():
    exchange = Exchange()
    framing = ((b"transfer-encoding", b"chunked"), (b"content-length", b"10"))

    exchange.run(head(*framing), [body(b"x" * 1000, more=True)] * 100)

    assert exchange.status == 400
    assert exchange.error["code"] == "ambiguous_body_length"
    assert exchange.received_messages == 0
    assert exchange.app_bodies == []


def test_bytes_are_counted_whatever_the_length_declared_and_reading_stops_at_the_cap():
    """A server that delivered more than the declared length (it should not) is cut off all the same."""
    exchange = Exchange(max_bytes=4096)

    exchange.run(head((b"content-length", b"10")), [body(b"x" * 1000, more=True)] * 100)

    assert exchange.status == 413
    assert exchange.error["code"] == "body_too_large"
    assert exchange.received_messages == 5, "no more was read once the cap was passed"
    assert exchange.app_bodies == []


def test_a_body_under_the_cap_reaches_the_app_whole():
    exchange = Exchange()

    exchange.run(head((b"transfer-encoding", b"chunked")), [body(BODY[:5], more=True), body(BODY[5:])])

    assert exchange.status == 200
    assert exchange.app_bodies == [BODY]


def test_a_client_that_hangs_up_mid_body_is_one_warning_and_the_app_never_runs(caplog):
    exchange = Exchange()

    with caplog.at_level(logging.INFO, logger="dcaf_like.server"):
        exchange.run(head((b"content-length", b"1000")), [body(b"{", more=True)])

    assert exchange.sent == []
    assert exchange.app_bodies == []
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "after 1 of 1000 bytes" in record.getMessage()


def test_a_websocket_handshake_from_a_foreign_host_or_origin_is_closed_before_the_app():
    opened: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        opened.append(scope)

    middleware = RequestMiddleware(app, 1024, Perimeter([], []))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    def handshake(*headers: tuple[bytes, bytes]) -> None:
        scope = {"type": "websocket", "path": "/ws", "scheme": "ws", "server": ("127.0.0.1", 8000)}
        asyncio.run(middleware({**scope, "headers": list(headers)}, receive, send))

    handshake((b"host", b"rebind.attacker.test:8000"))
    handshake((b"host", b"127.0.0.1:8000"), (b"origin", b"http://evil.example"))
    assert [m["type"] for m in sent] == ["websocket.close", "websocket.close"]
    assert opened == []

    handshake((b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"))
    assert len(opened) == 1


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "allowed"),
    [
        (b"http://127.0.0.1:8000", b"127.0.0.1:8000", "http", True),
        (b"http://localhost", b"localhost:80", "http", True),  # the default port written or not
        (b"https://ops.example.com", b"ops.example.com", "https", True),
        (b"http://ops.example.com", b"ops.example.com", "https", False),  # another scheme
        (b"http://127.0.0.1:8001", b"127.0.0.1:8000", "http", False),  # another port
        (b"https://configured.example:8443/", b"127.0.0.1:8000", "http", True),
        (b"https://configured.example", b"127.0.0.1:8000", "http", False),
        (b"null", b"127.0.0.1:8000", "http", False),
        (b"http://127.0.0.1:8000/path", b"127.0.0.1:8000", "http", False),
    ],
)
def test_an_origin_passes_when_it_is_the_servers_own_or_configured(origin, host, scheme, allowed):
    perimeter = Perimeter(["ops.example.com"], ["https://configured.example:8443"])
    scope = {"type": "http", "method": "POST", "scheme": scheme, "server": ("127.0.0.1", 8000)}

    refusal = perimeter.refusal(
        scope, {b"host": host, b"origin": origin, b"content-type": b"application/json"}
    )

    assert (refusal is None) is allowed, refusal


def test_configuration_that_cannot_mean_a_host_or_an_origin_is_refused_when_the_app_is_built():
    with pytest.raises(ValueError, match="allowed host"):
        Perimeter(["ops.example.com/path"], [])
    with pytest.raises(ValueError, match="allowed origins"):
        Perimeter([], ["ops.example.com"])
    with pytest.raises(TypeError, match="list"):
        Perimeter("ops.example.com", [])
