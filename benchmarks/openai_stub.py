"""An OpenAI-compatible chat completions server on asyncio, for benchmarks: every request gets the same
answer after `delay` seconds (plain JSON, or SSE when the request streams), so the server is never
the limit and what a client spends per call can be measured against it.

    .venv/bin/python benchmarks/openai_stub.py --delay 2      # prints its port, serves until killed

Its own process, started by :func:`started`: the CPU a client spends is then the client's alone.
The scripted server of the test kit (``dcaf_like.testing.OpenAICompatibleServer``) checks what a
request holds; this one answers as fast as it can.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

ANSWER = "web-1 is running."

_COMPLETION = json.dumps(
    {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1764300000,
        "model": "stub-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }
).encode()


def _sse() -> bytes:
    base = {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 1764300000,
        "model": "stub-model",
    }
    chunks = [
        {
            **base,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        },
        *(
            {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            for piece in ("web-1 ", "is ", "running.")
        ),
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**base, "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}},
    ]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


_STREAM = _sse()


def _response(status: str, content_type: bytes, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: ".encode() + content_type
    return head + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


class _Connection(asyncio.Protocol):
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = _content_length(self.buffer[:end])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            streams = b'"stream":true' in body.replace(b" ", b"")
            answer = (
                _response("200 OK", b"text/event-stream", _STREAM)
                if streams
                else _response("200 OK", b"application/json", _COMPLETION)
            )
            if self.delay:
                asyncio.get_running_loop().call_later(self.delay, self._send, answer)
            else:
                self._send(answer)

    def _send(self, answer: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(port: int, delay: float) -> None:
    server = await asyncio.get_running_loop().create_server(
        lambda: _Connection(delay), "127.0.0.1", port, backlog=4096
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


@contextmanager
def started(delay: float = 0.0) -> Iterator[str]:
    """The stub in a process of its own; yields its base URL (``http://127.0.0.1:PORT/v1``)."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--delay", str(delay)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.delay))


if __name__ == "__main__":
    main()
