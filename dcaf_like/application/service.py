"""AgentService: the agent use case. Loads the conversation, applies the request's decisions, drives a
:class:`~dcaf_like.application.turn.Turn`, and saves what happened."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import aclosing
from typing import Any

from dcaf_like.application.arrivals import Arrivals, RunningTurns
from dcaf_like.application.callbacks import approver_answer, checked_instructions, resolved
from dcaf_like.application.clock import monotonic_of
from dcaf_like.application.context import ContextPolicy, ContextWindow
from dcaf_like.application.dto import AgentRequest, AgentResponse
from dcaf_like.application.effects import (
    AskApprover,
    CallHooks,
    CallModel,
    CheckCancel,
    Effect,
    Emit,
    Enqueue,
    ReadArrived,
    ReadGrants,
    ResolveInstructions,
    RunContext,
    RunTool,
    RunTools,
    Stopped,
    Summarize,
    ToolOutcome,
    ToolOutcomes,
)
from dcaf_like.application.errors import (
    REFUSALS,
    ApplicationError,
    HookFailed,
    ModelError,
    scrub_exception,
)
from dcaf_like.application.events import CancelRequested, Done, RunFailed, StreamEvent
from dcaf_like.application.executors import ToolExecutor
from dcaf_like.application.hooks import FallbackAnswer, Hooks, Refused, Rewritten, hook_context
from dcaf_like.application.messages import (
    NO_SETTINGS,
    ModelResponse,
    ModelSettings,
)
from dcaf_like.application.model_calls import ModelCalls
from dcaf_like.application.notifications import ApprovalNotice, ApprovalNotifier, waiting_call
from dcaf_like.application.ports import (
    AgentRuntime,
    ApprovalAnswer,
    ApprovalCallback,
    ConversationStore,
    ExecutableTool,
    acancel_requested,
    agrants_in_force,
    arecord_decisions,
    cancel_requested,
    grants_in_force,
    record_decisions,
)
from dcaf_like.application.requests import RequestRules
from dcaf_like.application.run_state import TurnRun
from dcaf_like.application.storable import refuse_non_finite
from dcaf_like.application.tool_jobs import ToolJobs, background_tools, executor_for
from dcaf_like.application.tool_runs import ToolRuns
from dcaf_like.application.tracing import NO_SPAN, NoTracer, Span, Tracer
from dcaf_like.application.turn import Turn
from dcaf_like.application.turn_settings import TurnSettings, question_window
from dcaf_like.application.workers import new_worker_id
from dcaf_like.concurrency.bridges import at_once, at_once_each
from dcaf_like.domain import (
    ApprovalPolicy,
    Conversation,
    DecisionRecord,
    DomainError,
    PlatformContext,
)
from dcaf_like.domain.context import secret_values
from dcaf_like.domain.conversation import new_conversation_id
from dcaf_like.domain.grant import Grant

logger = logging.getLogger("dcaf_like.service")

InstructionProvider = Callable[[RunContext[Any]], str | Awaitable[str]]
"""Dynamic instructions: called at the start of each turn with the run's context, sync or async."""


