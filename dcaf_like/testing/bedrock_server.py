"""A scripted Amazon Bedrock runtime server on a loopback port: Converse and ConverseStream, offline.

It speaks the wire format boto3 expects: ``POST /model/{modelId}/converse`` (JSON), and
``POST /model/{modelId}/converse-stream`` in AWS event-stream framing (binary messages with headers,
each checked by CRC32), with errors as ``x-amzn-errortype`` headers. Point a real client at it::

    with BedrockConverseServer() as server:
        server.reply("All pods are healthy.")
        client = boto3.client("bedrock-runtime", endpoint_url=server.endpoint_url, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")

Each request takes the next scripted answer; :attr:`requests` keeps ``(model_id, body)`` of each.
A request whose content blocks Converse would refuse (a blank text, an image or a document not as
its reference says: format, base64 bytes that are what the format says, name, size, count) is
answered 400 ``ValidationException`` before the script is consulted, as Bedrock does.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
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
            body = json.loads(raw or b"{}")
            if problem := content_problem(body.get("messages")):
                owner.requests.append((model_id, body))
                self._error(400, "ValidationException", problem)
                return
            answer = owner._next(model_id, body)
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


_BLOCKS = {"text", "image", "document", "video", "audio", "toolUse", "toolResult", "guardContent"}
_BLOCKS |= {"cachePoint", "reasoningContent", "citationsContent", "searchResult"}
_IMAGE_FORMATS = ("png", "jpeg", "gif", "webp")
_DOCUMENT_FORMATS = ("pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md")
#: How each binary format's bytes begin (a text format has no signature).
_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "gif": (b"GIF87a", b"GIF89a"),
    "webp": (b"RIFF",),
    "pdf": (b"%PDF-",),
    "docx": (b"PK\x03\x04",),
    "xlsx": (b"PK\x03\x04",),
    "doc": (b"\xd0\xcf\x11\xe0",),
    "xls": (b"\xd0\xcf\x11\xe0",),
}
_DOCUMENT_NAME = re.compile(r"[A-Za-z0-9\s()\[\]-]{1,200}")
_DOUBLE_SPACE = re.compile(r"\s\s")


def content_problem(messages: Any) -> str | None:
    """What Converse would refuse in `messages`, in its words, or None. Its rules (the ``Message``,
    ``ImageBlock`` and ``DocumentBlock`` references): one member per block; no blank text; images and
    documents in user messages only, with a format it knows and base64 ``bytes``; an image at most
    3.75 MB and 20 a request; a document at most 4.5 MB and 5 a request, named with letters, digits,
    single spaces, hyphens, parentheses and brackets, no two alike, and beside a text block."""
    if not isinstance(messages, list) or not messages:
        return "A conversation must start with a user message."
    images = 0
    names: list[str] = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not content:
            return f"The content field in the Message object at messages.{i} is empty."
        for j, block in enumerate(content):
            where = f"messages.{i}.content.{j}"
            if problem := _block_problem(block, message.get("role"), where):
                return problem
            images += "image" in block
            if images > 20:
                return "You can't include more than 20 images in a request."
            if "document" in block:
                if block["document"]["name"] in names:
                    return "Messages can't contain duplicate document names."
                names.append(block["document"]["name"])
                if len(names) > 5:
                    return "You can't include more than 5 documents in a request."
                if not any(isinstance(b, dict) and "text" in b for b in content):
                    return f"A message with a document must also have a text block: messages.{i}."
    return None


def _block_problem(block: Any, role: Any, where: str) -> str | None:
    if not isinstance(block, dict) or len(block) != 1 or not set(block) <= _BLOCKS:
        return f"The ContentBlock object at {where} must set one of: {', '.join(sorted(_BLOCKS))}."
    if "text" in block and not (isinstance(block["text"], str) and block["text"].strip()):
        return f"The text field in the ContentBlock object at {where} is blank. Add text, try again."
    if ("image" in block or "document" in block) and role != "user":
        return f"The ContentBlock object at {where} can only be in a user message."
    if "image" in block:
        return _media_problem(block["image"], where, _IMAGE_FORMATS, 3_750_000)
    if "document" in block:
        name = block["document"].get("name") if isinstance(block["document"], dict) else None
        if not isinstance(name, str) or not _DOCUMENT_NAME.fullmatch(name) or _DOUBLE_SPACE.search(name):
            return (
                f"The document file name at {where} can only contain alphanumeric characters, "
                "whitespace characters, hyphens, parentheses, and square brackets. The name "
                "can't contain more than one consecutive whitespace character."
            )
        return _media_problem(block["document"], where, _DOCUMENT_FORMATS, 4_500_000)
    return None


def _media_problem(block: Any, where: str, formats: tuple[str, ...], limit: int) -> str | None:
    """An image's or a document's format and bytes, as Converse checks them."""
    if not isinstance(block, dict) or block.get("format") not in formats:
        return f"The format at {where} must be one of {list(formats)}."
    source = block.get("source")
    if not isinstance(source, dict) or set(source) != {"bytes"}:
        return f"The source at {where} must set exactly one of bytes, s3Location."
    try:
        data = base64.b64decode(source["bytes"], validate=True)
    except (binascii.Error, TypeError, ValueError):
        return f"Unable to parse the bytes at {where}: they are not base64."
    if len(data) > limit:
        return f"The {block['format']} at {where} is larger than {limit} bytes."
    signatures = _SIGNATURES.get(block["format"])
    if signatures and not data.startswith(signatures):
        return f"Unable to process the input at {where}: its bytes are not {block['format']}."
    return None


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
