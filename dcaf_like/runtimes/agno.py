"""AgnoRuntime: an Agno model object (OpenAIChat, OpenAILike, AwsBedrock, Claude, Gemini, ...) as a runtime.

The Agno *model* is driven directly (``invoke`` / ``invoke_stream``, one model call each); Agno's Agent,
its tool execution and its confirmation features are not used, so our loop, store and approval gate
stay in charge (ADR 6). Agno's telemetry stays off unless ``AGNO_TELEMETRY`` says otherwise. Install
with ``pip install "dcaf-like[agno]"`` plus the provider's SDK (``openai``, ``anthropic``, ...).

Images and files in a user's message go on Agno's message as ``agno.media.Image`` (its bytes and media
type, or its URL) and ``agno.media.File`` (bytes, file name, media type); the model class turns them
into its provider's parts.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from dcaf_like.application.errors import (
    ModelError,
    ModelRequestInvalid,
    RuntimeNotConfigured,
)
from dcaf_like.application.messages import (
    AssistantTurn,
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ModelStreamEvent,
    ModelToolCall,
    ReasoningDelta,
    TextDelta,
    ToolResult,
    Usage,
)
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.domain.attachment import Attachment, PartKind
from dcaf_like.extras import missing
from dcaf_like.runtimes._errors import typed_error

# "agno:<provider>:<model id>": the Agno model class for each provider.
AGNO_MODELS: dict[str, tuple[str, str]] = {
    "openai": ("agno.models.openai", "OpenAIChat"),
    "openai-like": ("agno.models.openai.like", "OpenAILike"),
    "bedrock": ("agno.models.aws", "AwsBedrock"),
    "anthropic": ("agno.models.anthropic", "Claude"),
    "gemini": ("agno.models.google", "Gemini"),
}

# The model classes whose conversion of Agno's images and files is known to give their provider valid
# parts without fetching a URL on this server: OpenAI's chat completions (OpenAIChat, OpenAILike and
# the OpenAI-compatible providers built on them). Agno's Gemini and AwsBedrock models download an
# image given by URL themselves.
TAKES_PARTS = ("agno.models.openai.chat.OpenAIChat",)


class AgnoRuntime(AgentRuntime):
    """``AgnoRuntime(model)``. `accepts` names the kinds of message parts the model takes (``"image"``,
    ``"file"``); by default both for OpenAI's chat models (:data:`TAKES_PARTS`), none for the others,
    whose messages with images or files are then refused before the model is called. Give it for
    another model class once its conversion suits you (see :data:`TAKES_PARTS` about URLs)."""

    def __init__(
        self,
        model: Any,
        *,
        context_window: int | None = None,
        accepts: Iterable[str] | None = None,
    ) -> None:
        self.context_window = context_window
        # Agno reports usage to its servers by default; a user who wants that sets AGNO_TELEMETRY.
        os.environ.setdefault("AGNO_TELEMETRY", "false")
        try:
            from agno.media import File, Image
            from agno.models.base import Model
            from agno.models.message import Message
        except ImportError as exc:
            raise missing("AgnoRuntime needs agno", "agno", exc) from exc
        if not isinstance(model, Model):
            raise TypeError(
                f"AgnoRuntime takes an Agno model (agno.models.base.Model), not {type(model).__name__}"
            )
        self.model = model
        self.name = f"agno:{type(model).__name__}:{model.id}"
        self._tuned: dict[ModelSettings, Any] = {}
        self.accepts = frozenset(_parts_taken_by(model) if accepts is None else accepts)
        self._message = Message
        self._image = Image
        self._file = File

    def takes(self, part: Attachment) -> bool:
        """A file only when Agno's ``File`` takes its media type (a fixed list: PDF, text, JSON, CSV,
        HTML, Markdown, Office documents, ...; not YAML)."""
        if part.kind is PartKind.FILE and part.media_type not in self._file.valid_mime_types():
            return False
        return part.kind.value in self.accepts

    @classmethod
    def from_string(cls, spec: str) -> AgnoRuntime:
        """``"openai:gpt-4o-mini"``, ``"openai-like:<id>"`` (base URL from ``OPENAI_BASE_URL``),
        ``"bedrock:<model id>"``, ``"anthropic:<model>"``, ``"gemini:<model>"``."""
        provider, _, model_id = spec.partition(":")
        if provider not in AGNO_MODELS or not model_id:
            known = ", ".join(f"agno:{p}:<model>" for p in AGNO_MODELS)
            raise RuntimeNotConfigured(f"agno runtime {spec!r}: expected one of {known}")
        module, class_name = AGNO_MODELS[provider]
        try:
            model_class = getattr(__import__(module, fromlist=[class_name]), class_name)
        except ImportError as exc:
            raise RuntimeNotConfigured(
                f"agno:{provider} needs {exc.name}: pip install {exc.name or 'the provider SDK'}"
            ) from exc
        options: dict[str, Any] = {}
        if provider == "openai-like" and os.environ.get("OPENAI_BASE_URL"):
            options["base_url"] = os.environ["OPENAI_BASE_URL"]
        return cls(model_class(id=model_id, **options))

    def __repr__(self) -> str:
        return f"AgnoRuntime({type(self.model).__name__}(id={self.model.id!r}))"

    def close(self) -> None:
        for model in (self.model, *self._tuned.values()):
            client = getattr(model, "client", None)
            if client is not None and callable(getattr(client, "close", None)):
                client.close()

    async def aclose(self) -> None:
        for model in (self.model, *self._tuned.values()):
            client = getattr(model, "async_client", None)
            if client is not None and callable(getattr(client, "close", None)):
                await client.close()
                model.async_client = None  # Agno makes one per loop again

    # -- calls ------------------------------------------------------------------------------------

    def invoke(self, request: ModelRequest) -> ModelResponse:
        messages, assistant = self._messages(request), self._message(role="assistant")
        try:
            answer = self._model(request).invoke(
                messages=messages, assistant_message=assistant, tools=_tools(request)
            )
        except Exception as exc:
            raise self._error(exc) from exc
        return self._response(
            answer.content, answer.tool_calls, answer.reasoning_content, answer.response_usage
        )

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        messages, assistant = self._messages(request), self._message(role="assistant")
        try:
            answer = await self._model(request).ainvoke(
                messages=messages, assistant_message=assistant, tools=_tools(request)
            )
        except Exception as exc:
            raise self._error(exc) from exc
        return self._response(
            answer.content, answer.tool_calls, answer.reasoning_content, answer.response_usage
        )

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        state = _Stream()
        messages, assistant = self._messages(request), self._message(role="assistant")
        try:
            for delta in self._model(request).invoke_stream(
                messages=messages, assistant_message=assistant, tools=_tools(request)
            ):
                yield from state.add(delta)
        except Exception as exc:
            raise self._error(exc) from exc
        yield ModelCompleted(self._response(state.text, self._assembled(state), state.reasoning, state.usage))

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        state = _Stream()
        messages, assistant = self._messages(request), self._message(role="assistant")
        try:
            async for delta in self._model(request).ainvoke_stream(
                messages=messages, assistant_message=assistant, tools=_tools(request)
            ):
                for event in state.add(delta):
                    yield event
        except Exception as exc:
            raise self._error(exc) from exc
        yield ModelCompleted(self._response(state.text, self._assembled(state), state.reasoning, state.usage))

    # -- mapping ----------------------------------------------------------------------------------

    def _model(self, request: ModelRequest) -> Any:
        """The Agno model, or a copy of it with the request's settings (one copy per distinct settings,
        kept: Agno reads them from the model's attributes, and the model is shared by concurrent turns)."""
        settings = self.settings_for(request)
        if settings.temperature is None and settings.max_tokens is None:
            return self.model
        tuned = self._tuned.get(settings)
        if tuned is None:
            tuned = copy.copy(self.model)
            for key, value in (("temperature", settings.temperature), ("max_tokens", settings.max_tokens)):
                if value is not None and hasattr(tuned, key):
                    setattr(tuned, key, value)
            self._tuned[settings] = tuned
        return tuned

    def _messages(self, request: ModelRequest) -> list[Any]:
        """Agno messages keep tool calls in OpenAI's shape whatever the provider; each model converts."""
        message = self._message
        out = [message(role="system", content=request.system)] if request.system else []
        for m in request.messages:
            if isinstance(m, ToolResult):
                content = f"Error: {m.content}" if m.is_error else m.content
                out.append(
                    message(
                        role="tool",
                        content=content,
                        tool_call_id=m.call_id,
                        tool_name=m.tool_name,
                        tool_call_error=m.is_error,
                    )
                )
            elif isinstance(m, AssistantTurn):
                calls = [
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
                out.append(message(role="assistant", content=m.text or None, tool_calls=calls or None))
            elif m.attachments:
                images = [self._media(a) for a in m.attachments if a.kind is PartKind.IMAGE]
                files = [self._media(a) for a in m.attachments if a.kind is PartKind.FILE]
                out.append(message(role="user", content=m.text, images=images or None, files=files or None))
            else:
                out.append(message(role="user", content=m.text))
        return out

    def _media(self, attachment: Attachment) -> Any:
        """An attachment as Agno's ``Image`` or ``File``: its bytes, never a URL for Agno to fetch but
        an image's, which the model classes of :data:`TAKES_PARTS` pass on as it is."""
        if attachment.url is not None:
            return self._image(url=attachment.url)
        content = base64.b64decode(attachment.data or "")
        if attachment.kind is PartKind.IMAGE:
            return self._image(content=content, mime_type=attachment.media_type)
        try:
            return self._file(content=content, filename=attachment.name, mime_type=attachment.media_type)
        except ValueError:  # a request built by hand, with a file :meth:`takes` refuses
            raise ModelRequestInvalid(
                f"{self.name}: Agno's File refuses {attachment.describe()} (an empty file, or a media "
                "type outside File.valid_mime_types())",
                runtime=self.name,
            ) from None

    def _assembled(self, state: _Stream) -> list[dict[str, Any]]:
        if not state.raw_calls:
            return []
        parse = getattr(self.model, "parse_tool_calls", None)
        calls: list[dict[str, Any]] = parse(state.raw_calls) if parse is not None else state.raw_calls
        return calls

    def _response(self, content: Any, tool_calls: Any, reasoning: Any, usage: Any) -> ModelResponse:
        calls = tuple(_call(c) for c in tool_calls or ())
        return ModelResponse(
            text=content if isinstance(content, str) else "",
            tool_calls=calls,
            usage=Usage(getattr(usage, "input_tokens", 0) or 0, getattr(usage, "output_tokens", 0) or 0),
            stop_reason="tool_use" if calls else "end_turn",
            reasoning=reasoning or "",
            model=str(self.model.id),
        )

    def _error(self, exc: Exception) -> ModelError:
        if isinstance(exc, ModelError):
            return exc
        status = getattr(exc, "status_code", None)
        kind = type(exc).__name__
        message = f"{self.name}: {kind}: {getattr(exc, 'message', None) or exc}"
        return typed_error(message, runtime=self.name, status=status, kind=kind)


def _parts_taken_by(model: Any) -> tuple[str, ...]:
    classes = {f"{c.__module__}.{c.__qualname__}" for c in type(model).__mro__}
    return ("image", "file") if classes.intersection(TAKES_PARTS) else ()


def _tools(request: ModelRequest) -> list[dict[str, Any]] | None:
    if not request.tools:
        return None
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.input_schema)},
        }
        for t in request.tools
    ]


def _call(call: Any) -> ModelToolCall:
    function = call.get("function", {}) if isinstance(call, dict) else {}
    name = str(function.get("name") or "")
    raw = function.get("arguments") or "{}"
    call_id = (call.get("id") if isinstance(call, dict) else None) or f"call_{uuid.uuid4().hex[:16]}"
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return ModelToolCall(
            call_id, name, {}, invalid_arguments=f"the arguments are not a JSON object: {str(raw)[:200]}"
        )
    return ModelToolCall(call_id, name, arguments)


class _Stream:
    """Agno's streamed ModelResponse deltas: text and reasoning as they come, raw call fragments kept
    for the model's own ``parse_tool_calls``."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.raw_calls: list[Any] = []
        self.usage: Any = None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    def add(self, delta: Any) -> Iterator[ModelStreamEvent]:
        if delta.response_usage is not None:
            self.usage = delta.response_usage
        if delta.reasoning_content:
            self.reasoning_parts.append(delta.reasoning_content)
            yield ReasoningDelta(delta.reasoning_content)
        if isinstance(delta.content, str) and delta.content:
            self.parts.append(delta.content)
            yield TextDelta(delta.content)
        if delta.tool_calls:
            self.raw_calls.extend(delta.tool_calls)
