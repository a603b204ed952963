"""AdkRuntime: a Google ADK model (``BaseLlm``: ``Gemini``, or your own) as an agent's runtime.

The ADK *model* is driven directly (``generate_content_async``, one model call each), converting to
and from ``google.genai`` ``Content`` / ``Part`` / ``FunctionCall`` / ``FunctionResponse``. ADK's
``LlmAgent``, ``Runner`` and tool confirmation are not used: our loop, store and approval gate stay in
charge (ADR 6). Install with ``pip install "dcaf-like[adk]"``.

Images and files in a user's message go as ``inline_data`` parts (their bytes and MIME type), an
image by URL as a ``file_data`` part (the URL, which Gemini fetches; this server fetches none). What
the Gemini API reads no such part of is refused before the turn starts, see :func:`refused_part`.
"""

from __future__ import annotations

import base64
import posixpath
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from dcaf_like.application.errors import ModelError, ModelRequestInvalid
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
    UserTurn,
)
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.concurrency.portal import Portal
from dcaf_like.domain.attachment import Attachment, PartKind
from dcaf_like.extras import missing
from dcaf_like.runtimes._errors import typed_error

#: The images the Gemini API reads.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})
#: The other files it reads as they are: PDF (pages as images and text), audio and video.
MEDIA_TYPES = IMAGE_TYPES | {
    "application/pdf",
    *(f"audio/{t}" for t in ("wav", "mp3", "aiff", "aac", "ogg", "flac")),
    *(f"video/{t}" for t in ("mp4", "mpeg", "mov", "avi", "x-flv", "mpg", "webm", "wmv", "3gpp")),
}
#: Files it reads as plain text (as it reads any document but PDF): sent as ``text/plain``.
_READ_AS_TEXT = ("application/json", "application/xml", "application/yaml", "application/x-yaml")
#: An image by URL without a media type: by its path's extension (the URL is never fetched here).
_BY_EXTENSION = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".heic": "image/heic",
    ".heif": "image/heif",
}


