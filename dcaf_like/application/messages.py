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
class ModelSettings:
    """How the model answers, set once and honoured by every runtime: on the agent
    (``Agent(model_settings=ModelSettings(temperature=0))``, sent with each request) or in the runtime
    string (``"openai:gpt-4o-mini?temperature=0&max_tokens=512"``, the runtime's own defaults, which
    the agent's override). None leaves the provider's default."""

    temperature: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.temperature is not None and (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, int | float)
            or not 0 <= self.temperature < float("inf")
        ):
            raise ValueError(f"temperature must be a number from 0, not {self.temperature!r}")
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be a whole number from 1, not {self.max_tokens!r}")

    def over(self, defaults: ModelSettings) -> ModelSettings:
        """These settings, and `defaults`' where these leave one unset."""
        if defaults is NO_SETTINGS:
            return self
        return ModelSettings(
            self.temperature if self.temperature is not None else defaults.temperature,
            self.max_tokens if self.max_tokens is not None else defaults.max_tokens,
        )


#: No setting: every provider's defaults (shared: settings never change).
NO_SETTINGS = ModelSettings()


@dataclass(frozen=True, slots=True)
class ModelRequest:
    system: str
    messages: tuple[ModelMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    conversation_id: str = ""
    #: The agent's model settings (the runtime's own fill in what these leave unset).
    settings: ModelSettings = NO_SETTINGS


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
