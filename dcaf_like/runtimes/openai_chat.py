"""OpenAIRuntime: any server speaking OpenAI's chat completions.

OpenAI itself, and the servers that copy its wire format: Ollama, vLLM, llama.cpp's server, LM Studio.
Install with ``pip install "dcaf-like[openai]"``. Calls go through a small client of the wire format
(``_chat_wire.py``, on httpcore); an ``openai`` SDK client given as ``client=`` is used as it is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dcaf_like.application.errors import (
    ModelAccessDenied,
    ModelError,
    ModelRateLimited,
    ModelRequestInvalid,
    ModelTimeout,
)
from dcaf_like.application.messages import (
    AssistantTurn,
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ModelToolCall,
    ReasoningDelta,
    TextDelta,
    ToolResult,
    Usage,
)
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.concurrency.bridges import PerLoop
from dcaf_like.domain.attachment import Attachment, PartKind
from dcaf_like.domain.context import scrub
from dcaf_like.extras import missing
from dcaf_like.runtimes.text_calls import CALL_STARTS, read_tool_calls

if TYPE_CHECKING:
    from dcaf_like.runtimes._chat_wire import ChatCompletions

LOCAL_API_KEY = "not-needed"
"""Sent when a base URL is given without a key: local servers want none, the SDK wants one."""

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where calls go when neither ``base_url=`` nor ``OPENAI_BASE_URL`` says otherwise."""

_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


