"""Custom agent functions, ``(messages, context) -> AgentResult``, served like any Agent.

The function receives the HelpDesk protocol's messages
(:func:`~dcaf_like.helpdesk.protocol.function_messages`), so a FunctionAgent lives with the protocol,
not in the application.

A function may stream: a generator (or an async generator) yields text deltas (``str`` or
:class:`~dcaf_like.TextDelta`) and stream events (reasoning, an inner Agent's tool events), served on
``/api/chat-stream`` as they come. It may yield its :class:`~dcaf_like.AgentResult` last (or an inner
Agent's ``Done``); without one, the answer is the text it streamed.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dcaf_like.application.dto import AgentRequest, AgentResponse, AgentResult, ToolDecision
from dcaf_like.application.events import (
    ApprovalRequired,
    Done,
    RunFailed,
    RunStarted,
    StreamEvent,
    ToolCallProposed,
    ToolFinished,
    ToolProgress,
    ToolRejected,
    ToolStarted,
)
from dcaf_like.application.messages import ReasoningDelta, TextDelta
from dcaf_like.application.ports import ConversationStore, ServedAgent
from dcaf_like.application.tracing import Tracer
from dcaf_like.concurrency.bridges import iterate_in_thread, resolve, run_sync
from dcaf_like.domain import Identity, PlatformContext, Session
from dcaf_like.domain.context import redact
from dcaf_like.domain.conversation import new_conversation_id
from dcaf_like.helpdesk.protocol import function_messages, read_messages

AgentFunction = Callable[
    [list[dict[str, Any]], "AgentContext"],
    "AgentResult | AgentResponse | str | Awaitable[Any] | Iterator[Any] | AsyncIterator[Any]",
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


class AgentContext(dict[str, Any]):
    """What a custom agent function sees besides the messages. Changes to `session` are returned.

    Decisions on tool calls are not in the messages: they are `unverified_decisions`, named for what
    they are (see :class:`UnverifiedDecision`).

    It is also the seed's ``context: dict``, a real ``dict`` of the function's own: the platform
    context's keys (``context["tenant_name"]``, ``context.get("k8s_namespace")``), and
    ``conversation_id``, ``platform_context`` (a dict) and ``user``, every value JSON, so
    ``json.dumps(context)``, ``context.setdefault(...)`` and ``context[key] = value`` work. Changing
    its items changes nothing the server keeps or checks; the attributes, which the server reads,
    are read-only. The session is the attribute `session` (a :class:`Session`), not an item."""

    __slots__ = (
        "conversation_id",
        "deps",
        "identity",
        "platform_context",
        "session",
        "unverified_decisions",
        "user",
    )

    conversation_id: str
    platform_context: PlatformContext
    session: Session
    user: str
    unverified_decisions: tuple[UnverifiedDecision, ...]
    #: Who the server authenticated (None without API keys): unlike `session` and `platform_context`,
    #: which the client writes, authority.
    identity: Identity | None
    #: The run's dependencies (``agent.run(..., deps=...)``); never a client's.
    deps: Any

    def __init__(
        self,
        conversation_id: str,
        platform_context: PlatformContext,
        session: Session,
        user: str = "user",
        unverified_decisions: tuple[UnverifiedDecision, ...] = (),
        identity: Identity | None = None,
        deps: Any = None,
    ) -> None:
        values = dict(platform_context)
        super().__init__(
            {**values, "conversation_id": conversation_id, "platform_context": dict(values), "user": user}
        )
        attributes = {
            "conversation_id": conversation_id,
            "platform_context": platform_context,
            "session": session,
            "user": user,
            "unverified_decisions": unverified_decisions,
            "identity": identity,
            "deps": deps,
        }
        for name, value in attributes.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"AgentContext.{name} is read-only; the context's items are yours to change")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"AgentContext.{name} is read-only; the context's items are yours to change")

    def __repr__(self) -> str:
        return f"AgentContext({redact(dict(self))!r})"


class FunctionAgent:
    """Wraps a function so it can stand wherever an Agent does (``serve``, the CLI, tests). It keeps
    no conversations: no store, no runtime, nothing to cancel or close."""

    repository: None = None
    runtime: None = None
    clock: Callable[[], float] = staticmethod(time.time)

    def __init__(
        self, func: AgentFunction, *, name: str | None = None, description: str | None = None
    ) -> None:
        self.func = func
        self.name: str = name or str(getattr(func, "__name__", "agent"))
        self.description: str = description or (inspect.getdoc(func) or "").split("\n\n", 1)[0]

    def run(
        self,
        messages: str | Sequence[Mapping[str, Any] | str],
        *,
        identity: Identity | None = None,
        deps: Any = None,
        **kwargs: Any,
    ) -> AgentResponse:
        """One call of the function; `identity` and `deps` as for ``Agent.run`` (``context.identity``,
        ``context.deps``), the other keyword arguments as ``read_messages`` takes them."""
        return self.run_request(_trusted(read_messages(messages, **kwargs), identity, deps))

    async def arun(
        self,
        messages: str | Sequence[Mapping[str, Any] | str],
        *,
        identity: Identity | None = None,
        deps: Any = None,
        **kwargs: Any,
    ) -> AgentResponse:
        return await self.ahandle(_trusted(read_messages(messages, **kwargs), identity, deps))

    def run_request(self, request: AgentRequest) -> AgentResponse:
        """One turn of a typed request (what :meth:`run` builds from HelpDesk messages)."""
        context = _context(request)
        value = self.func(function_messages(request), context)
        if inspect.isawaitable(value) or inspect.isgenerator(value) or inspect.isasyncgen(value):
            return run_sync(_answer(_events(value, context)))
        return _response(value, context)

    def handle(self, request: AgentRequest) -> AgentResponse:
        """The former name of :meth:`run_request`, kept for code written against it."""
        warnings.warn(
            "FunctionAgent.handle is now FunctionAgent.run_request", DeprecationWarning, stacklevel=2
        )
        return self.run_request(request)

    async def ahandle(self, request: AgentRequest) -> AgentResponse:
        context = _context(request)
        return await _answer(_events(self.func(function_messages(request), context), context))

    async def ahandle_stream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        context = _context(request)
        yield RunStarted(context.conversation_id)
        try:
            async for event in _events(self.func(function_messages(request), context), context):
                yield event
        except Exception as exc:
            yield RunFailed(str(exc), type(exc).__name__, request.conversation_id or "", exception=exc)

    def configured(
        self,
        *,
        repository: ConversationStore | str | None = None,
        default_repository: ConversationStore | str | None = None,
        tracer: Callable[[Tracer], Tracer] | None = None,
    ) -> FunctionAgent:
        """Itself: it keeps no conversations, so it takes no store (TypeError when given a
        `repository`; a `default_repository` is not used), and has nothing to trace (a function's
        turn is one call of it)."""
        if repository is not None:
            raise TypeError(
                f"{type(self).__name__} keeps no conversations, so it takes no store; only an Agent does"
            )
        return self

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


#: What a streaming function's items may be besides text, passed on as they come.
_PASSED_ON = (
    TextDelta,
    ReasoningDelta,
    ToolCallProposed,
    ApprovalRequired,
    ToolStarted,
    ToolProgress,
    ToolFinished,
    ToolRejected,
)


async def _events(value: Any, context: AgentContext) -> AsyncIterator[StreamEvent]:
    """A function's call as stream events: what it yields as it comes, then ``Done``. A plain
    function's answer is its one item; its text goes out as one delta."""
    streamed: list[str] = []
    final: Any = None
    async for item in _items(value):
        if isinstance(item, str):
            item = TextDelta(item)
        if isinstance(item, TextDelta):
            streamed.append(item.text)
        if isinstance(item, _PASSED_ON):
            yield item
        elif isinstance(item, Done):
            final = item.response
        elif isinstance(item, RunFailed):
            raise item.exception or RuntimeError(item.error)
        elif isinstance(item, AgentResult | AgentResponse):
            final = item
        else:
            raise TypeError(
                f"an agent function yields text, stream events and its AgentResult, not {type(item).__name__}"
            )
    response = _response(final if final is not None else "".join(streamed), context)
    if not streamed and response.text:
        yield TextDelta(response.text)
    yield Done(response)


async def _items(value: Any) -> AsyncIterator[Any]:
    """What a function's call gave: a generator's items as they come (a blocking one driven from a
    thread); anything else, awaited if need be, as one item."""
    if inspect.isasyncgen(value):
        async for item in value:
            yield item
    elif inspect.isgenerator(value):
        async for item in iterate_in_thread(value):
            yield item
    else:
        yield await resolve(value)


async def _answer(events: AsyncIterator[StreamEvent]) -> AgentResponse:
    async for event in events:
        if isinstance(event, Done):
            return event.response
    raise RuntimeError("the agent function ended without an answer")  # unreachable: _events ends with Done


def _trusted(request: AgentRequest, identity: Identity | None, deps: Any) -> AgentRequest:
    return request if identity is None and deps is None else replace(request, identity=identity, deps=deps)


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
        identity=request.identity,
        deps=request.deps,
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
