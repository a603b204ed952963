"""What the inbound adapters (the HTTP server, A2A, MCP, the terminal chat) need of an agent:
:class:`ServedAgent` to serve its turns, :class:`ToolProvider` to offer its tools."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, Self, runtime_checkable

from dcaf_like.application.dto import AgentRequest, AgentResponse
from dcaf_like.application.events import StreamEvent
from dcaf_like.application.ports.runtime import AgentRuntime
from dcaf_like.application.ports.store import ConversationStore
from dcaf_like.application.ports.tools import ExecutableTool
from dcaf_like.application.tracing import Tracer
from dcaf_like.domain import (
    ApprovalPolicy,
)


@runtime_checkable
class ServedAgent(Protocol):
    """An agent as the inbound adapters (the HTTP server, A2A, the terminal chat) use it: turns in,
    typed results out, and what serving it needs besides. :class:`~dcaf_like.Agent` and
    :class:`~dcaf_like.FunctionAgent` are both one."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def repository(self) -> ConversationStore | None:
        """Where its conversations live; None for an agent that keeps none (an agent function): it
        has no conversation routes, no A2A tasks, and takes no store."""

    @property
    def runtime(self) -> AgentRuntime | None:
        """Its model runtime (a readiness probe looks at it); None for an agent function."""

    @property
    def clock(self) -> Callable[[], float]:
        """Its time, in seconds since the epoch: what its windows are measured by, so an adapter that
        changes a conversation itself (an A2A task canceled) reads the time the agent's turns read."""

    def configured(
        self,
        *,
        repository: ConversationStore | str | None = None,
        default_repository: ConversationStore | str | None = None,
        tracer: Callable[[Tracer], Tracer] | None = None,
    ) -> Self:
        """The agent as a server serves it, built anew; this one is left as it is (ADR 44). It keeps
        conversations in `repository` (a store, or the store a URL names) when given; else in its own
        store when one was chosen in code; else in `default_repository` when given. `tracer` wraps
        the tracer of its turns (``wrap(current) -> new``): how a server's metrics observe them.
        TypeError when an agent that keeps no conversations is given a `repository`."""

    async def ahandle(self, request: AgentRequest) -> AgentResponse: ...

    def ahandle_stream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        """The turn's events; the last is ``Done`` (with the response) or ``RunFailed``."""

    async def acancel(self, conversation_id: str) -> None:
        """Ask the turn running on the conversation to stop (nothing for an agent that keeps none)."""

    async def aclose(self) -> None:
        """Release what it holds on the running event loop (a server calls this at shutdown): its
        toolsets' sessions, its store's and runtime's asyncio clients (they reopen when used again)."""


@runtime_checkable
class ToolProvider(Protocol):
    """An agent whose tools another protocol may offer (MCP, an A2A card's skills), each call still
    judged by the agent's approval policy. An :class:`~dcaf_like.Agent` is one; an agent function,
    which has no tools of its own, is not."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def approval_policy(self) -> ApprovalPolicy: ...

    @property
    def deps(self) -> Any:
        """The dependencies its tools get (``ToolContext.deps``)."""

    @property
    def tools(self) -> Sequence[ExecutableTool]:
        """The tools it was given (its toolsets' tools are known only once loaded: :meth:`atools`)."""

    async def atools(self) -> list[ExecutableTool]:
        """Every tool the model is offered, by the name it is offered under (toolsets loaded first)."""
