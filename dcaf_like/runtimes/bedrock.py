"""BedrockRuntime: Amazon Bedrock's Converse and ConverseStream APIs through boto3.

``BedrockRuntime("anthropic.claude-3-5-haiku-20241022-v1:0", region="us-east-1")``, or
``runtime="bedrock:<model id>"``. Credentials come from boto3's usual chain (environment, profile,
role). Install with ``pip install "dcaf-like[bedrock]"``.

Images and files in a user's message go as Converse's ``image`` and ``document`` blocks (their
bytes); what Converse cannot take as given is refused before the turn starts, see
:func:`refused_part`.
"""

from __future__ import annotations

import base64
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcaf_like.application.errors import (
    ModelAccessDenied,
    ModelError,
    ModelRateLimited,
    ModelRequestInvalid,
    ModelTimeout,
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
    UserTurn,
)
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.domain.attachment import Attachment, PartKind
from dcaf_like.extras import missing

_STOP_REASONS = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "end_turn",
    "guardrail_intervened": "guardrail",
    "content_filtered": "content_filtered",
}
_RATE_LIMITED = {"ThrottlingException", "TooManyRequestsException", "ServiceQuotaExceededException"}
_DENIED = {"AccessDeniedException", "UnrecognizedClientException", "ExpiredTokenException"}
_INVALID = {"ValidationException", "ResourceNotFoundException"}
_TIMEOUT = {"ModelTimeoutException"}

#: Converse's image formats, by media type.
IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
#: Converse's document formats, by media type. Any other ``text/...`` file, and JSON, YAML and XML,
#: goes as ``txt``: the same bytes, read as text.
DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html",
    "text/markdown": "md",
    "text/x-markdown": "md",
}
_READ_AS_TEXT = ("application/json", "application/yaml", "application/x-yaml", "application/xml")
#: Converse's limits (its ``Message`` reference): each image 3.75 MB, each document 4.5 MB, at most
#: 20 images and 5 documents in one request.
MAX_IMAGE_BYTES = 3_750_000
MAX_DOCUMENT_BYTES = 4_500_000
MAX_IMAGES = 20
MAX_DOCUMENTS = 5
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9()\[\]-]+")


class BedrockRuntime(AgentRuntime):
    """A Bedrock model. `max_tokens`, `temperature` go to ``inferenceConfig``; pass `client` (a boto3
    ``bedrock-runtime`` client) to control credentials, endpoint and retries yourself.

    `accepts` names the kinds of parts its model reads: images and files by default (Claude, Nova,
    Llama 3.2 vision...); ``accepts=()`` for a model that reads text only, whose requests with them
    Bedrock would refuse (a ValidationException) after the message was kept."""

    def __init__(
        self,
        model_id: str,
        *,
        region: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        endpoint_url: str | None = None,
        client: Any = None,
        context_window: int | None = None,
        accepts: Iterable[str] = ("image", "file"),
    ) -> None:
        self.context_window = context_window
        self.accepts = frozenset(accepts)
        try:
            import botocore.exceptions
        except ImportError as exc:
            raise missing("BedrockRuntime needs boto3", "bedrock", exc) from exc
        if client is None:
            import boto3

            try:
                client = boto3.client("bedrock-runtime", region_name=region, endpoint_url=endpoint_url)
            except botocore.exceptions.NoRegionError:
                raise RuntimeNotConfigured(
                    f"bedrock:{model_id}: no AWS region; pass region= "
                    "(BedrockRuntime(..., region='us-east-1')), set AWS_REGION, or set one in the AWS profile"
                ) from None
        self.model_id = model_id
        self.name = f"bedrock:{model_id}"
        self.client = client
        self.inference: dict[str, Any] = {}
        if max_tokens is not None:
            self.inference["maxTokens"] = max_tokens
        if temperature is not None:
            self.inference["temperature"] = temperature
        self._client_error = botocore.exceptions.ClientError
        self._botocore = botocore.exceptions

    def __repr__(self) -> str:
        return f"BedrockRuntime({self.model_id!r})"

    def close(self) -> None:
        self.client.close()

    def refused_part(self, parts: Sequence[Attachment]) -> tuple[int, str] | None:
        return super().refused_part(parts) or refused_part(parts)

    # -- calls ------------------------------------------------------------------------------------

    def invoke(self, request: ModelRequest) -> ModelResponse:
        try:
            answer = self.client.converse(**self._body(request))
        except (self._client_error, self._botocore.BotoCoreError) as exc:
            raise self._error(exc) from exc
        return self._response(answer)

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        state = _StreamState()
        try:
            answer = self.client.converse_stream(**self._body(request))
            for event in answer["stream"]:
                yield from state.add(event)
        except (self._client_error, self._botocore.BotoCoreError) as exc:
            raise self._error(exc) from exc
        yield ModelCompleted(state.response(self.model_id))

    # -- the wire format --------------------------------------------------------------------------

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        parts = [part for m in request.messages if isinstance(m, UserTurn) for part in m.attachments]
        refused = self.refused_part(parts) if parts else None
        if refused is not None:  # an agent refuses the turn first; a caller of the runtime gets this
            at, reason = refused
            raise ModelRequestInvalid(f"{self.name}: {parts[at].describe()}: {reason}", runtime=self.name)
        body: dict[str, Any] = {"modelId": self.model_id, "messages": to_bedrock_messages(request)}
        if request.system:
            body["system"] = [{"text": request.system}]
        if request.tools:
            body["toolConfig"] = {
                "tools": [
                    {
                        "toolSpec": {
                            "name": spec.name,
                            "description": spec.description or spec.name,
                            "inputSchema": {"json": dict(spec.input_schema)},
                        }
                    }
                    for spec in request.tools
                ]
            }
        inference = dict(self.inference)
        settings = self.settings_for(request)
        if settings.max_tokens is not None:
            inference["maxTokens"] = settings.max_tokens
        if settings.temperature is not None:
            inference["temperature"] = settings.temperature
        if inference:
            body["inferenceConfig"] = inference
        return body

    def _response(self, answer: dict[str, Any]) -> ModelResponse:
        content = answer.get("output", {}).get("message", {}).get("content", [])
        text = "".join(block["text"] for block in content if "text" in block)
        reasoning = "".join(
            block["reasoningContent"].get("reasoningText", {}).get("text", "")
            for block in content
            if "reasoningContent" in block
        )
        calls = tuple(
            ModelToolCall(
                block["toolUse"]["toolUseId"], block["toolUse"]["name"], block["toolUse"].get("input") or {}
            )
            for block in content
            if "toolUse" in block
        )
        usage = answer.get("usage", {})
        stop = answer.get("stopReason", "end_turn")
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=Usage(usage.get("inputTokens", 0), usage.get("outputTokens", 0)),
            stop_reason="tool_use" if calls else _STOP_REASONS.get(stop, stop),
            reasoning=reasoning,
            model=self.model_id,
        )

    def _error(self, exc: Exception) -> ModelError:
        """AWS's error as a typed one, with AWS's message (credentials are never in it)."""
        if isinstance(exc, self._client_error):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", "")).split(":")[0]
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            message = f"{self.name}: {code}: {error.get('Message') or exc}"
            if code in _RATE_LIMITED:
                return ModelRateLimited(message, runtime=self.name)
            if code in _DENIED:
                return ModelAccessDenied(message, runtime=self.name)
            if code in _INVALID:
                return ModelRequestInvalid(message, runtime=self.name)
            if code in _TIMEOUT:
                return ModelTimeout(message, runtime=self.name)
            return ModelError(message, runtime=self.name, retryable=status is None or status >= 500)
        message = f"{self.name}: {type(exc).__name__}: {exc}"
        if isinstance(exc, self._botocore.ReadTimeoutError | self._botocore.ConnectTimeoutError):
            return ModelTimeout(message, runtime=self.name)
        if isinstance(exc, self._botocore.NoCredentialsError):
            return ModelAccessDenied(message, runtime=self.name)
        return ModelError(message, runtime=self.name, retryable=True)