class AgentService:
    def __init__(
        self,
        runtime: AgentRuntime,
        repository: ConversationStore,
        *,
        tools: Sequence[ExecutableTool] = (),
        policy: ApprovalPolicy | None = None,
        system: str | InstructionProvider = "",
        max_iterations: int = 10,
        approval_ttl: float | None = None,
        question_ttl: float | None = None,
        approver: ApprovalCallback | None = None,
        name: str = "agent",
        clock: Callable[[], float] = time.time,
        tracer: Tracer | None = None,
        lease_ttl: float = 60.0,
        turn_timeout: float | None = None,
        model_timeout: float | None = None,
        worker: str | None = None,
        context: ContextPolicy | None = None,
        notifier: ApprovalNotifier | None = None,
        hooks: Sequence[object] = (),
        deps: Any = None,
        model_settings: ModelSettings | None = None,
        executor: ToolExecutor | Callable[[ToolJobs], ToolExecutor] | None = None,
        background: bool = False,
        parallel_tools: bool = False,
        max_parallel_tools: int = 4,
    ) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        if max_parallel_tools < 1:
            raise ValueError("max_parallel_tools must be at least 1")
        for limit, what in (
            (lease_ttl, "lease_ttl"),
            (turn_timeout, "turn_timeout"),
            (model_timeout, "model_timeout"),
            (question_ttl, "question_ttl"),
        ):
            if limit is not None and not limit > 0:
                raise ValueError(f"{what} must be a positive number of seconds")
        toolbox = {t.name: t for t in tools}
        if len(toolbox) != len(tools):
            names = [t.name for t in tools]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"two tools share a name: {', '.join(duplicates)}")
        self.runtime = runtime
        self.repository = repository
        self.system = system
        self.approver = approver
        self.clock = clock
        self.monotonic = monotonic_of(clock)
        self.tracer: Tracer = tracer or NoTracer()
        self.name = name
        #: Who this service is when it holds a lease on a call it runs.
        self.worker = worker or new_worker_id()
        self.lease_ttl = lease_ttl
        self.model_timeout = model_timeout
        self.notifier = notifier
        #: The agent's dependencies, given to its instructions, tools and policy; never stored or sent.
        self.deps = deps
        self._settings = TurnSettings(
            toolbox=toolbox,
            policy=policy or ApprovalPolicy(),
            tool_specs=tuple(t.spec() for t in tools),
            max_iterations=max_iterations,
            approval_ttl=approval_ttl,
            question_ttl=question_window(question_ttl, approval_ttl),
            has_approver=approver is not None,
            runtime_name=runtime.name,
            agent_name=name,
            clock=clock,
            monotonic=self.monotonic,
            system=system if isinstance(system, str) else None,
            worker=self.worker,
            lease_ttl=lease_ttl,
            turn_timeout=turn_timeout,
            context=context or ContextWindow(),
            context_window=runtime.context_window,
            count_tokens=functools.lru_cache(maxsize=8192)(runtime.count_tokens),
            count_request_tokens=runtime.count_request_tokens,
            accepts=runtime.accepts,
            hooks=Hooks.of(hooks),
            model_settings=model_settings or NO_SETTINGS,
            parallel_tools=max_parallel_tools if parallel_tools else 1,
        )
        #: What runs the jobs of this agent's background tools, here or in a job engine's worker.
        self.jobs = ToolJobs(
            repository,
            toolbox,
            worker=self.worker,
            lease_ttl=lease_ttl,
            clock=clock,
            monotonic=self.monotonic,
            tracer=self.tracer,
            deps=deps,
            continuation=lambda request, blocking: self._quietly(request, blocking=blocking),
            question_ttl=self._settings.question_ttl,
        )
        chosen = executor_for(executor, self.jobs)
        self._settings.background = background_tools(tools, chosen, everything=background)
        if chosen is not None:
            self._settings.queue_ttl = chosen.queue_ttl
        self._models = ModelCalls(
            runtime, repository, self.tracer, timeout=model_timeout, monotonic=self.monotonic
        )
        self._tools = ToolRuns(
            repository,
            self.tracer,
            self._save,
            worker=self.worker,
            lease_ttl=lease_ttl,
            clock=clock,
            monotonic=self.monotonic,
            executor=chosen,
        )
        self._rules = RequestRules(
            self._settings, runtime, worker=self.worker, lease_ttl=lease_ttl, deps=deps, tracer=self.tracer
        )
        #: The turns running in this process, by conversation: where a message sent meanwhile waits.
        self._running = RunningTurns(clock)
        # What performs each effect that streams nothing (the driver answers Emit and ReadArrived).
        self._performers: dict[type[Effect], Callable[[Any, TurnRun], Awaitable[Any]]] = {
            CallModel: lambda effect, run: self._models.invoke(effect, run),
            RunTool: lambda effect, run: self._tools.run(effect, run),
            RunTools: lambda effect, run: self._tools.run_all(effect, run),
            Enqueue: lambda effect, run: self._tools.enqueue(effect, run),
            CheckCancel: lambda effect, run: self._cancel_requested(run),
            ResolveInstructions: lambda effect, run: self._instructions(effect.context, run),
            Summarize: lambda effect, run: self._summary(effect, run),
            CallHooks: lambda effect, run: self._call_hooks(effect, run),
            ReadGrants: lambda effect, run: self._read_grants(run),
            AskApprover: lambda effect, run: self._ask_approver(effect, run),
        }
        fitting = self._settings.context
        #: A turn reads the conversation's recent part only (ADR 22) when its policy never sends what
        #: the summary covers and a window is known (without one the whole transcript is sent).
        self._reads_recent = (
            fitting is not None
            and not fitting.sends_summarized
            and ((fitting.window or runtime.context_window) is not None)
        )

    @property
    def tools(self) -> dict[str, ExecutableTool]:
        return dict(self._settings.toolbox)

    # -- four ways in, one driver -----------------------------------------------------------------

    def execute(self, request: AgentRequest) -> AgentResponse:
        """Run one turn; raise the typed error if it fails (after saving what had already happened).

        Nobody reads a stream: the turn builds no events and the model is asked without streaming."""
        return at_once(self._quietly(request, blocking=True))

    def execute_stream(self, request: AgentRequest) -> Iterator[StreamEvent]:
        """Run one turn, yielding events as they happen; a failure ends the stream with RunFailed."""
        try:
            yield from at_once_each(self._drive(request, blocking=True, streams=True))
        except (ApplicationError, DomainError) as exc:
            yield _failed(exc, request)

    async def aexecute(self, request: AgentRequest) -> AgentResponse:
        """The async twin of :meth:`execute`."""
        return await self._quietly(request, blocking=False)

    async def aexecute_stream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        """The async twin of :meth:`execute_stream`; it also streams the tools' progress reports."""
        try:
            async for event in self._drive(request, blocking=False, streams=True):
                yield event
        except (ApplicationError, DomainError) as exc:
            yield _failed(exc, request)

    async def _quietly(self, request: AgentRequest, *, blocking: bool) -> AgentResponse:
        """The turn's response, from a driver that streams nothing (it yields only Done)."""
        async for done in self._drive(request, blocking=blocking, streams=False):  # noqa: B007
            pass
        return _response(done)

    async def _drive(
        self, request: AgentRequest, *, blocking: bool, streams: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """The one driver of a turn: begin it, perform the effects of its :class:`Turn`, save what moved
        (whatever happened), and yield its events, :class:`Done` last.

        `blocking` performs every effect in place with the blocking ports (``execute``, driven by
        :func:`~dcaf_like.concurrency.bridges.at_once_each`: nothing here then waits on an event
        loop); else with the async ones. Without `streams` the turn builds no events and the model is
        asked without streaming."""
        # The effects whose events reach the stream: the model's deltas; a tool's progress reports
        # when served (a blocking stream drops them, docs/runs.md); a cancel seen between steps.
        streamed = (CallModel, CheckCancel) if blocking else (CallModel, RunTool, RunTools, CheckCancel)
        if (queued := self._running.queue(request, self.runtime.name)) is not None:
            yield Done(queued)
            return
        span = self._start_span(request)
        run: TurnRun | None = None
        arrivals: Arrivals | None = None
        try:
            run = await self._begin(request, span, blocking=blocking, streams=streams)
            arrivals = self._running.start(run.conversation)
            # The calls waiting before the turn, which the notifier is not told about again.
            notifies = self.notifier is not None
            waiting_before = {c.id.value for c in run.conversation.pending_tool_calls} if notifies else set()
            try:
                machine = run.turn.run()
                value: Any = None
                while True:
                    try:
                        effect = machine.send(value)
                    except StopIteration as stop:
                        response: AgentResponse = stop.value
                        break
                    if streams and type(effect) in streamed:
                        async with aclosing(self._streamed(effect, run)) as items:
                            async for item in items:
                                if isinstance(item, _ANSWERS):
                                    value = item
                                else:
                                    yield item
                    elif type(effect) is Emit:
                        value = None
                        yield effect.event
                    elif type(effect) is ReadArrived:  # in memory: nothing to wait for
                        value = self._running.take(run.conversation.id)
                    else:
                        value = await self._perform(effect, run)
            finally:
                self._running.stop(run.conversation, arrivals)
                if run.conversation.version != run.expected:
                    await self._save(run)
                if run.jobs:  # background calls, saved queued: their jobs go to the executor now
                    await self._tools.hand_over(run)
            _finish_span(span, response)
            self._notify(request, response, waiting_before)
        except Exception as exc:
            self._scrub(exc, request)
            if isinstance(exc, REFUSALS):  # the caller's doing: counted apart from failed turns
                span.set("dcaf.refused", type(exc).__name__)
            span.fail(exc)
            fallback = await self._on_error(exc, request, run, blocking)
            # Only a model's failure, once the turn began, is answered by a hook's fallback: a refusal
            # stays a refusal, and a store's or a hook's failure stays a failure.
            if fallback is None or run is None or not isinstance(exc, ModelError):
                raise
            response = run.turn.fall_back(fallback.text)
            span.set("dcaf.stop_reason", response.stop_reason)
            await self._save(run)
        finally:
            span.end()
        yield Done(response)

    async def _begin(self, request: AgentRequest, span: Span, *, blocking: bool, streams: bool) -> TurnRun:
        """Load the conversation, apply the request and claim its approvals (saved before any tool
        runs, so a call is never run twice)."""
        refuse_non_finite(request)  # what cannot be stored is refused before anything is read
        # A new conversation's id is looked up too: a store that cannot be used fails the turn here,
        # before the model is called or a tool runs.
        conversation_id = request.conversation_id or new_conversation_id()
        repository = self.repository
        if self._reads_recent:
            stored = await self._recent(conversation_id, request, blocking)
        else:
            stored = repository.get(conversation_id) if blocking else await repository.aget(conversation_id)
        refused: list[DecisionRecord] = []
        try:
            run = self._prepare(request, conversation_id, stored, span, refused, blocking, streams)
        except Exception:
            if refused:  # the audit trail keeps refusals too
                if blocking:
                    record_decisions(repository, refused)
                else:
                    await arecord_decisions(repository, refused)
            raise
        # Saved before the model is asked when it claims calls (a call never runs twice), when it
        # starts a conversation (a run is readable, listed and cancellable from its first moment: its
        # cost, one save per new conversation, is in docs/benchmarks.md), and when it brings the user's
        # message: a crash before the turn's end does not lose it (docs/runs.md, "A crash keeps the
        # user's message").
        if run.claim or stored is None or request.text or request.attachments:
            await self._save(run)
        return run

    async def _recent(
        self, conversation_id: str, request: AgentRequest, blocking: bool
    ) -> Conversation | None:
        """The stored conversation's recent part, all a turn needs (ADR 22); the whole conversation
        when the request decides a call that part does not hold (so it is refused as before)."""
        repository = self.repository
        stored = (
            repository.get_recent(conversation_id)
            if blocking
            else await repository.aget_recent(conversation_id)
        )
        if stored is None or all(d.call_id in stored.tool_calls for d in request.decisions):
            return stored
        return repository.get(conversation_id) if blocking else await repository.aget(conversation_id)

    def _streamed(
        self, effect: Effect, run: TurnRun
    ) -> AsyncGenerator[StreamEvent | ModelResponse | Stopped | ToolOutcome | ToolOutcomes | bool, None]:
        """Perform a model call, a tool run or a cancel check that streams: its events as they come
        (the model's deltas, the tool's progress, the cancel's acknowledgement), then what the turn is
        sent back."""
        if isinstance(effect, CallModel):
            return self._models.stream(effect, run)
        if isinstance(effect, CheckCancel):
            return self._check_cancel_streamed(run)
        assert isinstance(effect, RunTool | RunTools), effect
        return self._tools.run_reporting(effect, run)

    async def _check_cancel_streamed(self, run: TurnRun) -> AsyncGenerator[CancelRequested | bool, None]:
        cancelled = await self._cancel_requested(run)
        if cancelled and (ack := run.acknowledge_cancel()) is not None:
            yield ack
        yield cancelled

    def _perform(self, effect: Effect, run: TurnRun) -> Awaitable[Any]:
        """What performs an effect that streams nothing; awaited, it is what the turn is sent back."""
        return self._performers[type(effect)](effect, run)

    async def _read_grants(self, run: TurnRun) -> tuple[Grant, ...]:
        now = self.clock()
        if run.blocking:
            return grants_in_force(self.repository, now)
        return await agrants_in_force(self.repository, now)

    async def _call_hooks(self, effect: CallHooks, run: TurnRun) -> Refused | HookFailed | Rewritten | None:
        answer = await self._settings.hooks.call(effect.point, effect.arguments, blocking=run.blocking)
        if isinstance(answer, Rewritten):  # the turn's trace says who changed what the model read or said
            run.span.set(f"dcaf.hooks.{effect.point}.rewritten_by", ",".join(answer.by))
        return answer

    async def _on_error(
        self, exc: Exception, request: AgentRequest, run: TurnRun | None, blocking: bool
    ) -> FallbackAnswer | None:
        """Tell the ``on_error`` hooks the turn failed (after its scrub: they read no secret); the
        fallback answer one gave, if any."""
        hooks = self._settings.hooks
        if not hooks.on_error:
            return None
        conversation_id = run.conversation.id if run else request.conversation_id or ""
        public = PlatformContext(request.platform_context).public()
        return await hooks.failed(hook_context(self.name, conversation_id, public), exc, blocking=blocking)

    async def _cancel_requested(self, run: TurnRun) -> bool:
        conversation_id, since = run.conversation.id, run.started
        if run.blocking:
            return cancel_requested(self.repository, conversation_id, since=since)
        return await acancel_requested(self.repository, conversation_id, since=since)

    async def _instructions(self, context: RunContext[Any], run: TurnRun) -> str:
        if isinstance(self.system, str):
            return self.system
        return checked_instructions(await resolved(self.system(context), run.blocking))

    async def _summary(self, effect: Summarize, run: TurnRun) -> ModelResponse | None:
        """The model's answer with the summary, or None when its call was stopped (cancel, time limit).
        Its span says it is the summary's (``dcaf.purpose``); the turn counts its tokens in its usage."""
        answer = await self._models.invoke(CallModel(effect.request), run, purpose="summary")
        return None if isinstance(answer, Stopped) else answer

    async def _ask_approver(self, effect: AskApprover, run: TurnRun) -> ApprovalAnswer:
        assert self.approver is not None
        return approver_answer(await resolved(self.approver(effect.pending), run.blocking))

    def _notify(self, request: AgentRequest, response: AgentResponse, waiting_before: set[str]) -> None:
        """Tell the notifier (after the save) about the calls this turn left waiting; it delivers
        elsewhere, and its failure is its own, never the turn's."""
        if self.notifier is None:
            return
        new = [call for call in response.pending_tool_calls if call.id not in waiting_before]
        if not new:
            return
        calls = tuple(waiting_call(c) for c in new)
        notice = ApprovalNotice(self.name, response.conversation_id, calls, user=request.user)
        try:
            self.notifier.approval_required(notice)
        except Exception:
            logger.exception("the approval notifier failed for conversation %s", response.conversation_id)

    async def _save(self, run: TurnRun) -> None:
        """Save the run's conversation, expecting the version of its last save."""
        if run.blocking:
            self.repository.save(run.conversation, run.expected)
        else:
            await self.repository.asave(run.conversation, run.expected)
        run.expected = run.conversation.version

    # -- preparing a turn -------------------------------------------------------------------------

    def _start_span(self, request: AgentRequest) -> Span:
        attributes = {
            "dcaf.agent": self.name,
            "dcaf.runtime": self.runtime.name,
            "dcaf.entrance": request.entrance,
        }
        if request.conversation_id:
            attributes["dcaf.conversation_id"] = request.conversation_id
        return self.tracer.start("dcaf.turn", attributes)

    def _scrub(self, exc: BaseException, request: AgentRequest) -> None:
        """Remove the runtime's secrets (its API key) and the request's credentials from the failure's
        text, and from the exceptions it was raised from, before anyone reports or logs it."""
        secrets = [*self.runtime.secret_values(), *secret_values(request.platform_context)]
        if secrets:
            scrub_exception(exc, secrets)

    def _prepare(
        self,
        request: AgentRequest,
        conversation_id: str,
        stored: Conversation | None,
        span: Span,
        refused: list[DecisionRecord],
        blocking: bool,
        streams: bool,
    ) -> TurnRun:
        """Apply the request's rules (:class:`RequestRules`) and make its turn. It raises before
        anything is saved (the records of the decisions it refused are in `refused`)."""
        now = self.clock()
        prepared = self._rules.prepare(request, conversation_id, stored, now=now, span=span, refused=refused)
        turn = Turn(
            prepared.conversation,
            self._settings,
            approved_now=prepared.approved,
            rejected_now=prepared.rejected,
            interrupted_now=prepared.interrupted,
            trusted=prepared.trusted,
            declined_now=prepared.declined,
            emits=streams,
            queued_now=prepared.queued,
            waits_for_requester=prepared.waits_for_requester,
            entrance=request.entrance,
        )
        claim = bool(prepared.approved)
        return TurnRun(turn, prepared.conversation, prepared.expected, now, span, blocking, claim=claim)


#: What a streamed effect ends with: the answer the turn is sent back.
_ANSWERS = (ModelResponse, Stopped, ToolOutcome, ToolOutcomes, bool)


def _response(done: StreamEvent) -> AgentResponse:
    assert isinstance(done, Done), done
    return done.response


def _finish_span(span: Span, response: AgentResponse) -> None:
    if span is NO_SPAN:
        return
    span.set("dcaf.conversation_id", response.conversation_id)
    span.set("dcaf.stop_reason", response.stop_reason)
    span.set("dcaf.pending_approvals", len(response.pending_tool_calls))


def _failed(exc: Exception, request: AgentRequest) -> RunFailed:
    return RunFailed(str(exc), type(exc).__name__, request.conversation_id or "", exception=exc)
