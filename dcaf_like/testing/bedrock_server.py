"""A scripted Amazon Bedrock runtime server on a loopback port: Converse and ConverseStream, offline.

It speaks the wire format boto3 expects: ``POST /model/{modelId}/converse`` (JSON), and
``POST /model/{modelId}/converse-stream`` in AWS event-stream framing (binary messages with headers,
each checked by CRC32), with errors as ``x-amzn-errortype`` headers. Point a real client at it::

    with BedrockConverseServer() as server:
        server.reply("All pods are healthy.")
        client = boto3.client("bedrock-runtime", endpoint_url=server.endpoint_url, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")

Each request takes the next scripted answer; :attr:`requests` keeps ``(model_id, body)`` of each.
"""

from __future__ import annotations

import binascii
import json
import struct
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from dcaf_like.testing._loopback import LoopbackServer


@dataclass(frozen=True)
class _Answer:
    text: str = ""
    chunks: tuple[str, ...] | None = None
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    reasoning: str = ""
    status: int = 200
    error_type: str = ""
    error_message: str = ""
    usage: tuple[int, int] = (21, 9)


@dataclass
class BedrockConverseServer(LoopbackServer):
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _script: deque[_Answer] = field(default_factory=deque)

    # -- scripting --------------------------------------------------------------------------------

    def reply(self, text: str, *, chunks: list[str] | None = None, reasoning: str = "") -> None:
        if chunks is not None and "".join(chunks) != text:
            raise ValueError("the chunks of a reply must add up to its text")
        self._script.append(
            _Answer(text=text, chunks=None if chunks is None else tuple(chunks), reasoning=reasoning)
        )

    def call(self, calls: list[tuple[str, dict[str, Any]]], *, text: str = "") -> None:
        self._script.append(_Answer(text=text, calls=tuple(calls)))

    def fail(self, status: int, error_type: str, message: str) -> None:
        """The next request gets this AWS error (e.g. 429 ThrottlingException)."""
        self._script.append(_Answer(status=status, error_type=error_type, error_message=message))

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        return self.root_url

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    def client(self, region: str = "us-east-1") -> Any:
        """A boto3 ``bedrock-runtime`` client for this server: test credentials, no retries
        (``total_max_attempts``: botocore's ``max_attempts=1`` still retries once)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "bedrock-runtime",
            endpoint_url=self.endpoint_url,
            region_name=region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"total_max_attempts": 1}),
        )

    def _next(self, model_id: str, body: dict[str, Any]) -> _Answer:
        self.requests.append((model_id, body))
        if not self._script:
            return _Answer(status=500, error_type="InternalServerException", error_message="script exhausted")
        return self._script.popleft()


def _handler(owner: BedrockConverseServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            parts = self.path.split("/")
            if len(parts) != 4 or parts[1] != "model" or parts[3] not in ("converse", "converse-stream"):
                self._error(404, "ResourceNotFoundException", f"no route {self.path}")
                return
            model_id, operation = unquote(parts[2]), parts[3]
            answer = owner._next(model_id, json.loads(raw or b"{}"))
            if answer.status != 200:
                self._error(answer.status, answer.error_type, answer.error_message)
            elif operation == "converse":
                self._json(_converse(answer))
            else:
                self._stream(answer)

        def _json(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, error_type: str, message: str) -> None:
            data = json.dumps({"message": message}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("x-amzn-errortype", f"{error_type}:http://internal.amazon.com/coral/")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, answer: _Answer) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.amazon.eventstream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event_type, payload in _stream_events(answer):
                frame = event_message(event_type, payload)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _usage(answer: _Answer) -> dict[str, int]:
    given, got = answer.usage
    return {"inputTokens": given, "outputTokens": got, "totalTokens": given + got}


def _tool_uses(answer: _Answer) -> list[dict[str, Any]]:
    return [
        {"toolUseId": f"tooluse_{uuid.uuid4().hex[:20]}", "name": name, "input": arguments}
        for name, arguments in answer.calls
    ]


def _converse(answer: _Answer) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if answer.reasoning:
        content.append({"reasoningContent": {"reasoningText": {"text": answer.reasoning}}})
    if answer.text:
        content.append({"text": answer.text})
    content += [{"toolUse": use} for use in _tool_uses(answer)]
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use" if answer.calls else "end_turn",
        "usage": _usage(answer),
        "metrics": {"latencyMs": 5},
    }


def _stream_events(answer: _Answer) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
    index = 0
    if answer.reasoning:
        delta = {"reasoningContent": {"text": answer.reasoning}}
        events += [("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})]
        events += [("contentBlockStop", {"contentBlockIndex": index})]
        index += 1
    pieces = answer.chunks if answer.chunks is not None else ((answer.text,) if answer.text else ())
    if pieces:
        events += [("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": p}}) for p in pieces]
        events += [("contentBlockStop", {"contentBlockIndex": index})]
        index += 1
    for use in _tool_uses(answer):
        start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
        events.append(("contentBlockStart", {"contentBlockIndex": index, "start": start}))
        arguments = json.dumps(use["input"], ensure_ascii=False)
        half = len(arguments) // 2
        for fragment in (arguments[:half], arguments[half:]):
            delta = {"toolUse": {"input": fragment}}
            events.append(("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
        events.append(("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    events.append(("messageStop", {"stopReason": "tool_use" if answer.calls else "end_turn"}))
    events.append(("metadata", {"usage": _usage(answer), "metrics": {"latencyMs": 5}}))
    return events


def event_message(event_type: str, payload: dict[str, Any]) -> bytes:
    """One AWS event-stream message: prelude (total length, headers length, CRC32), headers, JSON
    payload, CRC32 of everything before it."""
    headers = b"".join(
        _header(name, value)
        for name, value in (
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        )
    )
    body = json.dumps(payload, ensure_ascii=False).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + headers + body
    return message + struct.pack(">I", binascii.crc32(message))


def _header(name: str, value: str) -> bytes:
    encoded_name, encoded_value = name.encode(), value.encode()
    return (
        struct.pack(">B", len(encoded_name))
        + encoded_name
        + struct.pack(">BH", 7, len(encoded_value))  # 7: a string value
        + encoded_value
    )