#: What stands for a user's message that was empty where Converse needs one (it refuses blank text).
EMPTY_MESSAGE = "(The user's message was empty.)"


def to_bedrock_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Converse messages: roles alternate, tool results are ``toolResult`` blocks in a user message,
    images and files ``image`` and ``document`` blocks.

    Converse refuses a blank text block, so blank text is left out: a user's empty message (a client's
    history holds one where its user only decided a call), or an empty answer in a history. Where that
    leaves no user message to start or to end the request, one says the user's message was empty."""
    messages: list[dict[str, Any]] = []
    names: set[str] = set()  # the documents' names: Converse refuses two alike in a request

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for m in request.messages:
        if isinstance(m, ToolResult):
            result = {
                "toolUseId": m.call_id,
                "content": [{"text": m.content}],
                "status": "error" if m.is_error else "success",
            }
            add("user", [{"toolResult": result}])
        elif isinstance(m, AssistantTurn):
            blocks: list[dict[str, Any]] = [{"text": m.text}] if m.text.strip() else []
            blocks += [
                {"toolUse": {"toolUseId": c.id, "name": c.name, "input": dict(c.arguments)}}
                for c in m.tool_calls
            ]
            add("assistant", blocks)
        else:
            blocks = [{"text": m.text}] if m.text.strip() else []
            add("user", blocks + [_block(part, names) for part in m.attachments])
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"text": EMPTY_MESSAGE}]})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": [{"text": EMPTY_MESSAGE}]})
    for message in messages:  # Converse wants text beside a document (after any tool results)
        content = message["content"]
        if any("document" in b for b in content) and not any(b.get("text", "").strip() for b in content):
            content.append({"text": "See the attached document."})
    return messages


