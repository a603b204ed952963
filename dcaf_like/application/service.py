"""AgentService: the agent use case. Loads the conversation, applies the request's decisions, drives a
:class:`~dcaf_like.application.turn.Turn`, and saves what happened."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dcaf_like.application._concurrency import resolve, resolve_sync
from dcaf_like.application.dto import AgentRequest, AgentResponse, ToolDecision
from dcaf_like.application.errors import (
    ApplicationError,
    ConversationNotFound,
    InvalidRequest,
    ModelError,
    UnknownTool,
)
from dcaf_like.application.events import Done, RunFailed, StreamEvent
from dcaf_like.application.model import ModelCompleted, ModelRequest, ModelResponse
from dcaf_like.application.ports import (
    AgentRuntime,
    ApprovalAnswer,
    ApprovalCallback,
    ConversationRepository,
    ExecutableTool,
)
from dcaf_like.application.tracing import NO_SPAN, NoTracer, Span, Tracer
from dcaf_like.application.turn import (
    AskApprover,
    CallModel,
    Effect,
    Emit,
    ResolveInstructions,
    RunContext,
    RunTool,
    ToolOutcome,
    Turn,
    TurnSettings,
)
from dcaf_like.domain import (
    NO_CONTEXT,
    ApprovalPolicy,
    Conversation,
    Decider,
    DecisionRecord,
    DomainError,
    EditNotAllowed,
    PlatformContext,
    Role,
    ToolInput,
)

InstructionProvider = Callable[[RunContext], str | Awaitable[str]]
"""Dynamic instructions: called at the start of each turn with the run's context, sync or async."""

EXPIRED = "the approval window closed before a decision"


