"""Custom agent functions, ``(messages, context) -> AgentResult``, served like any Agent.

The function receives the HelpDesk protocol's messages
(:func:`~dcaf_like.helpdesk.protocol.function_messages`), so a FunctionAgent lives with the protocol,
not in the application."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dcaf_like.application.concurrency import resolve, resolve_sync
from dcaf_like.application.dto import AgentRequest, AgentResponse, AgentResult, ToolDecision
from dcaf_like.application.events import Done, RunFailed, RunStarted, StreamEvent
from dcaf_like.application.messages import TextDelta
from dcaf_like.application.ports import ConversationRepository, ServedAgent
from dcaf_like.application.tracing import Tracer
from dcaf_like.domain import PlatformContext, Session
from dcaf_like.domain.conversation import new_conversation_id
from dcaf_like.helpdesk.protocol import function_messages, read_messages

AgentFunction = Callable[
    [list[dict[str, Any]], "AgentContext"], "AgentResult | AgentResponse | str | Awaitable[Any]"
]


@dataclass(frozen=True, slots=True)
class UnverifiedDecision:
    """A decision on a tool call exactly as the client sent it, which nobody has checked.

    A FunctionAgent keeps no record of the calls its function proposed, so the server cannot tell
    whether `call_id` is one it ever issued, nor whether `arguments` are what was proposed. Before
    acting on `approve`, check it against your own record of proposals, or hand it to an
    :class:`~dcaf_like.Agent`, whose gate checks it against its store: ``agent.adecide(
    context.conversation_id, [d.to_tool_decision() for d in context.unverified_decisions])``.
    """

    call_id: str
    approve: bool
    tool_name: str | None = None
    arguments: Mapping[str, Any] | None = None
    edited_arguments: Mapping[str, Any] | None = None
    reason: str = ""

    def to_tool_decision(self) -> ToolDecision:
        """The decision for an Agent, which checks it before anything runs."""
        return ToolDecision(
            self.call_id, self.approve, self.tool_name, self.arguments, self.edited_arguments, self.reason
        )


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What a custom agent function sees besides the messages. Changes to `session` are returned.

    Decisions on tool calls are not in the messages: they are `unverified_decisions`, named for what
    they are (see :class:`UnverifiedDecision`)."""

    conversation_id: str
    platform_context: PlatformContext
    session: Session
    user: str = "user"
    unverified_decisions: tuple[UnverifiedDecision, ...] = ()


class FunctionAgent:
    """Wraps a function so it can stand wherever an Agent does (``serve``, the CLI, tests). It keeps
    no conversations: no store, no runtime, nothing to cancel or close."""

    repository: None = None
    repository_chosen = False
    runtime: None = None

    def __init__(
        self, func: AgentFunction, *, name: str | None = None, description: str | None = None
    ) -> None:
        self.func = func
        self.name: str = name or str(getattr(func, "__name__", "agent"))
        self.description: str = description or (inspect.getdoc(func) or "").split("\n\n", 1)[0]

    def run(self, messages: str | Sequence[Mapping[str, Any] | str], **kwargs: Any) -> AgentResponse:
        return self.handle(read_messages(messages, **kwargs))

    async def arun(self, messages: str | Sequence[Mapping[str, Any] | str], **kwargs: Any) -> AgentResponse:
        return await self.ahandle(read_messages(messages, **kwargs))

    def handle(self, request: AgentRequest) -> AgentResponse:
        context = _context(request)
        return _response(resolve_sync(self.func(function_messages(request), context)), context)

    async def ahandle(self, request: AgentRequest) -> AgentResponse:
        context = _context(request)
        return _response(await resolve(self.func(function_messages(request), context)), context)

    async def ahandle_stream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        try:
            response = await self.ahandle(request)
        except Exception as exc:
            yield RunFailed(str(exc), type(exc).__name__, request.conversation_id or "", exception=exc)
            return
        yield RunStarted(response.conversation_id)
        if response.text:
            yield TextDelta(response.text)
        yield Done(response)

    def use_repository(self, repository: ConversationRepository | str) -> None:
        raise TypeError(
            f"{type(self).__name__} keeps no conversations, so it takes no store; only an Agent does"
        )

    def add_tracer(self, wrap: Callable[[Tracer], Tracer]) -> None:
        """Nothing to trace: a function's turn is one call of it."""

    async def acancel(self, conversation_id: str) -> None:
        """Nothing to stop between steps: a function's turn is one call of it."""

    async def aclose(self) -> None:
        """Nothing held."""

    def __repr__(self) -> str:
        return f"FunctionAgent({self.name!r})"


def as_served(target: ServedAgent | Callable[..., Any]) -> ServedAgent:
    """An Agent as is; a plain ``(messages, context)`` function wrapped in a FunctionAgent."""
    if isinstance(target, ServedAgent):
        return target
    if callable(target):
        return FunctionAgent(target)
    raise TypeError(f"serve an Agent or an agent function (messages, context), not {type(target).__name__}")


def _context(request: AgentRequest) -> AgentContext:
    return AgentContext(
        conversation_id=request.conversation_id or new_conversation_id(),
        platform_context=PlatformContext(request.platform_context),
        session=Session(request.session),
        user=request.user,
        unverified_decisions=tuple(
            UnverifiedDecision(d.call_id, d.approve, d.tool_name, d.arguments, d.edited_arguments, d.reason)
            for d in request.decisions
        ),
    )


def _response(result: Any, context: AgentContext) -> AgentResponse:
    if isinstance(result, AgentResponse):
        return result
    if isinstance(result, str):
        return AgentResponse(context.conversation_id, result, session=context.session.to_dict())
    if isinstance(result, AgentResult):
        session = dict(result.session) if result.session is not None else context.session.to_dict()
        return AgentResponse(
            context.conversation_id,
            result.text,
            pending_tool_calls=result.pending_tool_calls,
            executed_tool_calls=result.executed_tool_calls,
            session=session,
            stop_reason="awaiting_approval" if result.pending_tool_calls else "end_turn",
        )
    raise TypeError(
        f"an agent function must return AgentResult, AgentResponse or str, not {type(result).__name__}"
    )