def refused_part(parts: Sequence[Attachment]) -> tuple[int, str] | None:
    """The first of `parts` (a request's attachments, in order) Converse would refuse, and why:
    an image by URL (Converse takes bytes, and nothing here fetches a URL), a format it has no
    block for, a part over its size, or the one that takes a request over its count."""
    images = documents = 0
    for i, part in enumerate(parts):
        if part.url is not None:
            return i, (
                "Bedrock Converse takes an image's bytes, not its URL, and the server fetches no URL: "
                "send the image as data"
            )
        if part.media_type in IMAGE_FORMATS:
            images += 1
            if part.size > MAX_IMAGE_BYTES:
                return i, f"Bedrock Converse takes images of at most {MAX_IMAGE_BYTES} bytes"
            if images > MAX_IMAGES:
                return i, _too_many(MAX_IMAGES, "images")
        elif part.kind is PartKind.IMAGE:
            return i, f"Bedrock Converse takes PNG, JPEG, GIF and WebP images, not {part.media_type}"
        elif _document_format(part.media_type) is None:
            return i, (
                f"Bedrock Converse takes no {part.media_type} documents (it reads PDF, CSV, Word, "
                "Excel, HTML, Markdown and text)"
            )
        else:
            documents += 1
            if part.size > MAX_DOCUMENT_BYTES:
                return i, f"Bedrock Converse takes documents of at most {MAX_DOCUMENT_BYTES} bytes"
            if documents > MAX_DOCUMENTS:
                return i, _too_many(MAX_DOCUMENTS, "documents")
    return None


def _too_many(limit: int, kind: str) -> str:
    return (
        f"Bedrock Converse takes at most {limit} {kind} in a request, and every request of a "
        f"conversation carries its earlier messages' {kind}: start a new conversation"
    )


def _document_format(media_type: str) -> str | None:
    if media_type in DOCUMENT_FORMATS:
        return DOCUMENT_FORMATS[media_type]
    if media_type.startswith("text/") or media_type in _READ_AS_TEXT:
        return "txt"
    return None


def _block(part: Attachment, names: set[str]) -> dict[str, Any]:
    """An image or a file as a Converse content block: its bytes (boto3 sends them base64) and its
    format; a file of an image format goes as an image."""
    image_format = IMAGE_FORMATS.get(part.media_type)
    document_format = None if part.kind is PartKind.IMAGE else _document_format(part.media_type)
    if part.data is None or not (image_format or document_format):
        raise ModelRequestInvalid(f"Bedrock Converse cannot take {part.describe()}: see refused_part")
    data = base64.b64decode(part.data)
    if image_format:
        return {"image": {"format": image_format, "source": {"bytes": data}}}
    name = _document_name(part.name or "document", names)
    return {"document": {"format": document_format, "name": name, "source": {"bytes": data}}}


def _document_name(name: str, taken: set[str]) -> str:
    """`name` as Converse takes a document's: ASCII letters and digits, hyphens, parentheses, square
    brackets and single spaces, 200 at most, and no other document of the request named the same
    (``report.pdf`` is ``report pdf``, a second one ``report pdf (2)``)."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    plain = " ".join(_NOT_A_NAME.sub(" ", ascii_name).split())[:190].strip() or "document"
    unique, n = plain, 1
    while unique.casefold() in taken:
        n += 1
        unique = f"{plain} ({n})"
    taken.add(unique.casefold())
    return unique


@dataclass
class _StreamState:
    """Assembles ConverseStream events: text and reasoning deltas as they come, tool uses by block."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tools: dict[int, dict[str, Any]] = field(default_factory=dict)
    stop: str = "end_turn"
    usage: Usage = field(default_factory=Usage)

    def add(self, event: dict[str, Any]) -> Iterator[ModelStreamEvent]:
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = start.get("start", {}).get("toolUse")
            if use:
                self.tools[start["contentBlockIndex"]] = {
                    "id": use["toolUseId"],
                    "name": use["name"],
                    "input": "",
                }
        elif "contentBlockDelta" in event:
            block = event["contentBlockDelta"]
            delta = block.get("delta", {})
            if "text" in delta:
                self.text.append(delta["text"])
                yield TextDelta(delta["text"])
            elif "toolUse" in delta:
                self.tools[block["contentBlockIndex"]]["input"] += delta["toolUse"].get("input", "")
            elif "reasoningContent" in delta and delta["reasoningContent"].get("text"):
                self.reasoning.append(delta["reasoningContent"]["text"])
                yield ReasoningDelta(delta["reasoningContent"]["text"])
        elif "messageStop" in event:
            self.stop = event["messageStop"].get("stopReason", "end_turn")
        elif "metadata" in event:
            usage = event["metadata"].get("usage", {})
            self.usage = Usage(usage.get("inputTokens", 0), usage.get("outputTokens", 0))

    def response(self, model: str) -> ModelResponse:
        calls = tuple(_call(tool) for _, tool in sorted(self.tools.items()))
        return ModelResponse(
            text="".join(self.text),
            tool_calls=calls,
            usage=self.usage,
            stop_reason="tool_use" if calls else _STOP_REASONS.get(self.stop, self.stop),
            reasoning="".join(self.reasoning),
            model=model,
        )


def _call(tool: dict[str, Any]) -> ModelToolCall:
    raw = tool["input"] or "{}"
    try:
        arguments = json.loads(raw)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        problem = f"the tool input is not a JSON object: {raw[:200]}"
        return ModelToolCall(tool["id"], tool["name"], {}, invalid_arguments=problem)
    return ModelToolCall(tool["id"], tool["name"], arguments)
