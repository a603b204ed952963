"""The Agent facade: composes a runtime, tools, a policy and a store into an AgentService."""

from __future__ import annotations

import asyncio
import copy
import os
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from dcaf_like.application.cancel import CancelRun
from dcaf_like.application.context import ContextPolicy
from dcaf_like.application.dto import AgentRequest, AgentResponse, QuestionAnswer, ToolDecision
from dcaf_like.application.errors import ToolsetUnavailable
from dcaf_like.application.escalations import SweepEscalations
from dcaf_like.application.events import RunFailed, StreamEvent
from dcaf_like.application.executors import ToolExecutor
from dcaf_like.application.grants import Grants
from dcaf_like.application.hooks import Hooks
from dcaf_like.application.inbox import InboxPage, ListWaitingApprovals
from dcaf_like.application.messages import ModelSettings
from dcaf_like.application.notifications import ApprovalNotifier
from dcaf_like.application.ports import (
    AgentRuntime,
    ApprovalCallback,
    ConversationStore,
    ExecutableTool,
    Listing,
    require,
)
from dcaf_like.application.service import AgentService, InstructionProvider
from dcaf_like.application.tool_jobs import ToolJobs
from dcaf_like.application.tracing import Tracer
from dcaf_like.domain import ApprovalPolicy, Conversation, Identity, require_approval
from dcaf_like.domain.grant import Grant
from dcaf_like.helpdesk.protocol import Messages, read_messages
from dcaf_like.runtimes import resolve_runtime
from dcaf_like.stores import open_store
from dcaf_like.stores.memory import InMemoryConversationRepository
from dcaf_like.telemetry.otel import default_tracer
from dcaf_like.tools import Tool
from dcaf_like.toolsets import Toolset, combine
from dcaf_like.toolsets.checked import checked_tools


@dataclass(slots=True)
class AgentSettings:
    """What an agent's service is built from besides its runtime, store and tools: the ``Agent``'s
    arguments, resolved (the policy with the tools' rules, the default tracer and notifier). The service
    is built again from them when the store or the tracer changes."""

    policy: ApprovalPolicy
    system: str | InstructionProvider
    max_iterations: int
    approval_ttl: float | None
    question_ttl: float | None
    approver: ApprovalCallback | None
    name: str
    clock: Callable[[], float]
    tracer: Tracer
    turn_timeout: float | None
    model_timeout: float | None
    lease_ttl: float
    context: ContextPolicy | None
    notifier: ApprovalNotifier | None
    hooks: tuple[object, ...]
    deps: Any
    model_settings: ModelSettings | None
    executor: ToolExecutor | Callable[[ToolJobs], ToolExecutor] | None = None
    background: bool = False
    parallel_tools: bool = False
    max_parallel_tools: int = 4

    def arguments(self) -> dict[str, Any]:
        """As :class:`~dcaf_like.application.service.AgentService` takes them, by name."""
        return {name: getattr(self, name) for name in _SETTING_NAMES}


_SETTING_NAMES = tuple(f.name for f in fields(AgentSettings))