class OpenAIRuntime(AgentRuntime):
    """``OpenAIRuntime("gpt-4o-mini")`` or ``OpenAIRuntime("qwen2.5", base_url="http://localhost:11434/v1")``.

    `api_key` defaults to ``OPENAI_API_KEY``, `base_url` to ``OPENAI_BASE_URL``. Extra request fields
    (``temperature``, ``max_tokens``, ...) go in `options`.

    ``tool_calls_in_text=True`` also reads tool calls a model writes as JSON in its answer (small models
    behind Ollama, llama.cpp's server or LM Studio often do), as
    :class:`~dcaf_like.runtimes.local.LocalRuntime` does: a call is taken only when every call in the
    answer names a tool offered in the request; otherwise the answer stays text. Such an answer is not
    streamed as text while it may still be a call.

    Images and files in a user's message go in the API's content parts (``image_url``, ``file``);
    `accepts` says which kinds the model takes (both by default: a server whose model cannot read
    them answers 400, a :class:`~dcaf_like.ModelRequestInvalid`); ``accepts=()`` refuses them first.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        options: dict[str, Any] | None = None,
        client: Any = None,
        async_client: Any = None,
        context_window: int | None = None,
        tool_calls_in_text: bool = False,
        accepts: Iterable[str] = ("image", "file"),
    ) -> None:
        self.context_window = context_window
        self.accepts = frozenset(accepts)
        self.tool_calls_in_text = tool_calls_in_text
        self.model = model
        self.name = f"openai:{model}"
        self.options = dict(options or {})
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY") or (LOCAL_API_KEY if base_url else None)
        if key is None and client is None:
            raise ModelAccessDenied(
                f"{self.name}: no API key; pass api_key=, set OPENAI_API_KEY, or give the base_url of a "
                "local server (which needs none)",
                runtime=self.name,
            )
        self._settings: dict[str, Any] = {
            "base_url": base_url,
            "api_key": key,
            "timeout": timeout,
            "max_retries": max_retries,
        }
        self.base_url = base_url
        # An asyncio client's connections belong to the loop that opened them: one client per loop.
        #: The asyncio client (or connection pool) of each event loop, closed with its loop.
        self._async_clients: PerLoop[Any] = PerLoop(_close_client)
        self._given_async = async_client
        #: The SDK, when an SDK client was given (then every call goes through it); else None.
        self._openai: Any = None
        self._client: Any = client
        self._wire: ChatCompletions | None = None
        if client is not None or async_client is not None:
            self._openai = _sdk()
            self._client = client or self._openai.OpenAI(**self._settings)
            self._failures: tuple[type[Exception], ...] = (self._openai.OpenAIError,)
        else:
            wire = _wire_module()
            self._wire = wire.ChatCompletions(
                base_url or OPENAI_BASE_URL, key or "", timeout=timeout, max_retries=max_retries
            )
            self._failures = (wire.WireError,)

    def _async_client(self) -> Any:
        if self._given_async is not None:
            return self._given_async
        client = self._async_clients.get()
        if client is None:
            client = self._async_clients.put(self._openai.AsyncOpenAI(**self._settings))
        return client

    def _async_pool(self, wire: ChatCompletions) -> Any:
        pool = self._async_clients.get()
        if pool is None:
            pool = self._async_clients.put(wire.async_pool())
        return pool

    def secret_values(self) -> tuple[str, ...]:
        key = self._settings["api_key"]
        return (key,) if isinstance(key, str) and key != LOCAL_API_KEY else ()

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
        else:
            self._client.close()

    async def aclose(self) -> None:
        await self._async_clients.aclose()

    def __repr__(self) -> str:
        return f"OpenAIRuntime({self.model!r}, base_url={self.base_url!r})"

    # -- calls ------------------------------------------------------------------------------------

    def invoke(self, request: ModelRequest) -> ModelResponse:
        body = self._body(request)
        try:
            if self._wire is not None:
                completion = self._wire.create(body)
            else:
                completion = self._client.chat.completions.create(**body).model_dump()
        except self._failures as exc:
            raise self._error(exc) from exc
        return self._with_text_calls(request, self._response(completion))

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        body = self._body(request)
        try:
            if self._wire is not None:
                completion = await self._wire.acreate(self._async_pool(self._wire), body)
            else:
                completion = (await self._async_client().chat.completions.create(**body)).model_dump()
        except self._failures as exc:
            raise self._error(exc) from exc
        return self._with_text_calls(request, self._response(completion))

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        state = _StreamState(hold_calls=self._reads_text_calls(request))
        body = self._body(request, stream=True)
        try:
            if self._wire is not None:
                chunks: Iterator[dict[str, Any]] = self._wire.stream(body)
            else:
                chunks = (c.model_dump() for c in self._client.chat.completions.create(**body))
            for chunk in chunks:
                yield from state.add(chunk)
        except self._failures as exc:
            raise self._error(exc) from exc
        yield from self._finish(request, state)

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        state = _StreamState(hold_calls=self._reads_text_calls(request))
        body = self._body(request, stream=True)
        try:
            if self._wire is not None:
                async for chunk in self._wire.astream(self._async_pool(self._wire), body):
                    for event in state.add(chunk):
                        yield event
            else:
                async for sdk_chunk in await self._async_client().chat.completions.create(**body):
                    for event in state.add(sdk_chunk.model_dump()):
                        yield event
        except self._failures as exc:
            raise self._error(exc) from exc
        for event in self._finish(request, state):
            yield event

    def _finish(self, request: ModelRequest, state: _StreamState) -> Iterator[ModelStreamEvent]:
        if state.finish is None and not state.text and not state.calls:
            # As the same answer without streaming is (no choices): an error, never an empty answer.
            raise ModelError(f"{self.name}: the stream ended without a choice or a finish", runtime=self.name)
        response = self._with_text_calls(request, state.response(self.model))
        if state.held and not response.tool_calls:
            yield TextDelta(response.text)
        yield ModelCompleted(response)

    # -- the wire format --------------------------------------------------------------------------

    def _body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(request), **self.options}
        settings = self.settings_for(request)
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body["max_tokens"] = settings.max_tokens
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        "description": spec.description,
                        "parameters": dict(spec.input_schema),
                    },
                }
                for spec in request.tools
            ]
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _response(self, completion: dict[str, Any]) -> ModelResponse:
        choices = completion.get("choices")
        if not choices:
            raise ModelError(f"{self.name}: the server answered with no choices", runtime=self.name)
        choice = choices[0]
        message = choice.get("message") or {}
        calls = tuple(_call_of(c) for c in message.get("tool_calls") or ())
        return ModelResponse(
            text=message.get("content") or "",
            tool_calls=calls,
            usage=_usage(completion.get("usage")),
            stop_reason="tool_use"
            if calls
            else _STOP_REASONS.get(choice.get("finish_reason") or "", "end_turn"),
            reasoning=message.get("reasoning_content") or "",
            model=completion.get("model") or self.model,
        )

    def _reads_text_calls(self, request: ModelRequest) -> bool:
        return self.tool_calls_in_text and bool(request.tools)

    def _with_text_calls(self, request: ModelRequest, response: ModelResponse) -> ModelResponse:
        """The response with the calls written in its text, when asked for and every one is a real tool."""
        if not self._reads_text_calls(request) or response.tool_calls:
            return response
        prose, calls = read_tool_calls(response.text)
        offered = {spec.name for spec in request.tools}
        if not calls or any(call.name not in offered for call in calls):
            return response
        return dataclasses.replace(response, text=prose, tool_calls=calls, stop_reason="tool_use")

    def _error(self, exc: Exception) -> ModelError:
        """The failure as a typed error; the provider's message, never the key."""
        status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
        detail = scrub(getattr(exc, "message", None) or str(exc), self.secret_values())  # a 401 may echo it
        message = f"{self.name}: {detail}" if status is None else f"{self.name}: HTTP {status}: {detail}"
        kind = getattr(exc, "kind", None)
        o = self._openai
        if kind == "timeout" or (o is not None and isinstance(exc, o.APITimeoutError)):
            return ModelTimeout(message, runtime=self.name)
        if kind == "connection" or (o is not None and isinstance(exc, o.APIConnectionError)):
            return ModelError(message, runtime=self.name, retryable=True)
        if status == 429:
            return ModelRateLimited(message, runtime=self.name)
        if status in (401, 403):
            return ModelAccessDenied(message, runtime=self.name)
        if status in (400, 404, 422):
            return ModelRequestInvalid(message, runtime=self.name)
        return ModelError(message, runtime=self.name, retryable=status is not None and status >= 500)


