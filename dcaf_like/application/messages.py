"""The language spoken with a model runtime: our own types, which every adapter maps to its SDK's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dcaf_like.domain.attachment import Attachment


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told about a tool: its name, what it does, and a JSON schema of its arguments."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    """A call as the model wrote it. `invalid_arguments` says why the adapter could not read them."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    invalid_arguments: str | None = None


@dataclass(frozen=True, slots=True)
class UserTurn:
    """A user's message: its text, and the images and files it carries (a runtime that does not
    take a kind of part never sees one: the turn is refused first, see ``AgentRuntime.accepts``)."""

    text: str
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    text: str
    tool_calls: tuple[ModelToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one call, sent back to the model. `is_error` for failures and rejections."""

    call_id: str
    tool_name: str
    content: str
    is_error: bool = False


ModelMessage = UserTurn | AssistantTurn | ToolResult


@dataclass(frozen=True, slots=True)
class ModelRequest:
    system: str
    messages: tuple[ModelMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    conversation_id: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not (other.input_tokens or other.output_tokens):
            return self  # immutable, so adding nothing can give back the same object
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)


#: No tokens: the default of every response (shared: a Usage never changes).
NO_USAGE = Usage()


@dataclass(frozen=True, slots=True)
class ModelResponse:
    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    usage: Usage = NO_USAGE
    stop_reason: str = "end_turn"
    reasoning: str = ""
    model: str = ""
    #: The runtime that wrote this answer, when the runtime asked chose another to answer
    #: (``FallbackRuntime``, ``RoutingRuntime``); empty: the runtime asked answered itself.
    runtime: str = ""


# -- what a streaming runtime yields: deltas, then exactly one ModelCompleted ---------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    type: str = field(default="text_delta", init=False)


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    type: str = field(default="reasoning_delta", init=False)


@dataclass(frozen=True, slots=True)
class ModelCompleted:
    response: ModelResponse


ModelStreamEvent = TextDelta | ReasoningDelta | ModelCompleted
