"""OpenAIRuntime: any server speaking OpenAI's chat completions, through the ``openai`` SDK.

OpenAI itself, and the servers that copy its wire format: Ollama, vLLM, llama.cpp's server, LM Studio.
Install with ``pip install 'dcaf_like[openai]'``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

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
from dcaf_like.runtimes.text_calls import CALL_STARTS, read_tool_calls

LOCAL_API_KEY = "not-needed"
"""Sent when a base URL is given without a key: local servers want none, the SDK wants one."""

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
        try:
            import openai
        except ImportError as exc:
            raise ImportError(
                "OpenAIRuntime needs the openai SDK: pip install 'dcaf_like[openai]'", name=exc.name
            ) from exc
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
        self._client = client or openai.OpenAI(**self._settings)
        self._given_async = async_client
        # An asyncio client's connections belong to the loop that opened them: one client per loop.
        #: The asyncio client of each event loop, closed with its loop.
        self._async_clients: PerLoop[Any] = PerLoop(_close_client)
        self._openai = openai

    def _async_client(self) -> Any:
        if self._given_async is not None:
            return self._given_async
        client = self._async_clients.get()
        if client is None:
            client = self._async_clients.put(self._openai.AsyncOpenAI(**self._settings))
        return client

    def secret_values(self) -> tuple[str, ...]:
        key = self._settings["api_key"]
        return (key,) if isinstance(key, str) and key != LOCAL_API_KEY else ()

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        await self._async_clients.aclose()

    def __repr__(self) -> str:
        return f"OpenAIRuntime({self.model!r}, base_url={self.base_url!r})"

    # -- calls ------------------------------------------------------------------------------------

    def invoke(self, request: ModelRequest) -> ModelResponse:
        try:
            completion = self._client.chat.completions.create(**self._body(request))
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from exc
        return self._with_text_calls(request, self._response(completion))

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        try:
            completion = await self._async_client().chat.completions.create(**self._body(request))
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from exc
        return self._with_text_calls(request, self._response(completion))

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        state = _StreamState(hold_calls=self._reads_text_calls(request))
        try:
            chunks = self._client.chat.completions.create(**self._body(request, stream=True))
            for chunk in chunks:
                yield from state.add(chunk)
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from exc
        if state.finish is None and not state.text and not state.calls:
            # As the same answer without streaming is (no choices): an error, never an empty answer.
            raise ModelError(f"{self.name}: the stream ended without a choice or a finish", runtime=self.name)
        response = self._with_text_calls(request, state.response(self.model))
        if state.held and not response.tool_calls:
            yield TextDelta(response.text)
        yield ModelCompleted(response)

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        state = _StreamState(hold_calls=self._reads_text_calls(request))
        try:
            chunks = await self._async_client().chat.completions.create(**self._body(request, stream=True))
            async for chunk in chunks:
                for event in state.add(chunk):
                    yield event
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from exc
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

    def _response(self, completion: Any) -> ModelResponse:
        if not completion.choices:
            raise ModelError(f"{self.name}: the server answered with no choices", runtime=self.name)
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(
            _tool_call(c.id, c.function.name, c.function.arguments) for c in (message.tool_calls or ())
        )
        usage = completion.usage
        return ModelResponse(
            text=message.content or "",
            tool_calls=calls,
            usage=Usage(usage.prompt_tokens, usage.completion_tokens) if usage else Usage(),
            stop_reason="tool_use" if calls else _STOP_REASONS.get(choice.finish_reason or "", "end_turn"),
            reasoning=getattr(message, "reasoning_content", None) or "",
            model=completion.model or self.model,
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
        """The SDK's error as a typed one; the provider's message, never the key."""
        o = self._openai
        status = getattr(exc, "status_code", None)
        detail = scrub(getattr(exc, "message", None) or str(exc), self.secret_values())  # a 401 may echo it
        message = f"{self.name}: {detail}" if status is None else f"{self.name}: HTTP {status}: {detail}"
        if isinstance(exc, o.APITimeoutError):
            return ModelTimeout(message, runtime=self.name)
        if isinstance(exc, o.RateLimitError):
            return ModelRateLimited(message, runtime=self.name)
        if isinstance(exc, o.AuthenticationError | o.PermissionDeniedError):
            return ModelAccessDenied(message, runtime=self.name)
        if isinstance(exc, o.BadRequestError | o.NotFoundError | o.UnprocessableEntityError):
            return ModelRequestInvalid(message, runtime=self.name)
        if isinstance(exc, o.APIConnectionError):
            return ModelError(message, runtime=self.name, retryable=True)
        return ModelError(message, runtime=self.name, retryable=status is not None and status >= 500)


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

    def add(self, chunk: Any) -> Iterator[ModelStreamEvent]:
        self.model = chunk.model or self.model
        if chunk.usage:
            self.usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices or ():
            delta = choice.delta
            if choice.finish_reason:
                self.finish = choice.finish_reason
            reasoning = getattr(delta, "reasoning_content", None)
            if reasoning:
                self.reasoning.append(reasoning)
                yield ReasoningDelta(reasoning)
            if delta.content:
                self.text.append(delta.content)
                yield from self._text(delta.content)
            for call in delta.tool_calls or ():
                slot = self.calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                if call.id:
                    slot["id"] = call.id
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""

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
    await client.close()