def _sdk() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise missing("an openai SDK client needs the openai SDK", "openai", exc) from exc
    return openai


def _wire_module() -> Any:
    try:
        from dcaf_like.runtimes import _chat_wire
    except ImportError as exc:
        raise missing("OpenAIRuntime needs httpcore", "openai", exc) from exc
    return _chat_wire


def _call_of(call: dict[str, Any]) -> ModelToolCall:
    function = call.get("function") or {}
    return _tool_call(call.get("id"), function.get("name") or "", function.get("arguments"))


def _usage(usage: dict[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    return Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """A model request as chat completion messages. A failed or rejected call's result is sent
    prefixed with ``Error:`` (the format has no error flag)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for m in request.messages:
        if isinstance(m, ToolResult):
            content = f"Error: {m.content}" if m.is_error else m.content
            messages.append({"role": "tool", "tool_call_id": m.call_id, "content": content})
        elif isinstance(m, AssistantTurn):
            message: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": json.dumps(dict(c.arguments), ensure_ascii=False),
                        },
                    }
                    for c in m.tool_calls
                ]
            messages.append(message)
        elif m.attachments:
            parts = [{"type": "text", "text": m.text}] if m.text else []
            messages.append({"role": "user", "content": parts + [_part(a) for a in m.attachments]})
        else:
            messages.append({"role": "user", "content": m.text})
    return messages


def _part(attachment: Attachment) -> dict[str, Any]:
    """An image or a file as a content part of the Chat Completions API."""
    inline = f"data:{attachment.media_type};base64,{attachment.data}"
    if attachment.kind is PartKind.FILE:
        return {"type": "file", "file": {"filename": attachment.name, "file_data": inline}}
    return {"type": "image_url", "image_url": {"url": attachment.url or inline}}


def _tool_call(call_id: str | None, name: str, arguments: str | None) -> ModelToolCall:
    """A call as the model wrote it. Arguments that are not a JSON object are kept as
    `invalid_arguments`: the service reports them to the model and runs nothing."""
    raw = arguments or "{}"
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    call_id = call_id or f"call_{uuid.uuid4().hex[:16]}"
    if not isinstance(parsed, dict):
        problem = f"the arguments are not a JSON object: {raw[:200]}"
        return ModelToolCall(call_id, name, {}, invalid_arguments=problem)
    return ModelToolCall(call_id, name, parsed)


@dataclass
class _StreamState:
    """Assembles a streamed completion: text and reasoning as they come, tool calls by index.
    With `hold_calls`, text that starts like a written tool call is held back (:attr:`held`)."""

    hold_calls: bool = False
    held: bool = False
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str = ""

    def add(self, chunk: dict[str, Any]) -> Iterator[ModelStreamEvent]:
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
            reasoning = delta.get("reasoning_content")
            if reasoning:
                self.reasoning.append(reasoning)
                yield ReasoningDelta(reasoning)
            content = delta.get("content")
            if content:
                self.text.append(content)
                yield from self._text(content)
            for call in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(call.get("index", 0), {"id": None, "name": "", "arguments": ""})
                if call.get("id"):
                    slot["id"] = call["id"]
                function = call.get("function")
                if function is not None:
                    slot["name"] += function.get("name") or ""
                    slot["arguments"] += function.get("arguments") or ""

    def _text(self, piece: str) -> Iterator[TextDelta]:
        if not self.hold_calls:
            yield TextDelta(piece)
            return
        head = "".join(self.text).lstrip()
        if not head:
            return
        if head.startswith(CALL_STARTS):
            self.held = True
            return
        self.hold_calls = False  # prose: everything so far goes out now, the rest as it comes
        yield TextDelta(head)

    def response(self, model: str) -> ModelResponse:
        calls = tuple(_tool_call(c["id"], c["name"], c["arguments"]) for _, c in sorted(self.calls.items()))
        return ModelResponse(
            text="".join(self.text),
            tool_calls=calls,
            usage=self.usage,
            stop_reason="tool_use" if calls else _STOP_REASONS.get(self.finish or "", "end_turn"),
            reasoning="".join(self.reasoning),
            model=self.model or model,
        )


async def _close_client(client: Any) -> None:
    """An SDK client has ``close``, a connection pool ``aclose``."""
    await (client.aclose() if hasattr(client, "aclose") else client.close())
