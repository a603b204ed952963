"""AgentService: the agent use case. Loads the conversation, applies the request's decisions, drives a
:class:`~dcaf_like.application.turn.Turn`, and saves what happened."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dcaf_like.application.concurrency import resolve, resolve_sync
from dcaf_like.application.context import ContextPolicy, ContextWindow
from dcaf_like.application.dto import AgentRequest, AgentResponse, ToolDecision
from dcaf_like.application.errors import (
    ApplicationError,
    ConversationNotFound,
    InvalidRequest,
    ModelError,
    ModelTimeout,
    UnknownTool,
    scrub_exception,
)
from dcaf_like.application.events import Done, RunFailed, StreamEvent, ToolProgress
from dcaf_like.application.messages import ModelCompleted, ModelResponse
from dcaf_like.application.ports import (
    AgentRuntime,
    ApprovalAnswer,
    ApprovalCallback,
    ConversationRepository,
    ExecutableTool,
)
from dcaf_like.application.runs import (
    CancelPoll,
    OutOfTime,
    RunCancelled,
    aiterate_within,
    arun_tool,
    awithin,
    iterate_within,
    new_worker_id,
    run_tool,
    within,
)
from dcaf_like.application.tracing import NO_SPAN, NoTracer, Span, Tracer
from dcaf_like.application.turn import (
    CANCELLED,
    TURN_TIMEOUT,
    AskApprover,
    CallModel,
    CheckCancel,
    Effect,
    Emit,
    ResolveInstructions,
    RunContext,
    RunTool,
    Stopped,
    Summarize,
    ToolOutcome,
    Turn,
    TurnSettings,
)
from dcaf_like.domain import (
    NO_CONTEXT,
    ApprovalPolicy,
    Conversation,
    DeciderKind,
    DecisionRecord,
    DomainError,
    EditNotAllowed,
    PlatformContext,
    Role,
    ToolInput,
)
from dcaf_like.domain.context import secret_values
from dcaf_like.domain.conversation import new_conversation_id

InstructionProvider = Callable[[RunContext], str | Awaitable[str]]
"""Dynamic instructions: called at the start of each turn with the run's context, sync or async."""

EXPIRED = "the approval window closed before a decision"

#: Seconds between two reads of the store for a cancel request while the model answers (async only).
CANCEL_POLL = 0.5


@dataclass(slots=True)
class _Prepared:
    conversation: Conversation
    expected_version: int
    turn: Turn
    claim: bool
    started: float = 0.0


@dataclass(slots=True)
class _Saved:
    """The conversation a turn runs on, and the version its next save expects (a lease renewed while
    a tool runs saves, and moves it on)."""

    conversation: Conversation
    expected: int
    #: When the turn started: a cancel asked for since then stops it.
    started: float = 0.0