class AdkRuntime(AgentRuntime):
    """``AdkRuntime(Gemini(model="gemini-2.5-flash"))``, ``AdkRuntime(MyLlm())``, or
    ``AdkRuntime("gemini-2.5-flash")`` (a ``Gemini`` with the API key from ``GOOGLE_API_KEY``).

    `accepts` names the kinds of parts the model reads: images and files by default, as Gemini
    does; ``accepts=()`` for a ``BaseLlm`` of yours that reads text only."""

    def __init__(
        self, model: Any, *, context_window: int | None = None, accepts: Iterable[str] = ("image", "file")
    ) -> None:
        self.context_window = context_window
        self.accepts = frozenset(accepts)
        try:
            from google.adk.models import BaseLlm
            from google.adk.models.llm_request import LlmRequest
            from google.genai import types
        except ImportError as exc:
            raise missing("AdkRuntime needs google-adk", "adk", exc) from exc
        if isinstance(model, str):
            from google.adk.models import Gemini

            model = Gemini(model=model)
        if not isinstance(model, BaseLlm):
            raise TypeError(
                f"AdkRuntime takes an ADK model (google.adk.models.BaseLlm), not {type(model).__name__}"
            )
        self.model = model
        self.name = f"adk:{model.model}"
        self._types = types
        self._request_class = LlmRequest
        self._portal = Portal(f"dcaf-like-{self.name}")
        self._used = False  # no client to close before the first call

    def __repr__(self) -> str:
        return f"AdkRuntime({type(self.model).__name__}(model={self.model.model!r}))"

    def refused_part(self, parts: Sequence[Attachment]) -> tuple[int, str] | None:
        return super().refused_part(parts) or refused_part(parts)

    # ADK models are asyncio-native, and their clients (google-genai's) belong to the event loop that
    # first used them. So every call runs on this runtime's own loop, in a thread of its own, whoever
    # calls: blocking code, or any other event loop (the server's, a test's).

    def invoke(self, request: ModelRequest) -> ModelResponse:
        return self._portal.run(self._generate(request))

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        return await self._portal.arun(self._generate(request))

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        return self._portal.iterate(self._generate_stream(request))

    def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        return self._portal.aiterate(self._generate_stream(request))

    def close(self) -> None:
        """Close the model's client (ADK keeps one per event loop: ours) and stop our event loop."""
        if self._used and self._portal.loop.is_running() and hasattr(type(self.model), "api_client"):
            self._portal.run(_close_client(self.model))
        self._portal.close()

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        self._used = True
        final: Any = None
        try:
            async for response in self.model.generate_content_async(self._request(request), stream=False):
                final = response
        except Exception as exc:
            raise self._error(exc) from exc
        return self._response(final)

    async def _generate_stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        self._used = True
        final: Any = None
        text: list[str] = []
        try:
            async for response in self.model.generate_content_async(self._request(request), stream=True):
                if getattr(response, "partial", False):
                    for event in _deltas(response):
                        if isinstance(event, TextDelta):
                            text.append(event.text)
                        yield event
                else:
                    final = response
        except Exception as exc:
            raise self._error(exc) from exc
        completed = self._response(final)
        if not completed.text and text:  # a final chunk carrying only the calls: keep the streamed text
            completed = replace(completed, text="".join(text))
        yield ModelCompleted(completed)

    # -- mapping ----------------------------------------------------------------------------------

    def _request(self, request: ModelRequest) -> Any:
        parts = [part for m in request.messages if isinstance(m, UserTurn) for part in m.attachments]
        refused = self.refused_part(parts) if parts else None
        if refused is not None:  # an agent refuses the turn first; a caller of the runtime gets this
            at, reason = refused
            raise ModelRequestInvalid(f"{self.name}: {parts[at].describe()}: {reason}", runtime=self.name)
        types = self._types
        settings = self.settings_for(request)
        config = types.GenerateContentConfig(
            system_instruction=request.system or None,
            temperature=settings.temperature,
            max_output_tokens=settings.max_tokens,
        )
        if request.tools:
            declarations = [
                types.FunctionDeclaration(
                    name=t.name, description=t.description, parameters_json_schema=dict(t.input_schema)
                )
                for t in request.tools
            ]
            config.tools = [types.Tool(function_declarations=declarations)]
        return self._request_class(model=self.model.model, contents=self._contents(request), config=config)

    def _contents(self, request: ModelRequest) -> list[Any]:
        """google.genai contents: roles user/model; function responses in a user turn; turns merged."""
        types = self._types
        contents: list[Any] = []

        def add(role: str, parts: list[Any]) -> None:
            if not parts:
                return
            if contents and contents[-1].role == role:
                contents[-1].parts.extend(parts)
            else:
                contents.append(types.Content(role=role, parts=parts))

        for m in request.messages:
            if isinstance(m, ToolResult):
                response = {"error": m.content} if m.is_error else {"result": m.content}
                part = types.Part(
                    function_response=types.FunctionResponse(
                        id=m.call_id, name=m.tool_name, response=response
                    )
                )
                add("user", [part])
            elif isinstance(m, AssistantTurn):
                parts = [types.Part(text=m.text)] if m.text else []
                parts += [
                    types.Part(function_call=types.FunctionCall(id=c.id, name=c.name, args=dict(c.arguments)))
                    for c in m.tool_calls
                ]
                add("model", parts)
            else:
                parts = [types.Part(text=m.text)] if m.text or not m.attachments else []
                add("user", parts + [self._part(a) for a in m.attachments])
        return contents

    def _part(self, attachment: Attachment) -> Any:
        """An image or a file as a google.genai ``Part``: inline bytes, or an image's URL."""
        types = self._types
        media_type = gemini_media_type(attachment)
        if attachment.url is not None:
            return types.Part(file_data=types.FileData(file_uri=attachment.url, mime_type=media_type))
        data = base64.b64decode(attachment.data or "")
        return types.Part(inline_data=types.Blob(mime_type=media_type, data=data))

    def _response(self, response: Any) -> ModelResponse:
        if response is None:
            raise ModelError(f"{self.name}: the model returned nothing", runtime=self.name)
        if getattr(response, "error_code", None):
            raise ModelError(
                f"{self.name}: {response.error_code}: {response.error_message or ''}".rstrip(": "),
                runtime=self.name,
                retryable=False,
            )
        parts = list(response.content.parts or ()) if response.content else []
        calls = tuple(
            ModelToolCall(
                p.function_call.id or f"call_{uuid.uuid4().hex[:16]}",
                p.function_call.name or "",
                dict(p.function_call.args or {}),
            )
            for p in parts
            if p.function_call
        )
        usage = response.usage_metadata
        return ModelResponse(
            text="".join(p.text for p in parts if p.text and not p.thought),
            tool_calls=calls,
            usage=Usage(
                (usage.prompt_token_count or 0) if usage else 0,
                (usage.candidates_token_count or 0) if usage else 0,
            ),
            stop_reason="tool_use" if calls else _stop(response.finish_reason),
            reasoning="".join(p.text for p in parts if p.text and p.thought),
            model=self.model.model,
        )

    def _error(self, exc: Exception) -> ModelError:
        if isinstance(exc, ModelError):
            return exc
        code = getattr(exc, "code", None)
        status = code if isinstance(code, int) else None
        message = f"{self.name}: {type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
        return typed_error(message, runtime=self.name, status=status, kind=type(exc).__name__)


def gemini_media_type(part: Attachment) -> str | None:
    """The MIME type `part` goes to Gemini with, or None when Gemini reads no such part. A text
    file goes as ``text/plain``; an image by URL without a media type is named by its extension."""
    media_type = part.media_type
    if not media_type and part.url is not None:
        extension = posixpath.splitext(urlsplit(part.url).path)[1].lower()
        media_type = _BY_EXTENSION.get(extension, "")
    if media_type in MEDIA_TYPES:
        return media_type
    if part.kind is PartKind.FILE and (media_type.startswith("text/") or media_type in _READ_AS_TEXT):
        return "text/plain"
    return None


def refused_part(parts: Sequence[Attachment]) -> tuple[int, str] | None:
    """The first of `parts` the Gemini API reads no such part of, and why."""
    for i, part in enumerate(parts):
        if gemini_media_type(part) is not None:
            continue
        if part.kind is PartKind.FILE:
            return i, f"Gemini reads no {part.media_type} files (it reads PDF, text, images, audio and video)"
        if not part.media_type:
            return i, "Gemini needs an image URL's media type: give its media_type (image/png, image/jpeg...)"
        return i, f"Gemini reads PNG, JPEG, WebP, HEIC and HEIF images, not {part.media_type}"
    return None


def _deltas(response: Any) -> Iterator[ModelStreamEvent]:
    for part in (response.content.parts or ()) if response.content else ():
        if part.text and part.thought:
            yield ReasoningDelta(part.text)
        elif part.text:
            yield TextDelta(part.text)


def _stop(reason: Any) -> str:
    name = getattr(reason, "name", str(reason or ""))
    return "max_tokens" if name == "MAX_TOKENS" else "end_turn"


async def _close_client(model: Any) -> None:
    await model.api_client.aio.aclose()  # read on our loop: the client ADK made for it
