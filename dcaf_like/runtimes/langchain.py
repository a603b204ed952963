"""LangChainRuntime: any LangChain chat model (``BaseChatModel``) as an agent's runtime.

``LangChainRuntime(ChatOpenAI(model="gpt-4o-mini"))``, ``LangChainRuntime(ChatBedrockConverse(...))``,
or ``runtime="langchain:openai:<model>"`` / ``"langchain:bedrock:<model id>"``. Tools are bound with
``bind_tools``, calls read from ``AIMessage.tool_calls``, results sent as ``ToolMessage``s; our service
keeps the loop and the approval gate (LangChain's agents are not used). Install with
``pip install "dcaf-like[langchain]"`` plus the provider's package (``langchain-openai``, ...).

Images and files in a user's message go as LangChain's standard content blocks (``{"type": "image",
"base64": ..., "mime_type": ...}``, ``{"type": "image", "url": ...}``, ``{"type": "file", "base64": ...,
"mime_type": ..., "filename": ...}``), which each chat model class converts to its provider's format.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from dcaf_like.application.errors import (
    ModelError,
    RuntimeNotConfigured,
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
from dcaf_like.domain.attachment import Attachment, PartKind
from dcaf_like.extras import missing
from dcaf_like.runtimes._errors import typed_error

# "langchain:<provider>:<model>": the chat model class for each provider, and its package.
CHAT_MODELS: dict[str, tuple[str, str, str]] = {
    "openai": ("langchain_openai", "ChatOpenAI", "langchain-openai"),
    "bedrock": ("langchain_aws", "ChatBedrockConverse", "langchain-aws"),
    "anthropic": ("langchain_anthropic", "ChatAnthropic", "langchain-anthropic"),
    "ollama": ("langchain_ollama", "ChatOllama", "langchain-ollama"),
}

# The chat model classes whose conversion of standard image and file blocks is known to give their
# provider valid parts, and never fetches an image's URL itself: OpenAI's (ChatOpenAI, AzureChatOpenAI).
TAKES_PARTS = ("langchain_openai.chat_models.base.BaseChatOpenAI",)


class LangChainRuntime(AgentRuntime):
    """``LangChainRuntime(chat_model)``. `accepts` names the kinds of message parts the model takes
    (``"image"``, ``"file"``); by default both for OpenAI's chat models (:data:`TAKES_PARTS`), none for
    the others, whose messages with images or files are then refused before the model is called.
    Give it for another chat model once its class converts LangChain's standard blocks as its
    provider wants them (and without fetching an image's URL on this server)."""

    def __init__(
        self,
        chat_model: Any,
        *,
        context_window: int | None = None,
        accepts: Iterable[str] | None = None,
    ) -> None:
        self.context_window = context_window
        try:
            from langchain_core.language_models import BaseChatModel
        except ImportError as exc:
            raise missing("LangChainRuntime needs langchain-core", "langchain", exc) from exc
        if not isinstance(chat_model, BaseChatModel):
            raise TypeError(f"LangChainRuntime takes a LangChain chat model, not {type(chat_model).__name__}")
        self.chat_model = chat_model
        self.accepts = frozenset(_parts_taken_by(chat_model) if accepts is None else accepts)
        model = next(
            (
                getattr(chat_model, a)
                for a in ("model_name", "model_id", "model")
                if getattr(chat_model, a, None)
            ),
            "",
        )
        self.model = str(model)
        self.name = f"langchain:{type(chat_model).__name__}:{self.model}".rstrip(":")
        self._bound: dict[str, Any] = {}

    @classmethod
    def from_string(cls, spec: str) -> LangChainRuntime:
        """``"openai:gpt-4o-mini"``, ``"bedrock:<model id>"``, ``"anthropic:..."``, ``"ollama:..."``."""
        provider, _, model = spec.partition(":")
        if provider not in CHAT_MODELS or not model:
            known = ", ".join(f"langchain:{p}:<model>" for p in CHAT_MODELS)
            raise RuntimeNotConfigured(f"langchain runtime {spec!r}: expected one of {known}")
        module, class_name, package = CHAT_MODELS[provider]
        try:
            chat_class = getattr(__import__(module, fromlist=[class_name]), class_name)
        except ImportError as exc:
            raise RuntimeNotConfigured(
                f"langchain:{provider} needs {package}: pip install {package}"
            ) from exc
        return cls(chat_class(model=model))

    def __repr__(self) -> str:
        return f"LangChainRuntime({type(self.chat_model).__name__}({self.model!r}))"

    def close(self) -> None:
        """Close the provider clients the chat model holds (ChatOpenAI's, ChatBedrockConverse's),
        except an HTTP client langchain-openai shares between its chat models (see `_shared`)."""
        for attribute in ("root_client", "client"):
            client = getattr(self.chat_model, attribute, None)
            close = getattr(client, "close", None)
            if callable(close) and not _shared(client):
                close()

    async def aclose(self) -> None:
        client = getattr(self.chat_model, "root_async_client", None)
        if client is not None and not _shared(client):
            await client.close()

    # -- calls ------------------------------------------------------------------------------------

    def invoke(self, request: ModelRequest) -> ModelResponse:
        try:
            message = self._model(request).invoke(to_langchain_messages(request))
        except Exception as exc:
            raise self._error(exc) from exc
        return self._response(message)

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        try:
            message = await self._model(request).ainvoke(to_langchain_messages(request))
        except Exception as exc:
            raise self._error(exc) from exc
        return self._response(message)

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        total = None
        try:
            for chunk in self._model(request).stream(to_langchain_messages(request)):
                total = chunk if total is None else total + chunk
                yield from _deltas(chunk)
        except Exception as exc:
            raise self._error(exc) from exc
        yield ModelCompleted(self._response(total))

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        total = None
        try:
            async for chunk in self._model(request).astream(to_langchain_messages(request)):
                total = chunk if total is None else total + chunk
                for event in _deltas(chunk):
                    yield event
        except Exception as exc:
            raise self._error(exc) from exc
        yield ModelCompleted(self._response(total))

    # -- mapping ----------------------------------------------------------------------------------

    def _model(self, request: ModelRequest) -> Any:
        """The chat model with this request's tools and settings bound (once per tool set)."""
        model = self._tools_bound(request)
        settings = self.settings_for(request)
        keywords = {
            key: value
            for key, value in (("temperature", settings.temperature), ("max_tokens", settings.max_tokens))
            if value is not None
        }
        return model.bind(**keywords) if keywords else model

    def _tools_bound(self, request: ModelRequest) -> Any:
        if not request.tools:
            return self.chat_model
        schemas = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.input_schema),
                },
            }
            for t in request.tools
        ]
        key = json.dumps(schemas, sort_keys=True)
        if key not in self._bound:
            self._bound[key] = self.chat_model.bind_tools(schemas)
        return self._bound[key]

    def _response(self, message: Any) -> ModelResponse:
        if message is None:
            raise ModelError(f"{self.name}: the model returned nothing", runtime=self.name)
        calls = [
            ModelToolCall(c.get("id") or _new_id(), c["name"], c.get("args") or {})
            for c in message.tool_calls
        ]
        for bad in getattr(message, "invalid_tool_calls", None) or ():
            problem = f"the tool call could not be read: {bad.get('error') or bad.get('args')}"
            calls.append(
                ModelToolCall(
                    bad.get("id") or _new_id(), bad.get("name") or "", {}, invalid_arguments=problem
                )
            )
        usage = getattr(message, "usage_metadata", None) or {}
        metadata = getattr(message, "response_metadata", None) or {}
        stop = (
            metadata.get("finish_reason") or metadata.get("stopReason") or metadata.get("stop_reason") or ""
        )
        return ModelResponse(
            text=_text(message.content),
            tool_calls=tuple(calls),
            usage=Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0)),
            stop_reason="tool_use"
            if calls
            else ("max_tokens" if stop in ("length", "max_tokens") else "end_turn"),
            reasoning=_reasoning(message.content),
            model=self.model,
        )

    def _error(self, exc: Exception) -> ModelError:
        """The provider's exception (LangChain passes it through) as a typed error."""
        if isinstance(exc, ModelError):
            return exc
        status = getattr(exc, "status_code", None)
        response = getattr(exc, "response", None)
        code = ""
        if isinstance(response, dict):  # botocore's ClientError
            code = str(response.get("Error", {}).get("Code", ""))
            status = status or response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        kind = f"{type(exc).__name__} {code}"
        message = f"{self.name}: {code or type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
        return typed_error(message, runtime=self.name, status=status, kind=kind)


