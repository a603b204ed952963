"""A scripted Gemini API server on a loopback port: ``generateContent`` and ``streamGenerateContent``.

It speaks the REST wire format google-genai (and so Google ADK's ``Gemini`` model) uses:
``POST /{version}/models/{model}:generateContent`` (JSON) and ``:streamGenerateContent?alt=sse`` (server-sent
events, one ``GenerateContentResponse`` each), errors as ``{"error": {"code", "message", "status"}}``::

    with GeminiServer() as server:
        server.reply("All pods are healthy.")
        model = Gemini(model="gemini-2.5-flash", base_url=server.base_url)

Each request takes the next scripted answer; :attr:`requests` keeps ``(model, body)`` of each.
A request whose parts the API would refuse (a part with no data or two, ``inlineData`` that is not
base64 of what its ``mimeType`` says, a MIME type Gemini does not read, ``fileData`` without a
fetchable URI) is answered 400 ``INVALID_ARGUMENT`` before the script is consulted, as Gemini does.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from dcaf_like.testing._loopback import LoopbackServer

_STATUS = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass(frozen=True)
class _Answer:
    text: str = ""
    chunks: tuple[str, ...] | None = None
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    thought: str = ""
    status: int = 200
    message: str = ""


@dataclass
class GeminiServer(LoopbackServer):
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _script: deque[_Answer] = field(default_factory=deque)

    def reply(self, text: str, *, chunks: list[str] | None = None, thought: str = "") -> None:
        if chunks is not None and "".join(chunks) != text:
            raise ValueError("the chunks of a reply must add up to its text")
        self._script.append(
            _Answer(text=text, chunks=None if chunks is None else tuple(chunks), thought=thought)
        )

    def call(self, calls: list[tuple[str, dict[str, Any]]], *, text: str = "") -> None:
        self._script.append(_Answer(text=text, calls=tuple(calls)))

    def fail(self, status: int, message: str) -> None:
        self._script.append(_Answer(status=status, message=message))

    @property
    def base_url(self) -> str:
        return self.root_url

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    def _next(self, model: str, body: dict[str, Any]) -> _Answer:
        self.requests.append((model, body))
        if not self._script:
            return _Answer(status=500, message="the test script is exhausted")
        return self._script.popleft()


def _handler(owner: GeminiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?")[0]
            model, _, method = path.rpartition("/models/")[2].partition(":")
            if method not in ("generateContent", "streamGenerateContent"):
                self._json(404, _error(404, f"no route {self.path}"))
                return
            if problem := content_problem(body.get("contents")):
                owner.requests.append((model, body))
                self._json(400, _error(400, problem))
                return
            answer = owner._next(model, body)
            if answer.status != 200:
                self._json(answer.status, _error(answer.status, answer.message))
            elif method == "generateContent":
                self._json(200, _response(_parts(answer, answer.text), final=True))
            else:
                self._sse(answer)

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, answer: _Answer) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            pieces = list(
                answer.chunks if answer.chunks is not None else ((answer.text,) if answer.text else ())
            )
            events: list[dict[str, Any]] = []
            if answer.thought:
                events.append(_response([{"text": answer.thought, "thought": True}], final=False))
            events += [_response([{"text": p}], final=False) for p in pieces]
            calls = [{"functionCall": {"name": n, "args": a}} for n, a in answer.calls]
            events.append(_response(calls, final=True))
            for event in events:
                data = f"data: {json.dumps(event)}\r\n\r\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


_DATA = {"text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode"}
_DATA |= {"codeExecutionResult"}
_METADATA = {"thought", "thoughtSignature", "videoMetadata", "mediaResolution", "partMetadata"}
#: The MIME types the API reads (its image, document, audio and video guides).
_MIME_TYPES = {"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif", "application/pdf"}
_MIME_TYPES |= {f"text/{t}" for t in ("plain", "html", "css", "csv", "xml", "markdown", "javascript")}
_MIME_TYPES |= {f"audio/{t}" for t in ("wav", "mp3", "aiff", "aac", "ogg", "flac")}
_MIME_TYPES |= {f"video/{t}" for t in ("mp4", "mpeg", "mov", "avi", "x-flv", "mpg", "webm", "wmv", "3gpp")}
#: How a binary type's bytes begin.
_SIGNATURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/webp": (b"RIFF",),
    "application/pdf": (b"%PDF-",),
}


def content_problem(contents: Any) -> str | None:
    """What the Gemini API would refuse in `contents`, in its words, or None: each part sets one data
    field; ``inlineData`` has a MIME type it reads and base64 ``data`` (standard or URL-safe, as
    proto3's JSON mapping takes bytes) that is what the type says; ``fileData`` a MIME type it reads
    and a URI it can fetch (``https://``, ``http://``, ``gs://``). Fields go by either JSON name."""
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    for i, content in enumerate(contents):
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list) or not parts:
            return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        for j, given in enumerate(parts):
            where = f"contents[{i}].parts[{j}]"
            part = _camel(given)
            data = set(part) & _DATA
            if len(data) != 1 or not set(part) <= _DATA | _METADATA:
                return f"Invalid value at '{where}' (oneof field 'data'): set exactly one data field"
            if "inlineData" in part and (problem := _inline_problem(_camel(part["inlineData"]), where)):
                return problem
            if "fileData" in part:
                file = _camel(part["fileData"])
                uri = file.get("fileUri")
                if not isinstance(uri, str) or not uri.startswith(("https://", "http://", "gs://")):
                    return f"Invalid value at '{where}.file_data.file_uri': {uri!r} is not a fetchable URI"
                if file.get("mimeType") not in _MIME_TYPES:
                    return f"* {where}.file_data.mime_type: Unsupported MIME type: {file.get('mimeType')}"
    return None


def _camel(fields: Any) -> dict[str, Any]:
    """A JSON object's fields by their lowerCamelCase names: proto3's JSON mapping takes a field by
    that name or by its proto name (``mime_type``), and google-genai sends some by the latter."""
    if not isinstance(fields, dict):
        return {}
    return {re.sub(r"_([a-z])", lambda m: m.group(1).upper(), key): value for key, value in fields.items()}


def _inline_problem(blob: dict[str, Any], where: str) -> str | None:
    mime_type = blob.get("mimeType")
    if mime_type not in _MIME_TYPES:
        return f"* {where}.inline_data.mime_type: Unsupported MIME type: {mime_type}"
    data = _bytes(blob.get("data"))
    if data is None:
        return f"Invalid value at '{where}.inline_data.data' (TYPE_BYTES), Base64 decoding failed"
    if not data.startswith(_SIGNATURES.get(mime_type, (b"",))):
        return f"* {where}.inline_data: Unable to process input: the data is not {mime_type}"
    return None


def _bytes(text: Any) -> bytes | None:
    """Base64 as proto3's JSON mapping reads bytes: standard or URL-safe, padded or not."""
    if not isinstance(text, str):
        return None
    standard = text.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _parts(answer: _Answer, text: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if answer.thought:
        parts.append({"text": answer.thought, "thought": True})
    if text:
        parts.append({"text": text})
    parts += [{"functionCall": {"name": n, "args": a}} for n, a in answer.calls]
    return parts


def _response(parts: list[dict[str, Any]], *, final: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if final:
        candidate["finishReason"] = "STOP"
    response: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-local"}
    if final:
        response["usageMetadata"] = {"promptTokenCount": 17, "candidatesTokenCount": 6, "totalTokenCount": 23}
    return response


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}
