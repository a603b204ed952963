"""Ports: what the application needs from the outside world, in its own types.

Each port has one required method; the sync/async twins have defaults, so an adapter writes only
what its technology offers natively (as httpx's transports do).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from dcaf_like.application._concurrency import iterate_in_thread
from dcaf_like.application.model import (
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ReasoningDelta,
    TextDelta,
    ToolSpec,
)
from dcaf_like.domain import Conversation, PlatformContext, Session


class AgentRuntime(ABC):
    """A model behind an agent. Implement :meth:`invoke`; override the others when the SDK streams
    natively or has an async client."""

    #: Shown in responses' metadata and in errors, e.g. ``"bedrock:anthropic.claude-3-haiku"``.
    name: str = "runtime"

    @abstractmethod
    def invoke(self, request: ModelRequest) -> ModelResponse:
        """One model call: the conversation so far in, the model's answer out."""

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Deltas as the model produces them, then one :class:`ModelCompleted`."""
        response = self.invoke(request)
        yield from _deltas_of(response)
        yield ModelCompleted(response)

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        return await asyncio.to_thread(self.invoke, request)

    def secret_values(self) -> tuple[str, ...]:
        """Values this runtime holds that no error may show (its API key): the service removes them
        from the text of every failure it reports. Override when the runtime holds one."""
        return ()

    def close(self) -> None:  # noqa: B027  (optional hook: most runtimes hold nothing to release)
        """Release the SDK's connections (a server calls this at shutdown)."""

    async def aclose(self) -> None:  # noqa: B027
        """Release the connections of the asyncio client used by the running event loop."""

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        if type(self).stream is AgentRuntime.stream:
            response = await self.ainvoke(request)
            for delta in _deltas_of(response):
                yield delta
            yield ModelCompleted(response)
            return
        async for event in iterate_in_thread(self.stream(request)):
            yield event


def _deltas_of(response: ModelResponse) -> Iterator[ModelStreamEvent]:
    if response.reasoning:
        yield ReasoningDelta(response.reasoning)
    if response.text:
        yield TextDelta(response.text)


class ConversationRepository(ABC):
    """Where conversations live between turns.

    :meth:`save` is a compare-and-set on :attr:`Conversation.version`: it writes only if the stored
    version is still `expected_version` (0 for a conversation that must not exist yet), and raises
    :class:`~dcaf_like.application.errors.ConcurrencyConflict` otherwise, writing nothing.
    """

    @abstractmethod
    def get(self, conversation_id: str) -> Conversation | None: ...

    @abstractmethod
    def save(self, conversation: Conversation, expected_version: int) -> None: ...

    @abstractmethod
    def delete(self, conversation_id: str) -> bool:
        """Remove a conversation; False if there was none."""

    @abstractmethod
    def list_ids(self, limit: int = 100) -> list[str]:
        """Ids of stored conversations, most recently updated first."""

    # Stores whose I/O blocks override these with a native async client.
    async def aget(self, conversation_id: str) -> Conversation | None:
        return self.get(conversation_id)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        self.save(conversation, expected_version)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may see besides its arguments."""

    conversation_id: str
    call_id: str
    platform_context: PlatformContext
    session: Session


@runtime_checkable
class ExecutableTool(Protocol):
    """A tool the service can offer to a model, validate arguments for, and run."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def requires_approval(self) -> bool: ...
    @property
    def editable(self) -> bool: ...
    @property
    def secret_arguments(self) -> frozenset[str]: ...
    @property
    def is_async(self) -> bool: ...

    def spec(self) -> ToolSpec: ...

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments checked (and coerced) against the schema; raises InvalidToolArguments."""

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str: ...

    async def ainvoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str: ...


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """What a synchronous approver is shown about one call."""

    call_id: str
    tool_name: str
    description: str
    arguments: Mapping[str, Any]
    reason: str
    editable: bool


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    approved: bool
    reason: str = ""
    edited_arguments: Mapping[str, Any] | None = None


class ApprovalCallback(Protocol):
    """A synchronous approver (a CLI prompt): asked during the run instead of suspending it.
    May be a plain function or a coroutine function."""

    def __call__(self, pending: PendingApproval) -> Any: ...