def to_langchain_messages(request: ModelRequest) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    messages: list[Any] = [SystemMessage(request.system)] if request.system else []
    for m in request.messages:
        if isinstance(m, ToolResult):
            # Some providers drop `status` on the wire (OpenAI's has no such flag): say it in words too.
            content = f"Error: {m.content}" if m.is_error else m.content
            status = "error" if m.is_error else "success"
            messages.append(ToolMessage(content, tool_call_id=m.call_id, name=m.tool_name, status=status))
        elif isinstance(m, AssistantTurn):
            calls = [
                {"name": c.name, "args": dict(c.arguments), "id": c.id, "type": "tool_call"}
                for c in m.tool_calls
            ]
            messages.append(AIMessage(m.text, tool_calls=calls))
        elif m.attachments:
            text: list[str | dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text else []
            messages.append(HumanMessage([*text, *(_block(a) for a in m.attachments)]))
        else:
            messages.append(HumanMessage(m.text))
    return messages


def _block(attachment: Attachment) -> dict[str, Any]:
    """An image or a file as a LangChain standard content block."""
    if attachment.url is not None:
        return {"type": "image", "url": attachment.url}
    block = {"type": attachment.kind.value, "base64": attachment.data, "mime_type": attachment.media_type}
    if attachment.kind is PartKind.FILE:
        block["filename"] = attachment.name
    return block


def _parts_taken_by(chat_model: Any) -> tuple[str, ...]:
    classes = {f"{c.__module__}.{c.__qualname__}" for c in type(chat_model).__mro__}
    return ("image", "file") if classes.intersection(TAKES_PARTS) else ()


def _deltas(chunk: Any) -> Iterator[ModelStreamEvent]:
    reasoning = _reasoning(chunk.content)
    if reasoning:
        yield ReasoningDelta(reasoning)
    text = _text(chunk.content)
    if text:
        yield TextDelta(text)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "") if isinstance(block, dict) and block.get("type", "text") == "text" else ""
        for block in content or ()
    )


def _reasoning(content: Any) -> str:
    if isinstance(content, str):
        return ""
    parts = []
    for block in content or ():
        if isinstance(block, dict) and block.get("type") in ("reasoning", "reasoning_content", "thinking"):
            inner = block.get("reasoning_content")
            parts.append(block.get("reasoning") or block.get("thinking") or (inner or {}).get("text", ""))
    return "".join(parts)


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


def _shared(client: Any) -> bool:
    """True for an OpenAI client whose HTTP client langchain-openai built and caches for every chat
    model of the same base URL and timeout in the process: closing it broke every other such model
    ("Cannot send a request, as the client has been closed"). The process keeps it; we leave it."""
    http = getattr(client, "_client", None)
    return type(http).__module__.startswith("langchain_openai")