class AgentService:
    def __init__(
        self,
        runtime: AgentRuntime,
        repository: ConversationRepository,
        *,
        tools: Sequence[ExecutableTool] = (),
        policy: ApprovalPolicy | None = None,
        system: str | InstructionProvider = "",
        max_iterations: int = 10,
        approval_ttl: float | None = None,
        approver: ApprovalCallback | None = None,
        name: str = "agent",
        clock: Callable[[], float] = time.time,
        tracer: Tracer | None = None,
        lease_ttl: float = 60.0,
        turn_timeout: float | None = None,
        model_timeout: float | None = None,
        worker: str | None = None,
        context: ContextPolicy | None = None,
    ) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        for limit, what in (
            (lease_ttl, "lease_ttl"),
            (turn_timeout, "turn_timeout"),
            (model_timeout, "model_timeout"),
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
        self.tracer: Tracer = tracer or NoTracer()
        self.name = name
        #: Who this service is when it holds a lease on a call it runs.
        self.worker = worker or new_worker_id()
        self.lease_ttl = lease_ttl
        self.model_timeout = model_timeout
        self._settings = TurnSettings(
            toolbox=toolbox,
            policy=policy or ApprovalPolicy(),
            tool_specs=tuple(t.spec() for t in tools),
            max_iterations=max_iterations,
            approval_ttl=approval_ttl,
            has_approver=approver is not None,
            runtime_name=runtime.name,
            agent_name=name,
            clock=clock,
            system=system if isinstance(system, str) else None,
            worker=self.worker,
            lease_ttl=lease_ttl,
            turn_timeout=turn_timeout,
            context=context or ContextWindow(),
            context_window=runtime.context_window,
            count_tokens=functools.lru_cache(maxsize=8192)(runtime.count_tokens),
            count_request_tokens=runtime.count_request_tokens,
        )

    @property
    def tools(self) -> dict[str, ExecutableTool]:
        return dict(self._settings.toolbox)

    # -- sync -------------------------------------------------------------------------------------

    def execute(self, request: AgentRequest) -> AgentResponse:
        """Run one turn; raise the typed error if it fails (after saving what had already happened).

        Nobody reads a stream here, so the turn is driven directly: no events, no generators between
        the turn and the model."""
        turn = self._start_turn(request)
        try:
            prepared, expected = self._begin(request, turn, emits=False)
            saved = _Saved(prepared.conversation, expected, prepared.started)
            try:
                response = self._settle(prepared.turn.run(), turn, saved)
            finally:
                if saved.conversation.version != saved.expected:
                    self.repository.save(saved.conversation, saved.expected)
            prepared.conversation.collect_events()
            _finish_turn(turn, response)
            return response
        except Exception as exc:
            self._scrub(exc, request)
            turn.fail(exc)
            raise
        finally:
            turn.end()

    def execute_stream(self, request: AgentRequest) -> Iterator[StreamEvent]:
        """Run one turn, yielding events as they happen; a failure ends the stream with RunFailed."""
        try:
            yield from self._events(request)
        except (ApplicationError, DomainError) as exc:
            yield _failed(exc, request)

    def _events(self, request: AgentRequest) -> Iterator[StreamEvent]:
        turn = self._start_turn(request)
        try:
            prepared, expected = self._begin(request, turn, emits=True)
            saved = _Saved(prepared.conversation, expected, prepared.started)
            try:
                response = yield from self._drive(prepared.turn.run(), turn, saved)
            finally:
                if saved.conversation.version != saved.expected:
                    self.repository.save(saved.conversation, saved.expected)
            prepared.conversation.collect_events()
            _finish_turn(turn, response)
            yield Done(response)
        except Exception as exc:
            self._scrub(exc, request)
            turn.fail(exc)
            raise
        finally:
            turn.end()

    def _begin(self, request: AgentRequest, turn: Span, *, emits: bool) -> tuple[_Prepared, int]:
        """Load the conversation, apply the request and claim its approvals (saved before any tool
        runs, so a call is never run twice); returns the version the turn's save expects."""
        # A new conversation's id is looked up too: a store that cannot be used fails the turn here,
        # before the model is called or a tool runs.
        conversation_id = request.conversation_id or new_conversation_id()
        stored = self.repository.get(conversation_id)
        refused: list[DecisionRecord] = []
        try:
            prepared = self._prepare(request, conversation_id, stored, turn, emits=emits, refused=refused)
        except Exception:
            if refused:
                self.repository.record_decisions(refused)  # the audit trail keeps refusals too
            raise
        if not prepared.claim:
            return prepared, prepared.expected_version
        self.repository.save(prepared.conversation, prepared.expected_version)
        return prepared, prepared.conversation.version

    def _settle(
        self, machine: Generator[Effect, Any, AgentResponse], turn: Span, saved: _Saved
    ) -> AgentResponse:
        """Perform a turn's effects until it ends; the turn emits no events (nobody streams)."""
        value: Any = None
        while True:
            try:
                effect = machine.send(value)
            except StopIteration as stop:
                response: AgentResponse = stop.value
                return response
            if isinstance(effect, CallModel):
                value = self._invoke_model(effect, turn)
            else:
                value = self._perform(effect, turn, saved)

    def _drive(
        self, machine: Generator[Effect, Any, AgentResponse], turn: Span, saved: _Saved
    ) -> Generator[StreamEvent, None, AgentResponse]:
        """Perform a turn's effects until it ends, yielding its events and the model's as they come."""
        value: Any = None
        while True:
            try:
                effect = machine.send(value)
            except StopIteration as stop:
                response: AgentResponse = stop.value
                return response
            value = None
            if isinstance(effect, Emit):
                yield effect.event
            elif isinstance(effect, CallModel):
                value = yield from self._stream_model(effect, turn)
            else:
                value = self._perform(effect, turn, saved)

    def _perform(self, effect: Effect, turn: Span, saved: _Saved) -> Any:
        """Run a tool, resolve instructions, or ask the approver: what the sync drivers share."""
        if isinstance(effect, RunTool):
            call_id = effect.context.call_id
            return run_tool(
                effect,
                self._tool_span(effect, turn),
                renew=lambda: self._renew(saved, call_id),
                every=self.lease_ttl / 3,
            )
        if isinstance(effect, CheckCancel):
            return self.repository.cancel_requested(saved.conversation.id, since=saved.started)
        if isinstance(effect, ResolveInstructions):
            return self._instructions(effect.context, resolve_sync)
        if isinstance(effect, Summarize):
            return _summary_text(self._invoke_model(CallModel(effect.request), turn))
        assert isinstance(effect, AskApprover), effect  # an unstreamed turn emits nothing
        assert self.approver is not None
        return _answer(resolve_sync(self.approver(effect.pending)))

    def _invoke_model(self, effect: CallModel, turn: Span) -> ModelResponse | Stopped:
        span = self.tracer.start("dcaf.model", {"dcaf.runtime": self.runtime.name}, turn)
        seconds, the_turns = self._model_limit(effect)
        try:
            if seconds is None:
                return _traced(span, self.runtime.invoke(effect.request))
            return _traced(span, within(lambda: self.runtime.invoke(effect.request), seconds))
        except OutOfTime:
            return self._out_of_time(span, seconds, the_turns)
        except Exception as exc:
            failure = self._model_failure(exc)
            span.fail(failure)
            raise failure from exc
        finally:
            span.end()

    def _stream_model(
        self, effect: CallModel, turn: Span
    ) -> Generator[StreamEvent, None, ModelResponse | Stopped]:
        span = self.tracer.start("dcaf.model", {"dcaf.runtime": self.runtime.name}, turn)
        seconds, the_turns = self._model_limit(effect)
        try:
            events = self.runtime.stream(effect.request)
            for event in events if seconds is None else iterate_within(events, seconds):
                if isinstance(event, ModelCompleted):
                    return _traced(span, event.response)
                yield event
        except OutOfTime:
            return self._out_of_time(span, seconds, the_turns)
        except Exception as exc:
            failure = self._model_failure(exc)
            span.fail(failure)
            raise failure from exc
        finally:
            span.end()
        raise ModelError(
            f"{self.runtime.name}: the stream ended without a final response", runtime=self.runtime.name
        )

    # -- async ------------------------------------------------------------------------------------

    async def aexecute(self, request: AgentRequest) -> AgentResponse:
        """The async twin of :meth:`execute`: driven directly, no events."""
        turn = self._start_turn(request)
        try:
            prepared, expected = await self._abegin(request, turn, emits=False)
            conversation = prepared.conversation
            saved = _Saved(conversation, expected, prepared.started)
            try:
                response = await self._asettle(prepared.turn.run(), turn, saved)
            finally:
                if conversation.version != saved.expected:
                    await self.repository.asave(conversation, saved.expected)
            conversation.collect_events()
            _finish_turn(turn, response)
            return response
        except Exception as exc:
            self._scrub(exc, request)
            turn.fail(exc)
            raise
        finally:
            turn.end()

    async def aexecute_stream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        try:
            async for event in self._aevents(request):
                yield event
        except (ApplicationError, DomainError) as exc:
            yield _failed(exc, request)

    async def _aevents(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        turn = self._start_turn(request)
        try:
            async for event in self._aturn(request, turn):
                if isinstance(event, Done):
                    _finish_turn(turn, event.response)
                yield event
        except Exception as exc:
            self._scrub(exc, request)
            turn.fail(exc)
            raise
        finally:
            turn.end()

    async def _aturn(self, request: AgentRequest, turn: Span) -> AsyncIterator[StreamEvent]:
        prepared, expected = await self._abegin(request, turn, emits=True)
        conversation = prepared.conversation
        saved = _Saved(conversation, expected, prepared.started)
        machine = prepared.turn.run()
        value: Any = None
        try:
            while True:
                try:
                    effect = machine.send(value)
                except StopIteration as stop:
                    response: AgentResponse = stop.value
                    break
                value = None
                if isinstance(effect, Emit):
                    yield effect.event
                elif isinstance(effect, CallModel):
                    async for event in self._astream_model(effect, turn, saved):
                        if isinstance(event, ModelCompleted):
                            value = event.response
                        elif isinstance(event, Stopped):
                            value = event
                        else:
                            yield event
                elif isinstance(effect, RunTool):
                    async for event in self._arun_reporting(effect, turn, saved):
                        if isinstance(event, ToolOutcome):
                            value = event
                        else:
                            yield event
                else:
                    value = await self._aperform(effect, turn, saved)
        finally:
            if conversation.version != saved.expected:
                await self.repository.asave(conversation, saved.expected)
        conversation.collect_events()
        yield Done(response)

    async def _abegin(self, request: AgentRequest, turn: Span, *, emits: bool) -> tuple[_Prepared, int]:
        conversation_id = request.conversation_id or new_conversation_id()  # looked up, as in _begin
        stored = await self.repository.aget(conversation_id)
        refused: list[DecisionRecord] = []
        try:
            prepared = self._prepare(request, conversation_id, stored, turn, emits=emits, refused=refused)
        except Exception:
            if refused:
                await self.repository.arecord_decisions(refused)  # the audit trail keeps refusals too
            raise
        if not prepared.claim:
            return prepared, prepared.expected_version
        await self.repository.asave(prepared.conversation, prepared.expected_version)
        return prepared, prepared.conversation.version

    async def _arun_reporting(self, effect: RunTool, turn: Span, saved: _Saved) -> AsyncIterator[Any]:
        """Run a tool, yielding its progress reports as ToolProgress events as they come (from any
        thread), then its ToolOutcome."""
        loop = asyncio.get_running_loop()
        reports: asyncio.Queue[ToolProgress] = asyncio.Queue()
        call_id, name = effect.context.call_id, effect.tool.name

        def report(message: str, fraction: float | None) -> None:
            event = ToolProgress(call_id, name, message, fraction)
            try:
                if asyncio.get_running_loop() is loop:
                    reports.put_nowait(event)
                    return
            except RuntimeError:  # no loop in this thread: a tool in a worker thread
                pass
            loop.call_soon_threadsafe(reports.put_nowait, event)

        effect.context = replace(effect.context, on_progress=report)
        running = asyncio.ensure_future(self._aperform(effect, turn, saved))
        try:
            while not running.done():
                waiting = asyncio.ensure_future(reports.get())
                await asyncio.wait((running, waiting), return_when=asyncio.FIRST_COMPLETED)
                if waiting.done():
                    yield waiting.result()
                else:
                    waiting.cancel()
            while not reports.empty():
                yield reports.get_nowait()
        finally:
            if not running.done():
                running.cancel()
        yield running.result()

    async def _asettle(
        self, machine: Generator[Effect, Any, AgentResponse], turn: Span, saved: _Saved
    ) -> AgentResponse:
        """The async twin of :meth:`_settle`."""
        value: Any = None
        while True:
            try:
                effect = machine.send(value)
            except StopIteration as stop:
                response: AgentResponse = stop.value
                return response
            if isinstance(effect, CallModel):
                value = await self._ainvoke_model(effect, turn, saved)
            else:
                value = await self._aperform(effect, turn, saved)

    async def _aperform(self, effect: Effect, turn: Span, saved: _Saved) -> Any:
        if isinstance(effect, RunTool):
            call_id = effect.context.call_id
            return await arun_tool(
                effect,
                self._tool_span(effect, turn),
                renew=lambda: self._arenew(saved, call_id),
                every=self.lease_ttl / 3,
            )
        if isinstance(effect, CheckCancel):
            return await self.repository.acancel_requested(saved.conversation.id, since=saved.started)
        if isinstance(effect, ResolveInstructions):
            return await self._ainstructions(effect.context)
        if isinstance(effect, Summarize):
            return _summary_text(await self._ainvoke_model(CallModel(effect.request), turn, saved))
        assert isinstance(effect, AskApprover), effect  # an unstreamed turn emits nothing
        assert self.approver is not None
        return _answer(await resolve(self.approver(effect.pending)))

    async def _ainvoke_model(self, effect: CallModel, turn: Span, saved: _Saved) -> ModelResponse | Stopped:
        span = self.tracer.start("dcaf.model", {"dcaf.runtime": self.runtime.name}, turn)
        seconds, the_turns = self._model_limit(effect)
        poll = self._cancel_poll(saved)
        try:
            answer = self.runtime.ainvoke(effect.request)
            return _traced(span, await poll.step(answer if seconds is None else awithin(answer, seconds)))
        except OutOfTime:
            return self._out_of_time(span, seconds, the_turns)
        except RunCancelled:
            span.set("dcaf.stop_reason", CANCELLED)
            return Stopped(CANCELLED)
        except Exception as exc:
            failure = self._model_failure(exc)
            span.fail(failure)
            raise failure from exc
        finally:
            poll.close()
            span.end()

    async def _astream_model(self, effect: CallModel, turn: Span, saved: _Saved) -> AsyncIterator[Any]:
        span = self.tracer.start("dcaf.model", {"dcaf.runtime": self.runtime.name}, turn)
        seconds, the_turns = self._model_limit(effect)
        poll = self._cancel_poll(saved)
        events = self.runtime.astream(effect.request)
        if seconds is not None:
            events = aiterate_within(events, seconds)
        try:
            while True:
                try:
                    event = await poll.step(anext(events))
                except StopAsyncIteration:
                    break
                if isinstance(event, ModelCompleted):
                    _traced(span, event.response)
                yield event
                if isinstance(event, ModelCompleted):
                    return
        except OutOfTime:
            yield self._out_of_time(span, seconds, the_turns)
            return
        except RunCancelled:
            span.set("dcaf.stop_reason", CANCELLED)
            yield Stopped(CANCELLED)
            return
        except Exception as exc:
            failure = self._model_failure(exc)
            span.fail(failure)
            raise failure from exc
        finally:
            poll.close()
            span.end()
        raise ModelError(
            f"{self.runtime.name}: the stream ended without a final response", runtime=self.runtime.name
        )

    async def _ainstructions(self, context: RunContext) -> str:
        if isinstance(self.system, str):
            return self.system
        return _checked_instructions(await resolve(self.system(context)))

    # -- shared -----------------------------------------------------------------------------------

    def _cancel_poll(self, saved: _Saved) -> CancelPoll:
        conversation_id, since = saved.conversation.id, saved.started
        return CancelPoll(
            lambda: self.repository.acancel_requested(conversation_id, since=since), CANCEL_POLL
        )

    def _model_limit(self, effect: CallModel) -> tuple[float | None, bool]:
        """How long this model call may take, and whether that is what is left of the turn's time."""
        left, own = effect.timeout, self.model_timeout
        if left is None:
            return own, False
        if own is None or left < own:
            return left, True
        return own, False

    def _out_of_time(self, span: Span, seconds: float | None, the_turns: bool) -> Stopped:
        """A model call past its limit: the turn stops if it was the turn's; else the call failed."""
        if the_turns:
            span.set("dcaf.stop_reason", TURN_TIMEOUT)
            return Stopped(TURN_TIMEOUT)
        name = self.runtime.name
        failure = ModelTimeout(
            f"{name}: no answer within the model-call time limit of {seconds:g} s", runtime=name
        )
        span.fail(failure)
        raise failure

    def _renew(self, saved: _Saved, call_id: str) -> None:
        """Extend the lease of a call still running, and save it (so no other worker settles it)."""
        saved.conversation.lease_tool_call(call_id, self.worker, until=self.clock() + self.lease_ttl)
        self.repository.save(saved.conversation, saved.expected)
        saved.expected = saved.conversation.version

    async def _arenew(self, saved: _Saved, call_id: str) -> None:
        saved.conversation.lease_tool_call(call_id, self.worker, until=self.clock() + self.lease_ttl)
        await self.repository.asave(saved.conversation, saved.expected)
        saved.expected = saved.conversation.version

    def _instructions(self, context: RunContext, resolver: Callable[[Any], Any]) -> str:
        if isinstance(self.system, str):
            return self.system
        return _checked_instructions(resolver(self.system(context)))

    def _start_turn(self, request: AgentRequest) -> Span:
        attributes = {
            "dcaf.agent": self.name,
            "dcaf.runtime": self.runtime.name,
            "dcaf.entrance": request.entrance,
        }
        if request.conversation_id:
            attributes["dcaf.conversation_id"] = request.conversation_id
        return self.tracer.start("dcaf.turn", attributes)

    def _tool_span(self, effect: RunTool, turn: Span) -> Span:
        attributes = {"dcaf.tool": effect.tool.name, "dcaf.call_id": effect.context.call_id}
        return self.tracer.start("dcaf.tool", attributes, turn)

    def _scrub(self, exc: BaseException, request: AgentRequest) -> None:
        """Remove the runtime's secrets (its API key) and the request's credentials from the failure's
        text, and from the exceptions it was raised from, before anyone reports or logs it."""
        secrets = [*self.runtime.secret_values(), *secret_values(request.platform_context)]
        if secrets:
            scrub_exception(exc, secrets)

    def _model_failure(self, exc: Exception) -> ModelError:
        secrets = self.runtime.secret_values()
        if secrets:  # before the span records it
            scrub_exception(exc, secrets)
        if isinstance(exc, ModelError):
            return exc
        name = self.runtime.name
        return ModelError(f"{name} failed: {type(exc).__name__}: {exc}", runtime=name)

    def _prepare(
        self,
        request: AgentRequest,
        conversation_id: str,
        stored: Conversation | None,
        span: Span,
        *,
        emits: bool,
        refused: list[DecisionRecord],
    ) -> _Prepared:
        """Everything a request changes before any tool runs. It raises before anything is saved
        (the records of the decisions it refused are in `refused`)."""
        now = self.clock()
        if stored is not None and not _may_use(request, stored):
            raise ConversationNotFound(stored.id)  # another owner's: as if it did not exist
        if stored is None:
            conversation = Conversation.start(conversation_id, at=now, owner=request.owner)
            for role, text in request.history:
                if role == Role.USER.value:
                    conversation.add_user_message(text, at=now)
                else:
                    conversation.add_assistant_message(text, at=now)
        else:
            conversation = stored
        expected = conversation.version if stored is not None else 0
        conversation.entrance = request.entrance
        # Calls whose run ended without a result (their worker died) are settled, never run again.
        interrupted = [c.id.value for c in conversation.settle_abandoned_calls(at=now)] if stored else []
        context = request.platform_context
        conversation.use_platform_context(PlatformContext(context) if context else NO_CONTEXT)
        if request.session is not None:
            conversation.replace_session(dict(request.session))
        approved: list[str] = []
        rejected: list[str] = []
        for decision in request.decisions:
            if self._decide(conversation, decision, request.user, now, span, refused):
                approved.append(decision.call_id)
            else:
                rejected.append(decision.call_id)
        if request.text:
            for call in conversation.pending_tool_calls:
                if call.is_expired(now):
                    conversation.reject_tool_call(
                        call.id.value, EXPIRED, by="system", kind=DeciderKind.SYSTEM, at=now
                    )
                    rejected.append(call.id.value)
            conversation.add_user_message(request.text, at=now)
        elif not request.decisions and not _awaits_model(conversation):
            raise InvalidRequest("messages", "nothing to do: send a message or decide a pending tool call")
        for call_id in approved:  # this worker runs them: the claim's save carries its lease
            conversation.lease_tool_call(call_id, self.worker, until=now + self.lease_ttl)
        turn = Turn(
            conversation,
            self._settings,
            approved_now=approved,
            rejected_now=rejected,
            interrupted_now=interrupted,
            emits=emits,
        )
        return _Prepared(conversation, expected, turn, claim=bool(approved), started=now)

    def _decide(
        self,
        conversation: Conversation,
        decision: ToolDecision,
        user: str,
        now: float,
        turn: Span,
        refused: list[DecisionRecord],
    ) -> bool:
        attributes = {
            "dcaf.call_id": decision.call_id,
            "dcaf.decision": "approve" if decision.approve else "reject",
            "dcaf.decided_by": user,
            "dcaf.edited": decision.edited_arguments is not None,
        }
        span = self.tracer.start("dcaf.decision", attributes, turn)
        try:
            approved = self._apply(conversation, decision, user, now)
            call = conversation.tool_call(decision.call_id)
            span.set("dcaf.tool", call.name)
            span.set("dcaf.waited_seconds", max(0.0, now - call.proposed_at))
            return approved
        except Exception as exc:
            span.fail(exc)  # refused: nothing ran; the request fails with this error
            refused.append(conversation.refusal(decision.call_id, str(exc), by=user, at=now))
            raise
        finally:
            span.end()

    def _apply(self, conversation: Conversation, decision: ToolDecision, user: str, now: float) -> bool:
        call = conversation.tool_call(decision.call_id)
        if not decision.approve:
            conversation.reject_tool_call(call.id.value, decision.reason, by=user, at=now)
            return False
        edited = None
        if decision.edited_arguments is not None:
            if not call.editable:
                raise EditNotAllowed(call.id.value, call.name)
            tool = self._settings.toolbox.get(call.name)
            if tool is None:
                raise UnknownTool(call.name, sorted(self._settings.toolbox))
            edited = ToolInput.of(tool.validate(call.patched(decision.edited_arguments)))
        echoed = None if decision.arguments is None else ToolInput.of(call.unmasked(decision.arguments))
        conversation.approve_tool_call(
            call.id.value,
            by=user,
            tool_name=decision.tool_name,
            tool_input=echoed,
            edited_input=edited,
            policy=self._settings.policy,  # checked again, as the call would run
            at=now,
        )
        return True


def _may_use(request: AgentRequest, conversation: Conversation) -> bool:
    """Ownership: a request with an owner uses only that owner's conversations, unless it sees all."""
    return request.owner is None or request.sees_all or conversation.owner == request.owner


def _awaits_model(conversation: Conversation) -> bool:
    """True when the model owes an answer: after a user message, or after its calls all finished."""
    if not conversation.messages:
        return False
    last = conversation.messages[-1]
    return last.role is Role.USER or bool(last.tool_call_ids)


def _traced(span: Span, response: ModelResponse) -> ModelResponse:
    if span is NO_SPAN:  # nothing records it: skip the attributes
        return response
    span.set("dcaf.input_tokens", response.usage.input_tokens)
    span.set("dcaf.output_tokens", response.usage.output_tokens)
    span.set("dcaf.tool_calls", len(response.tool_calls))
    return response


def _finish_turn(turn: Span, response: AgentResponse) -> None:
    if turn is NO_SPAN:
        return
    turn.set("dcaf.conversation_id", response.conversation_id)
    turn.set("dcaf.stop_reason", response.stop_reason)
    turn.set("dcaf.pending_approvals", len(response.pending_tool_calls))


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _answer(value: Any) -> ApprovalAnswer:
    if isinstance(value, ApprovalAnswer):
        return value
    if isinstance(value, bool):
        return ApprovalAnswer(approved=value, reason="" if value else "declined by the approver")
    raise TypeError(f"an approver must return ApprovalAnswer or bool, not {type(value).__name__}")


def _checked_instructions(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"dynamic instructions must return a string, not {type(value).__name__}")
    return value


def _failed(exc: Exception, request: AgentRequest) -> RunFailed:
    return RunFailed(str(exc), type(exc).__name__, request.conversation_id or "", exception=exc)


def _summary_text(answer: ModelResponse | Stopped) -> str | None:
    """The summary the model wrote, or None when its call was stopped (cancel, time limit)."""
    return None if isinstance(answer, Stopped) else answer.text