class Agent:
    """An agent whose tools run only as its approval policy allows.

    >>> agent = Agent(tools=[list_pods, delete_pod], system="You operate Kubernetes.", runtime=...)
    >>> response = agent.run("delete the crashing pod")
    >>> response.pending_tool_calls        # delete_pod waits for a human
    >>> agent.approve(response.conversation_id, response.pending_tool_calls[0].id)

    Args:
        tools: Plain functions (made tools by :func:`~dcaf_like.tool`), ``@tool`` objects, and
            :class:`~dcaf_like.toolsets.Toolset` objects (an MCP server's tools), loaded before the
            first run calls the model and kept for later runs.
        system: The instructions, or a function of the run's ``RunContext`` returning them (sync
            or async), called at the start of each turn.
        name: The agent's name: in traces, the A2A card, and the namespace of a store given by URL.
        description: What the agent does: the description of its A2A card and of its HTTP API.
        runtime: The model: an ``AgentRuntime`` or a ``"provider:model"`` string
            (docs/runtimes.md). Required: none is chosen by default.
        approval_policy: Which calls run without a human, wait for one, or are denied; by default
            a tool's own ``requires_approval`` decides.
        repository: Where conversations are kept: a ``ConversationRepository``, a
            ``ConversationStore`` of your own, or a store URL (docs/stores.md). By default in
            memory (``serve()`` then picks SQLite or ``DCAF_STORE``).
        max_iterations: Model calls a turn may make before it stops with ``"max_iterations"``.
        pause_on_tool_calls: Every tool call waits for a human, whatever the policy allows.
        approval_ttl: Seconds a pending call may wait for its decision; after that it can no longer
            be approved, and the next message rejects it as expired. None: no limit.
        question_ttl: Seconds a question a tool asked the user (docs/runs.md, "Questions") takes an
            answer; after that the answer is refused and the next message closes the question as
            expired (the call that asked fails, not run). None: the approval window
            (`approval_ttl`); ``math.inf``: no limit, whatever the approval window.
        approver: Asked during the run about each call that needs approval (a CLI prompt) instead
            of suspending the turn; returns an ``ApprovalAnswer`` or a bool.
        clock: The time, in seconds since the epoch: approval and question windows and leases are
            measured by it. A clock with a ``monotonic()`` method (the test kit's ``ManualClock``)
            also measures the turn's time limit and the reads of cancel requests, so a test moves
            time instead of sleeping (docs/runs.md, "Testing a time limit without waiting").
        tracer: Where spans of turns, model calls, tools and decisions go; by default
            OpenTelemetry's global tracer provider when opentelemetry is installed, else nowhere.
        turn_timeout: Seconds a whole turn may take; it then ends with
            ``stop_reason == "turn_timeout"`` (docs/runs.md).
        model_timeout: Seconds each model call may take; past it the turn fails with
            ``ModelTimeout``. A tool's own limit is ``@tool(timeout=...)``.
        lease_ttl: Seconds a call this process runs stays claimed without renewal: after a crash,
            another process settles it as interrupted.
        context: What the model reads of a long conversation (docs/runtimes.md, "Context
            windows"); by default the transcript fitted to the runtime's window, when it is known.
        approval_notifier: Told when calls start waiting for a decision (approvers notified where
            they are, docs/approvals.md): an ``ApprovalWebhook``, or anything implementing
            ``ApprovalNotifier``. By default the webhook ``DCAF_APPROVAL_WEBHOOK_URL`` names, if set.
        hooks: Your own code before and after each model call and each tool run, and when a turn
            fails: objects with any of the methods of :class:`~dcaf_like.Hook`, sync or async,
            called in this order (docs/operations.md, "Hooks"). A hook can refuse an approved
            call (``Veto``), never approve one; a hook that raises fails the turn (``HookFailed``).
        deps: The agent's dependencies (a client, a config object), given by type to its instructions
            (``RunContext[MyDeps].deps``), tools (``ToolContext[MyDeps].deps``) and the policy's
            conditions (``trusted.deps``); a run may pass its own (``run(..., deps=...)``). No client
            can set or overwrite them; they are never stored, sent to the model, or shown in a repr.
        model_settings: How the model answers (``ModelSettings(temperature=0, max_tokens=512)``),
            sent with each model request and honoured by every runtime; they override the runtime
            string's (``"openai:gpt-4o-mini?temperature=0"``, docs/runtimes.md, "Model settings").
        groups: The groups of approvers that rules name (``{"sre": {"alice", "bob"}}``), by the
            identities they hold (an API key's identity); a key's ``approve:<group>`` scope makes its
            holder a member too (docs/approvals.md, "Approvals by teams").
        executor: Where the approved calls of background tools (``@tool(background=True)``) run: a
            job engine (:class:`~dcaf_like.jobs.celery.CeleryExecutor`), or a class taking the
            agent's :class:`~dcaf_like.application.tool_jobs.ToolJobs`
            (:class:`~dcaf_like.application.tool_jobs.InProcessExecutor`). The turn does not wait
            for them: ``stop_reason == "running_in_background"`` (docs/runs.md, "Tools on a job engine").
        background: Every tool of the agent runs on its `executor`, marked or not.
        parallel_tools: The calls of one answer that need no approval run side by side, their results
            read by the model in the order it proposed them; off, one after the other (docs/runs.md,
            "Tools side by side").
        max_parallel_tools: How many of them run at a time, side by side.
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any] | Toolset] = (),
        system: str | InstructionProvider = "",
        *,
        name: str = "agent",
        description: str = "",
        runtime: AgentRuntime | str | None = None,
        approval_policy: ApprovalPolicy | None = None,
        repository: ConversationStore | str | None = None,
        max_iterations: int = 10,
        pause_on_tool_calls: bool = False,
        approval_ttl: float | None = None,
        question_ttl: float | None = None,
        approver: ApprovalCallback | None = None,
        clock: Callable[[], float] = time.time,
        tracer: Tracer | None = None,
        turn_timeout: float | None = None,
        model_timeout: float | None = None,
        lease_ttl: float = 60.0,
        context: ContextPolicy | None = None,
        approval_notifier: ApprovalNotifier | None = None,
        hooks: Iterable[object] = (),
        deps: Any = None,
        model_settings: ModelSettings | None = None,
        groups: Mapping[str, Iterable[str]] | None = None,
        executor: ToolExecutor | Callable[[ToolJobs], ToolExecutor] | None = None,
        background: bool = False,
        parallel_tools: bool = False,
        max_parallel_tools: int = 4,
    ) -> None:
        self.name = name
        self.description = description
        given = checked_tools(tools)  # a tool that cannot be called fails here, not at the first run
        self.tools: list[Tool] = list(given.tools)
        self.toolsets: tuple[Toolset, ...] = given.toolsets
        #: The toolsets' tools once loaded (None until then), renamed where names collide.
        self._loaded: list[ExecutableTool] | None = None if self.toolsets else []
        self._loading = threading.Lock()
        self.runtime = resolve_runtime(runtime)
        #: False while the agent keeps the in-memory store it got by default; serve() then picks the
        #: embedded SQLite store (or DCAF_STORE) instead (:meth:`configured`).
        self._repository_chosen = repository is not None
        self.repository = (
            InMemoryConversationRepository() if repository is None else open_store(repository, namespace=name)
        )
        policy = approval_policy or ApprovalPolicy()
        if groups:
            policy = policy.with_groups(groups)
        if given.rules:  # who approves a tool's calls, declared on it, is a rule of the policy
            policy = policy.with_rules(*given.rules)
        if pause_on_tool_calls:
            policy = policy.with_rules(require_approval("this agent pauses on every tool call"))
        self.approval_policy = policy
        self._settings = AgentSettings(
            policy=policy,
            system=system,
            max_iterations=max_iterations,
            approval_ttl=approval_ttl,
            question_ttl=question_ttl,
            approver=approver,
            name=name,
            clock=clock,
            tracer=tracer if tracer is not None else default_tracer(),
            turn_timeout=turn_timeout,
            model_timeout=model_timeout,
            lease_ttl=lease_ttl,
            context=context,
            notifier=approval_notifier if approval_notifier is not None else _notifier_from_environment(),
            hooks=tuple(hooks),
            deps=deps,
            model_settings=model_settings,
            executor=executor,
            background=background,
            parallel_tools=parallel_tools,
            max_parallel_tools=max_parallel_tools,
        )
        _check_arguments(self._settings, self.tools)
        #: Built when first needed (a run, :meth:`atools`): building an agent does not pay for it.
        self._service: AgentService | None = None

    @property
    def deps(self) -> Any:
        """The dependencies given as ``Agent(deps=...)`` (a run may pass its own)."""
        return self._settings.deps

    @property
    def clock(self) -> Callable[[], float]:
        """The time it reads, ``Agent(clock=...)``: approval and question windows are measured by it."""
        return self._settings.clock

    def configured(
        self,
        *,
        repository: ConversationStore | str | None = None,
        default_repository: ConversationStore | str | None = None,
        tracer: Callable[[Tracer], Tracer] | None = None,
    ) -> Agent:
        """A new agent like this one (its tools, runtime, policy and settings), as a server serves it;
        this one is left as it is (ADR 44). The new one keeps conversations in `repository` (a store,
        or the store a URL names, in this agent's namespace) when given; else in this agent's store
        when one was chosen (``Agent(repository=...)``); else in `default_repository` when given.
        `tracer` wraps its tracer (``wrap(current) -> new``): how ``serve(metrics=True)`` observes its
        turns. ``agent.configured(repository="sqlite:///ops.db")`` is this agent on that store."""
        chosen = repository
        if chosen is None and not self._repository_chosen:
            chosen = default_repository
        agent = copy.copy(self)
        if chosen is not None:
            agent.repository = open_store(chosen, namespace=self.name)
            agent._repository_chosen = True
        if tracer is not None:
            agent._settings = replace(self._settings, tracer=tracer(self._settings.tracer))
        agent._loading = threading.Lock()
        agent._service = None  # built when first needed, from its own store and settings
        return agent

    def _build_service(self, repository: ConversationStore) -> AgentService:
        tools: list[ExecutableTool] = [*self.tools, *(self._loaded or ())]
        return AgentService(self.runtime, repository, tools=tools, **self._settings.arguments())

    # -- toolsets: loaded just in time, kept afterwards ---------------------------------------------

    def _ready(self) -> AgentService:
        """The service, once every toolset has loaded (the first run loads them, before the model)."""
        if self._loaded is None:
            with self._loading:
                if self._loaded is None:
                    self._install([(t.name, t.load()) for t in self.toolsets])
        return self._service or self._first_service()

    async def _aready(self) -> AgentService:
        if self._loaded is None:
            loaded = [(t.name, await t.aload()) for t in self.toolsets]
            with self._loading:
                if self._loaded is None:
                    self._install(loaded)
        return self._service or self._first_service()

    def _first_service(self) -> AgentService:
        with self._loading:  # one service, so one worker id, whichever run comes first
            if self._service is None:
                self._service = self._build_service(self.repository)
            return self._service

    def _install(self, loaded: list[tuple[str, Any]]) -> None:
        self._loaded = combine(self.tools, loaded)[len(self.tools) :]
        self._service = self._build_service(self.repository)

    @property
    def executor(self) -> ToolExecutor | Callable[[ToolJobs], ToolExecutor] | None:
        """Where its background tools run, ``Agent(executor=...)`` (None: it has none)."""
        return self._settings.executor

    @property
    def jobs(self) -> ToolJobs:
        """What runs the jobs of this agent's background tools (toolsets loaded first): a job engine's
        worker hands it each job it takes (``dcaf-like worker``, docs/runs.md, "Tools on a job engine")."""
        return self._ready().jobs

    async def atools(self) -> list[ExecutableTool]:
        """Every tool the model is offered, by the name it is offered under (toolsets loaded first)."""
        return list((await self._aready()).tools.values())

    def close(self) -> None:
        """Close the toolsets' connections (an MCP server's process, its HTTP session), and let the
        approval notifier deliver what it has queued (within its own time limit)."""
        for toolset in self.toolsets:
            toolset.close()
        if self._settings.notifier is not None:
            self._settings.notifier.close()

    async def aclose(self) -> None:
        """Release what the agent holds on the running event loop (a server does this at shutdown):
        its store's and runtime's asyncio clients (they reopen when used again), its toolsets'
        connections."""
        await self.repository.aclose()
        await self.runtime.aclose()
        for toolset in self.toolsets:
            await toolset.aclose()
        if self._settings.notifier is not None:
            await asyncio.to_thread(self._settings.notifier.close)

    # -- running ----------------------------------------------------------------------------------

    def run(
        self,
        messages: Messages,
        *,
        conversation_id: str | None = None,
        platform_context: Mapping[str, Any] | None = None,
        session: Mapping[str, Any] | None = None,
        user: str | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        """One turn. Decisions on pending calls may ride along as ``data.tool_calls[].execute``.

        `identity` is who your code authenticated (a server does this from the API key), `deps` this
        run's dependencies instead of the agent's: both are yours to give, never read from messages.
        `user` is the name the audit trail gives whoever decides in this run: by default the
        identity's name, or ``"user"`` without one."""
        request = _request(messages, conversation_id, platform_context, session, user, identity, deps)
        return self._ready().execute(request)

    async def arun(
        self,
        messages: Messages,
        *,
        conversation_id: str | None = None,
        platform_context: Mapping[str, Any] | None = None,
        session: Mapping[str, Any] | None = None,
        user: str | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        request = _request(messages, conversation_id, platform_context, session, user, identity, deps)
        return await (await self._aready()).aexecute(request)

    def run_stream(
        self,
        messages: Messages,
        *,
        conversation_id: str | None = None,
        platform_context: Mapping[str, Any] | None = None,
        session: Mapping[str, Any] | None = None,
        user: str | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> Iterator[StreamEvent]:
        """Events as they happen; the last is ``Done`` (with the response) or ``RunFailed``."""
        return self._stream(
            _request(messages, conversation_id, platform_context, session, user, identity, deps)
        )

    def arun_stream(
        self,
        messages: Messages,
        *,
        conversation_id: str | None = None,
        platform_context: Mapping[str, Any] | None = None,
        session: Mapping[str, Any] | None = None,
        user: str | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AsyncIterator[StreamEvent]:
        return self._astream(
            _request(messages, conversation_id, platform_context, session, user, identity, deps)
        )

    def run_stateless(
        self,
        messages: Messages,
        *,
        platform_context: Mapping[str, Any] | None = None,
        session: Mapping[str, Any] | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        """One turn in a throwaway conversation: nothing from earlier runs leaks in, nothing is kept."""
        request = _request(messages, None, platform_context, session, None, identity, deps)
        self._ready()
        return self._ephemeral_service().execute(request)

    async def arun_stateless(
        self,
        messages: Messages,
        *,
        platform_context: Mapping[str, Any] | None = None,
        session: Mapping[str, Any] | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        request = _request(messages, None, platform_context, session, None, identity, deps)
        await self._aready()
        return await self._ephemeral_service().aexecute(request)

    def _ephemeral_service(self) -> AgentService:
        return self._build_service(InMemoryConversationRepository())

    def _stream(self, request: AgentRequest) -> Iterator[StreamEvent]:
        try:
            service = self._ready()
        except ToolsetUnavailable as exc:
            yield _failed(exc, request)
            return
        yield from service.execute_stream(request)

    async def _astream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        try:
            service = await self._aready()
        except ToolsetUnavailable as exc:
            yield _failed(exc, request)
            return
        async for event in service.aexecute_stream(request):
            yield event

    # -- deciding ---------------------------------------------------------------------------------

    def approve(
        self,
        conversation_id: str,
        call_id: str,
        *,
        edited_arguments: Mapping[str, Any] | None = None,
        platform_context: Mapping[str, Any] | None = None,
        user: str | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        """Approve one pending call and go on. `edited_arguments` (editable tools only) is a patch onto
        the proposal: an argument it leaves out keeps its proposed value, `None` removes one.

        `platform_context` must be the one the call was proposed in, its credentials aside (else
        ContextChanged); the policy is asked again about the call as it would run (PolicyDenied)."""
        decision = ToolDecision.approved(call_id, edited_arguments=edited_arguments)
        return self.decide(
            conversation_id,
            [decision],
            platform_context=platform_context,
            user=user,
            identity=identity,
            deps=deps,
        )

    def reject(
        self,
        conversation_id: str,
        call_id: str,
        reason: str = "",
        *,
        platform_context: Mapping[str, Any] | None = None,
        user: str | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        """Reject one pending call; the reason goes back to the model."""
        decision = ToolDecision.rejected(call_id, reason)
        return self.decide(
            conversation_id,
            [decision],
            platform_context=platform_context,
            user=user,
            identity=identity,
            deps=deps,
        )

    def decide(
        self,
        conversation_id: str,
        decisions: Iterable[ToolDecision],
        *,
        platform_context: Mapping[str, Any] | None = None,
        user: str | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        """Apply several decisions at once, each keyed by call id, then go on."""
        request = _deciding(conversation_id, decisions, platform_context, user, identity, deps)
        return self._ready().execute(request)

    async def adecide(
        self,
        conversation_id: str,
        decisions: Iterable[ToolDecision],
        *,
        platform_context: Mapping[str, Any] | None = None,
        user: str | None = None,
        identity: Identity | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        request = _deciding(conversation_id, decisions, platform_context, user, identity, deps)
        return await (await self._aready()).aexecute(request)

    # -- answering a question ---------------------------------------------------------------------

    def answer(
        self,
        conversation_id: str,
        question_id: str,
        value: Any,
        *,
        platform_context: Mapping[str, Any] | None = None,
        user: str = "user",
    ) -> AgentResponse:
        """Answer an open question of the run (``response.questions``), then go on: the tool that
        asked runs again with the answer. `value` is a bool for a confirmation, one of the options for
        a selection, text otherwise."""
        return self._ready().execute(
            self._answering(conversation_id, question_id, value, platform_context, user)
        )

    async def aanswer(
        self,
        conversation_id: str,
        question_id: str,
        value: Any,
        *,
        platform_context: Mapping[str, Any] | None = None,
        user: str = "user",
    ) -> AgentResponse:
        request = self._answering(conversation_id, question_id, value, platform_context, user)
        return await (await self._aready()).aexecute(request)

    @staticmethod
    def _answering(
        conversation_id: str, question_id: str, value: Any, context: Mapping[str, Any] | None, user: str
    ) -> AgentRequest:
        return AgentRequest(
            conversation_id=conversation_id,
            answers=(QuestionAnswer(question_id, value),),
            platform_context=dict(context or {}),
            user=user,
        )

    # -- stopping a run ---------------------------------------------------------------------------

    def cancel(self, conversation_id: str) -> None:
        """Stop the turn running on this conversation, in this process or in any other sharing the
        store: before its next step, or (served, async) while it waits for the model or a tool runs
        (an async tool is cancelled; a def tool sees ``context.cancelled``). The turn ends with
        ``stop_reason == "cancelled"``, what it did is saved, and the conversation stays usable. A
        cancel with no turn running changes nothing.

        Raises ``InvalidRequest`` for an id no conversation can have and ``ConversationNotFound`` for
        one this agent's store does not hold (nothing is written then)."""
        CancelRun(self.repository, self._settings.clock).blocking(
            conversation_id, identity=None, entrance="python"
        )

    async def acancel(self, conversation_id: str) -> None:
        await CancelRun(self.repository, self._settings.clock)(
            conversation_id, identity=None, entrance="python"
        )

    # -- conversations ----------------------------------------------------------------------------

    def conversation(self, conversation_id: str) -> Conversation | None:
        return self.repository.get(conversation_id)

    def conversation_ids(self, limit: int = 100) -> list[str]:
        """This agent's stored conversations, most recently updated first."""
        return require(self.repository, Listing).list_ids(limit)

    def waiting_approvals(
        self, *, identity: Identity | None = None, cursor: str | None = None, limit: int = 50
    ) -> InboxPage:
        """The calls waiting for `identity`'s decision across conversations, newest first, at most
        `limit` after `cursor` (docs/approvals.md, "One inbox"); None: every waiting call."""
        inbox = ListWaitingApprovals(self.repository, self.approval_policy.groups, self._settings.clock)
        return inbox.blocking(identity=identity, cursor=cursor, limit=limit)

    async def awaiting_approvals(
        self, *, identity: Identity | None = None, cursor: str | None = None, limit: int = 50
    ) -> InboxPage:
        inbox = ListWaitingApprovals(self.repository, self.approval_policy.groups, self._settings.clock)
        return await inbox(identity=identity, cursor=cursor, limit=limit)

    def escalation_sweep(self) -> SweepEscalations | None:
        """What sends the reminders and escalations its rules owe (docs/approvals.md, "Escalation"),
        one sweep per call (``await sweep()``): a server runs it every so often. None when no rule
        escalates or nobody is notified (the agent has no approval notifier)."""
        notifier = self._settings.notifier
        escalates = any(
            r.approvers is not None and r.approvers.escalation for r in self.approval_policy.rules
        )
        if notifier is None or not escalates:
            return None
        return SweepEscalations(self.repository, notifier, self.name, self._settings.clock)

    def grant(
        self,
        tool: str,
        *,
        requester: str,
        duration: float,
        arguments: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        reason: str = "",
        identity: Identity | None = None,
    ) -> Grant:
        """Approve ahead of time, for `duration` seconds by the agent's clock, the calls of `tool`
        whose arguments and platform context hold the values given (one, or a list of which any
        matches) requested by `requester` (``"*"``: anyone): docs/approvals.md, "Grants". `identity`
        needs ``approve``; None is the operator. ``agent.grant("restart_pod", requester="alice",
        arguments={"namespace": "dev"}, duration=1800)``."""
        return Grants(self.repository, self.clock).grant(
            identity=identity,
            tool=tool,
            requester=requester,
            duration=duration,
            arguments=arguments,
            context=context,
            reason=reason,
        )

    def grants(self, *, identity: Identity | None = None, everything: bool = False) -> list[Grant]:
        """The grants in force, newest first; with `everything`, the expired and revoked ones too."""
        return Grants(self.repository, self.clock).list_grants(identity=identity, everything=everything)

    def revoke_grant(self, grant_id: str, *, identity: Identity | None = None) -> Grant:
        """Revoke a grant at once: no turn that begins after approves by it."""
        return Grants(self.repository, self.clock).revoke(grant_id, identity=identity)

    def delete_conversation(self, conversation_id: str) -> bool:
        """Forget a conversation; False if there was none."""
        return require(self.repository, Listing).delete(conversation_id)

    def get_or_create_conversation(self, conversation_id: str | None = None) -> Conversation:
        """The stored conversation, or a new one saved under `conversation_id` (or a fresh id)."""
        if conversation_id is not None:
            existing = self.repository.get(conversation_id)
            if existing is not None:
                return existing
        conversation = Conversation.start(conversation_id)
        self.repository.save(conversation, 0)
        return conversation

    # -- the handler interface the server speaks ------------------------------------------------

    def run_request(self, request: AgentRequest) -> AgentResponse:
        """One turn of a typed request (what :meth:`run` builds from HelpDesk messages)."""
        return self._ready().execute(request)

    def handle(self, request: AgentRequest) -> AgentResponse:
        """The former name of :meth:`run_request`, kept for code written against it."""
        warnings.warn("Agent.handle is now Agent.run_request", DeprecationWarning, stacklevel=2)
        return self.run_request(request)

    async def ahandle(self, request: AgentRequest) -> AgentResponse:
        return await (await self._aready()).aexecute(request)

    def ahandle_stream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        return self._astream(request)

    def __repr__(self) -> str:
        return (
            f"Agent(name={self.name!r}, runtime={self.runtime.name!r}, tools={[t.name for t in self.tools]}"
            + (f", toolsets={[t.name for t in self.toolsets]})" if self.toolsets else ")")
        )


def _failed(exc: ToolsetUnavailable, request: AgentRequest) -> RunFailed:
    return RunFailed(str(exc), type(exc).__name__, request.conversation_id or "", exception=exc)


def _request(
    messages: Messages,
    conversation_id: str | None,
    platform_context: Mapping[str, Any] | None,
    session: Mapping[str, Any] | None,
    user: str | None,
    identity: Identity | None,
    deps: Any,
) -> AgentRequest:
    request = read_messages(
        messages,
        conversation_id=conversation_id,
        platform_context=platform_context,
        session=session,
        user=_who(user, identity),
    )
    if identity is None and deps is None:
        return request
    return replace(request, identity=identity, deps=deps)


def _deciding(
    conversation_id: str,
    decisions: Iterable[ToolDecision],
    platform_context: Mapping[str, Any] | None,
    user: str | None,
    identity: Identity | None,
    deps: Any,
) -> AgentRequest:
    return AgentRequest(
        conversation_id=conversation_id,
        decisions=tuple(decisions),
        platform_context=dict(platform_context or {}),
        user=_who(user, identity),
        identity=identity,
        deps=deps,
    )


def _who(user: str | None, identity: Identity | None) -> str:
    """Who a run's records name: the `user` given, else the authenticated identity's name, else
    ``"user"`` (a run nobody authenticated and nobody named)."""
    if user is not None:
        return user
    return identity.name if identity is not None else "user"


def _check_arguments(settings: AgentSettings, tools: Sequence[Tool]) -> None:
    """What the service refuses, refused when the agent is built (the service is built at its first
    run): limits that are not positive, an object with none of the methods of a hook, background
    tools with no executor (a toolset's are checked when it loads)."""
    if settings.executor is None:
        background = [t.name for t in tools if settings.background or getattr(t, "background", False)]
        if background:
            listed = ", ".join(sorted(background))
            raise ValueError(f"tools run in the background ({listed}) need an executor: Agent(executor=...)")
    if settings.max_iterations < 1:
        raise ValueError("max_iterations must be at least 1")
    if settings.max_parallel_tools < 1:
        raise ValueError("max_parallel_tools must be at least 1")
    for limit, what in (
        (settings.lease_ttl, "lease_ttl"),
        (settings.turn_timeout, "turn_timeout"),
        (settings.model_timeout, "model_timeout"),
        (settings.question_ttl, "question_ttl"),
    ):
        if limit is not None and not limit > 0:
            raise ValueError(f"{what} must be a positive number of seconds")
    Hooks.of(settings.hooks)


def _notifier_from_environment() -> ApprovalNotifier | None:
    """The webhook ``DCAF_APPROVAL_WEBHOOK_URL`` names, if set; its module (hmac, a queue, a sender
    thread) is loaded only then."""
    if not os.environ.get("DCAF_APPROVAL_WEBHOOK_URL"):
        return None
    from dcaf_like.notifiers import webhook

    return webhook.from_environment()