@dataclass(slots=True)
class _Prepared:
    conversation: Conversation
    expected_version: int
    turn: Turn
    claim: bool


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
    ) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
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
            try:
                response = self._settle(prepared.turn.run(), turn)
            finally:
                if prepared.conversation.version != expected:
                    self.repository.save(prepared.conversation, expected)
            prepared.conversation.collect_events()
            _finish_turn(turn, response)
            return response
        except Exception as exc:
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
            try:
                response = yield from self._drive(prepared.turn.run(), turn)
            finally:
                if prepared.conversation.version != expected:
                    self.repository.save(prepared.conversation, expected)
            prepared.conversation.collect_events()
            _finish_turn(turn, response)
            yield Done(response)
        except Exception as exc:
            turn.fail(exc)
            raise
        finally:
            turn.end()

    def _begin(self, request: AgentRequest, turn: Span, *, emits: bool) -> tuple[_Prepared, int]:
        """Load the conversation, apply the request and claim its approvals (saved before any tool
        runs, so a call is never run twice); returns the version the turn's save expects."""
        stored = self.repository.get(request.conversation_id) if request.conversation_id else None
        refused: list[DecisionRecord] = []
        try:
            prepared = self._prepare(request, stored, turn, emits=emits, refused=refused)
        except Exception:
            if refused:
                self.repository.record_decisions(refused)  # the audit trail keeps refusals too
            raise
        if not prepared.claim:
            return prepared, prepared.expected_version
        self.repository.save(prepared.conversation, prepared.expected_version)
        return prepared, prepared.conversation.version

    def _settle(self, machine: Generator[Effect, Any, AgentResponse], turn: Span) -> AgentResponse:
        """Perform a turn's effects until it ends; the turn emits no events (nobody streams)."""
        value: Any = None
        while True:
            try:
                effect = machine.send(value)
            except StopIteration as stop:
                response: AgentResponse = stop.value
                return response
            if isinstance(effect, CallModel):
                value = self._invoke_model(effect.request, turn)
            else:
                value = self._perform(effect, turn)

    def _drive(
        self, machine: Generator[Effect, Any, AgentResponse], turn: Span
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
                value = yield from self._stream_model(effect.request, turn)
            else:
                value = self._perform(effect, turn)

    def _perform(self, effect: Effect, turn: Span) -> Any:
        """Run a tool, resolve instructions, or ask the approver: what the sync drivers share."""
        if isinstance(effect, RunTool):
            return _run_tool(effect, self._tool_span(effect, turn))
        if isinstance(effect, ResolveInstructions):
            return self._instructions(effect.context, resolve_sync)
        assert isinstance(effect, AskApprover), effect  # an unstreamed turn emits nothing
        assert self.approver is not None
        return _answer(resolve_sync(self.approver(effect.pending)))

    def _invoke_model(self, request: ModelRequest, turn: Span) -> ModelResponse:
        span = self.tracer.start("dcaf.model", {"dcaf.runtime": self.runtime.name}, turn)
        try:
            return _traced(span, self.runtime.invoke(request))
        except Exception as exc:
            failure = self._model_failure(exc)
            span.fail(failure)
            raise failure from exc
        finally:
            span.end()

    def _stream_model(self, request: ModelRequest, turn: Span) -> Generator[StreamEvent, None, ModelResponse]:
        span = self.tracer.start("dcaf.model", {"dcaf.runtime": self.runtime.name}, turn)
        try:
            for event in self.runtime.stream(request):
                if isinstance(event, ModelCompleted):
                    return _traced(span, event.response)
                yield event
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
            try:
                response = await self._asettle(prepared.turn.run(), turn)
            finally:
                if conversation.version != expected:
                    await self.repository.asave(conversation, expected)
            conversation.collect_events()
            _finish_turn(turn, response)
            return response
        except Exception as exc:
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
            turn.fail(exc)
            raise
        finally:
            turn.end()

    async def _aturn(self, request: AgentRequest, turn: Span) -> AsyncIterator[StreamEvent]:
        prepared, expected = await self._abegin(request, turn, emits=True)
        conversation = prepared.conversation
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
                    async for event in self._astream_model(effect.request, turn):
                        if isinstance(event, ModelCompleted):
                            value = event.response
                        else:
                            yield event
                else:
                    value = await self._aperform(effect, turn)
        finally:
            if conversation.version != expected:
                await self.repository.asave(conversation, expected)
        conversation.collect_events()
        yield Done(response)

    async def _abegin(self, request: AgentRequest, turn: Span, *, emits: bool) -> tuple[_Prepared, int]:
        stored = await self.repository.aget(request.conversation_id) if request.conversation_id else None
        refused: list[DecisionRecord] = []
        try:
            prepared = self._prepare(request, stored, turn, emits=emits, refused=refused)
        except Exception:
            if refused:
                await self.repository.arecord_decisions(refused)  # the audit trail keeps refusals too
            raise
        if not prepared.claim:
            return prepared, prepared.expected_version
        await self.repository.asave(prepared.conversation, prepared.expected_version)
        return prepared, prepared.conversation.version

    async def _asettle(self, machine: Generator[Effect, Any, AgentResponse], turn: Span) -> AgentResponse:
        """The async twin of :meth:`_settle`."""
        value: Any = None
        while True:
            try:
                effect = machine.send(value)
            except StopIteration as stop:
                response: AgentResponse = stop.value
                return response
            if isinstance(effect, CallModel):
                value = await self._ainvoke_model(effect.request, turn)
            else:
                value = await self._aperform(effect, turn)

    async def _aperform(self, effect: Effect, turn: Span) -> Any:
        if isinstance(effect, RunTool):
            return await _arun_tool(effect, self._tool_span(effect, turn))
        if isinstance(effect, ResolveInstructions):
            return await self._ainstructions(effect.context)
        assert isinstance(effect, AskApprover), effect  # an unstreamed turn emits nothing
        assert self.approver is not None
        return _answer(await resolve(self.approver(effect.pending)))

    async def _ainvoke_model(self, request: ModelRequest, turn: Span) -> ModelResponse:
        span = self.tracer.start("dcaf.model", {"dcaf.runtime": self.runtime.name}, turn)
        try:
            return _traced(span, await self.runtime.ainvoke(request))
        except Exception as exc:
            failure = self._model_failure(exc)
            span.fail(failure)
            raise failure from exc
        finally:
            span.end()

    async def _astream_model(self, request: ModelRequest, turn: Span) -> AsyncIterator[Any]:
        span = self.tracer.start("dcaf.model", {"dcaf.runtime": self.runtime.name}, turn)
        try:
            async for event in self.runtime.astream(request):
                if isinstance(event, ModelCompleted):
                    _traced(span, event.response)
                yield event
                if isinstance(event, ModelCompleted):
                    return
        except Exception as exc:
            failure = self._model_failure(exc)
            span.fail(failure)
            raise failure from exc
        finally:
            span.end()
        raise ModelError(
            f"{self.runtime.name}: the stream ended without a final response", runtime=self.runtime.name
        )

    async def _ainstructions(self, context: RunContext) -> str:
        if isinstance(self.system, str):
            return self.system
        return _checked_instructions(await resolve(self.system(context)))

    # -- shared -----------------------------------------------------------------------------------

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

    def _model_failure(self, exc: Exception) -> ModelError:
        if isinstance(exc, ModelError):
            return exc
        name = self.runtime.name
        return ModelError(f"{name} failed: {type(exc).__name__}: {exc}", runtime=name)

    def _prepare(
        self,
        request: AgentRequest,
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
            conversation = Conversation.start(request.conversation_id, at=now, owner=request.owner)
            for role, text in request.history:
                if role == Role.USER.value:
                    conversation.add_user_message(text, at=now)
                else:
                    conversation.add_assistant_message(text, at=now)
        else:
            conversation = stored
        expected = conversation.version if stored is not None else 0
        conversation.entrance = request.entrance
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
                        call.id.value, EXPIRED, by="system", at=now, decider=Decider.SYSTEM
                    )
                    rejected.append(call.id.value)
            conversation.add_user_message(request.text, at=now)
        elif not request.decisions and not _awaits_model(conversation):
            raise InvalidRequest("messages", "nothing to do: send a message or decide a pending tool call")
        turn = Turn(conversation, self._settings, approved_now=approved, rejected_now=rejected, emits=emits)
        return _Prepared(conversation, expected, turn, claim=bool(approved))

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
            edited = ToolInput.of(tool.validate(call.unmasked(decision.edited_arguments)))
        echoed = None if decision.arguments is None else ToolInput.of(call.unmasked(decision.arguments))
        conversation.approve_tool_call(
            call.id.value,
            by=user,
            tool_name=decision.tool_name,
            tool_input=echoed,
            edited_input=edited,
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


def _run_tool(effect: RunTool, span: Span) -> ToolOutcome:
    tool = effect.tool
    try:
        if tool.is_async:
            return ToolOutcome(output=resolve_sync(tool.ainvoke(effect.arguments, effect.context)))
        return ToolOutcome(output=tool.invoke(effect.arguments, effect.context))
    except Exception as exc:
        span.fail(exc)
        return ToolOutcome(error=_describe(exc))
    finally:
        span.end()


async def _arun_tool(effect: RunTool, span: Span) -> ToolOutcome:
    try:
        return ToolOutcome(output=await effect.tool.ainvoke(effect.arguments, effect.context))
    except Exception as exc:
        span.fail(exc)
        return ToolOutcome(error=_describe(exc))
    finally:
        span.end()


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
