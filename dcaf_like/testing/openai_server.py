"""A scripted OpenAI-compatible server on a loopback port, for testing agents offline.

It speaks the chat completions wire format (``POST /v1/chat/completions``, plain JSON and SSE streaming
with ``data: [DONE]``, error bodies with the right status) and ``GET /v1/models``, so the real ``openai``
SDK, LangChain's ``ChatOpenAI`` or Agno's ``OpenAILike`` can be pointed at it::

    with OpenAICompatibleServer() as server:
        server.reply("All pods are healthy.")
        runtime = OpenAIRuntime("test-model", base_url=server.base_url)

Each request takes the next scripted answer; :attr:`requests` keeps every body received. Like OpenAI,
it answers 400 to a transcript with a tool call that no tool message answers.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from dcaf_like.testing._loopback import LoopbackServer


@dataclass(frozen=True)
class _Answer:
    text: str = ""
    chunks: tuple[str, ...] | None = None
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    raw_arguments: tuple[str, ...] | None = None
    status: int = 200
    error_type: str = ""
    error_message: str = ""
    usage: tuple[int, int] = (12, 7)
    delay: float = 0.0
    empty: bool = False


@dataclass
class OpenAICompatibleServer(LoopbackServer):
    """Start with :meth:`start` (or a ``with`` block); stop with :meth:`stop`."""

    model: str = "test-model"
    requests: list[dict[str, Any]] = field(default_factory=list)
    _script: deque[_Answer] = field(default_factory=deque)

    # -- scripting --------------------------------------------------------------------------------

    def reply(self, text: str, *, chunks: list[str] | None = None, delay: float = 0.0) -> None:
        """The next request is answered with `text` (streamed as `chunks` when given)."""
        if chunks is not None and "".join(chunks) != text:
            raise ValueError("the chunks of a reply must add up to its text")
        self._script.append(_Answer(text=text, chunks=None if chunks is None else tuple(chunks), delay=delay))

    def call(self, calls: list[tuple[str, dict[str, Any]]], *, text: str = "") -> None:
        """The next request is answered with these tool calls."""
        self._script.append(_Answer(text=text, calls=tuple(calls)))

    def call_with_raw_arguments(self, name: str, arguments: str) -> None:
        """A tool call whose ``arguments`` string is sent as is (e.g. malformed JSON)."""
        self._script.append(_Answer(calls=((name, {}),), raw_arguments=(arguments,)))

    def answer_nothing(self) -> None:
        """The next request is answered 200 with nothing in it (no choices; streamed, only ``[DONE]``),
        as a proxy or server that failed without saying so does."""
        self._script.append(_Answer(empty=True))

    def fail(self, status: int, error_type: str, message: str) -> None:
        """The next request gets an OpenAI-style error body with this status."""
        self._script.append(_Answer(status=status, error_type=error_type, error_message=message))

    @property
    def remaining(self) -> int:
        return len(self._script)

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, as the SDKs' ``base_url`` expects it."""
        return f"{self.root_url}/v1"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    def _next(self, body: dict[str, Any]) -> _Answer:
        self.requests.append(body)
        if not self._script:
            return _Answer(
                status=500, error_type="server_error", error_message="the test script is exhausted"
            )
        return self._script.popleft()


def _handler(owner: OpenAICompatibleServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [{"id": owner.model, "object": "model"}]})
            else:
                self._json(404, _error("not_found", f"no route {self.path}"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._json(400, _error("invalid_request_error", "the body is not JSON"))
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._json(404, _error("not_found", f"no route {self.path}"))
                return
            if problem := _content_problem(body.get("messages") or []):  # as OpenAI's schema says
                owner.requests.append(body)
                self._json(400, _error("invalid_request_error", problem))
                return
            unanswered = _unanswered_tool_calls(body.get("messages") or [])
            if unanswered:  # as OpenAI does, before the script is consulted
                owner.requests.append(body)
                message = (
                    "An assistant message with 'tool_calls' must be followed by tool messages responding "
                    "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                    + ", ".join(unanswered)
                )
                self._json(400, _error("invalid_request_error", message))
                return
            answer = owner._next(body)
            if answer.delay:
                time.sleep(answer.delay)
            if answer.status != 200:
                self._json(answer.status, _error(answer.error_type, answer.error_message))
            elif body.get("stream"):
                self._stream(answer, body)
            else:
                self._json(200, _completion(answer, body.get("model", owner.model)))

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, answer: _Answer, body: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in () if answer.empty else _chunks(answer, body.get("model", owner.model), body):
                data = f"data: {json.dumps(chunk)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            done = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            self.wfile.flush()

    return Handler


def _content_problem(messages: list[Any]) -> str | None:
    """What is wrong with a user message's content parts, as the Chat Completions API checks them:
    ``text`` with its text, ``image_url`` with a URL (``https:`` or a ``data:`` URL), ``file`` with a
    ``filename`` and ``file_data`` (a ``data:`` URL)."""
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            where = f"messages[{i}].content[{j}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                continue
            if kind == "image_url":
                url = (part.get("image_url") or {}).get("url")
                if isinstance(url, str) and url.startswith(("https://", "http://", "data:image/")):
                    continue
            if kind == "file":
                file = part.get("file") or {}
                if isinstance(file.get("filename"), str) and str(file.get("file_data")).startswith("data:"):
                    continue
            return f"Invalid content part at '{where}': {json.dumps(part)[:200]}"
    return None


def _unanswered_tool_calls(messages: list[Any]) -> list[str]:
    """Ids of tool calls an assistant message made that the tool messages right after it do not answer."""
    missing: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        asked = [c.get("id") for c in message.get("tool_calls") or () if isinstance(c, dict)]
        answered = set()
        for later in messages[index + 1 :]:
            if not isinstance(later, dict) or later.get("role") != "tool":
                break
            answered.add(later.get("tool_call_id"))
        missing += [str(call_id) for call_id in asked if call_id not in answered]
    return missing


def _error(error_type: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": error_type}}


def _tool_calls(answer: _Answer) -> list[dict[str, Any]]:
    raw = answer.raw_arguments or tuple(json.dumps(args, ensure_ascii=False) for _, args in answer.calls)
    return [
        {
            "id": f"call_{uuid.uuid4().hex[:16]}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        for (name, _), arguments in zip(answer.calls, raw, strict=True)
    ]


def _usage(answer: _Answer) -> dict[str, int]:
    prompt, completion = answer.usage
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(answer: _Answer, model: str) -> dict[str, Any]:
    calls = _tool_calls(answer)
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if calls:
        message["tool_calls"] = calls
    if answer.empty:
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "model": model,
            "choices": [],
        }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": _usage(answer),
    }


def _chunks(answer: _Answer, model: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    pieces = answer.chunks if answer.chunks is not None else ((answer.text,) if answer.text else ())
    out += [chunk({"content": piece}) for piece in pieces]
    calls = _tool_calls(answer)
    for index, call in enumerate(calls):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
        }
        out.append(chunk({"tool_calls": [head]}))
        out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}))
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append({**base, "choices": [], "usage": _usage(answer)})
    return out
