"""One agent turn as a plain generator: it decides, and yields an effect whenever it needs the world.

Keeping the loop free of I/O gives one implementation of the rules, whichever ports perform its
effects: the driver in :mod:`dcaf_like.application.service` performs them, blocking or async, and
sends the results back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dcaf_like.application.context import (
    Block,
    ContextPolicy,
    ContextView,
    TokenCounter,
    block_cost,
    estimate_tokens,
)
from dcaf_like.application.dto import AgentResponse, QuestionView, ToolCallView, ToolDecision
from dcaf_like.application.effects import (
    AWAITING_APPROVAL,
    AWAITING_INPUT,
    CANCELLED,
    FALLBACK,
    HOOK_FAILED,
    TURN_TIMEOUT,
    AskApprover,
    CallHooks,
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
)
from dcaf_like.application.errors import HookFailed, InvalidToolArguments, UnknownTool
from dcaf_like.application.events import (
    ApprovalRequired,
    QuestionAsked,
    RunStarted,
    ToolCallProposed,
    ToolFinished,
    ToolRejected,
    ToolStarted,
)
from dcaf_like.application.hooks import (
    NO_HOOKS,
    HookContext,
    Hooks,
    Purpose,
    Refused,
    Rewritten,
    ToolCallInfo,
    hook_context,
)
from dcaf_like.application.messages import (
    NO_SETTINGS,
    NO_USAGE,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ModelToolCall,
    ToolSpec,
    Usage,
)
from dcaf_like.application.ports import (
    ApprovalAnswer,
    ExecutableTool,
    PendingApproval,
    ToolContext,
    ToolOutput,
)
from dcaf_like.application.questions import Answered, UserInputRequired
from dcaf_like.application.transcript import transcribe
from dcaf_like.domain import (
    NOBODY,
    ApprovalPolicy,
    Conversation,
    DeciderKind,
    EditNotAllowed,
    InvalidQuestion,
    InvalidToolInput,
    NotAnApprover,
    PolicyDenied,
    Question,
    Role,
    Session,
    ToolCall,
    ToolCallStatus,
    ToolInput,
    Trusted,
    Verdict,
)


@dataclass(slots=True)  # never changed after it is made; not frozen, whose __init__ is slower
class TurnSettings:
    toolbox: Mapping[str, ExecutableTool]
    policy: ApprovalPolicy
    tool_specs: tuple[ToolSpec, ...]
    max_iterations: int = 10
    approval_ttl: float | None = None
    #: Seconds an open question takes an answer (None: no limit); the service resolves the agent's.
    question_ttl: float | None = None
    has_approver: bool = False
    runtime_name: str = ""
    agent_name: str = ""
    clock: Callable[[], float] = time.time
    #: What the turn's time limit is measured by (the agent clock's monotonic reading).
    monotonic: Callable[[], float] = time.monotonic
    #: Instructions that are the same every turn; None when they are resolved per turn.
    system: str | None = None
    #: Who runs this turn's tools (a lease names it), and for how long a lease holds unless renewed.
    worker: str = ""
    lease_ttl: float = 60.0
    #: Seconds a turn may take, model calls and tools together (None: no limit).
    turn_timeout: float | None = None
    #: What the model reads of the conversation (docs/runtimes.md, "Context windows"), the runtime's
    #: window (None: unknown, the whole transcript is sent) and its token counter.
    context: ContextPolicy | None = None
    context_window: int | None = None
    count_tokens: TokenCounter = estimate_tokens
    count_request_tokens: Callable[[ModelRequest], int | None] | None = None
    #: The kinds of parts the runtime reads (``AgentRuntime.accepts``): a tool's images of another
    #: kind are named to the model in a note, not shown.
    accepts: frozenset[str] = frozenset()
    #: The agent's hooks, by the point they are called at (docs/operations.md, "Hooks").
    hooks: Hooks = NO_HOOKS
    #: The agent's model settings, sent with each of its model requests.
    model_settings: ModelSettings = NO_SETTINGS


POLICY = "policy"


@dataclass
class Turn:
    """The part of a turn after the request's decisions were applied and its message added.

    `emits` is False when nobody reads the stream (``execute``, ``aexecute``): the turn then builds no
    stream events, only the response. The rules, and the order in which things happen, are the same."""

    conversation: Conversation
    settings: TurnSettings
    approved_now: list[str] = field(default_factory=list)
    rejected_now: list[str] = field(default_factory=list)
    #: Calls found abandoned when the conversation was loaded, and settled as interrupted.
    interrupted_now: list[str] = field(default_factory=list)
    #: Who the server authenticated, and the agent's dependencies: for instructions, tools, policy.
    trusted: Trusted[Any] = NOBODY
    #: Calls whose question the request declined: they failed, not run.
    declined_now: list[str] = field(default_factory=list)
    emits: bool = True
    _finished: list[str] = field(init=False, default_factory=list)
    _texts: list[str] = field(init=False, default_factory=list)
    _usage: Usage = field(init=False, default=NO_USAGE)
    _timings: dict[str, float] = field(init=False, default_factory=lambda: {"model": 0.0, "tools": 0.0})
    # The transcript of conversation.messages[:_stable_messages], which no longer changes.
    _stable: list[ModelMessage] = field(init=False, default_factory=list)
    _stable_messages: int = field(init=False, default=0)
    # Under a context window: the block of each message (by its position in the conversation) whose
    # calls have all settled, with its tokens; it reads the same for the rest of the turn.
    _settled_blocks: dict[int, tuple[Block, int]] = field(init=False, default_factory=dict)
    # settings.monotonic() when the turn's time limit runs out (None: no limit).
    _deadline: float | None = field(init=False, default=None)
    # Model calls and tool runs so far: every step after the first checks for a cancel.
    _steps: int = field(init=False, default=0)
    # The runtime that answered the last model call (None: no model call yet).
    _answered_by: str | None = field(init=False, default=None)
    # What the hooks are told of the turn (made when first needed), and the failure of one that raised.
    _hook_context: HookContext | None = field(init=False, default=None)
    _hook_failed: HookFailed | None = field(init=False, default=None)

    def run(self) -> Generator[Effect, Any, AgentResponse]:
        started = time.perf_counter()
        if self.settings.turn_timeout is not None:
            self._deadline = self.settings.monotonic() + self.settings.turn_timeout
        if self.emits:
            yield Emit(RunStarted(self.conversation.id))
        for call_id in (*self.interrupted_now, *self.declined_now):
            self._finished.append(call_id)
            if self.emits:
                yield Emit(ToolFinished(self._view(call_id)))
        for call_id in self.rejected_now:
            if self.emits:
                yield Emit(ToolRejected(self._view(call_id)))
        stop_reason = (yield from self._execute(self.approved_now)) if self.approved_now else None
        if stop_reason is None:
            stop_reason = self._waiting()
            if stop_reason is None:
                stop_reason = yield from self._loop()
        self._timings["total"] = time.perf_counter() - started
        return self._response(stop_reason)

    def _loop(self) -> Generator[Effect, Any, str]:
        conversation = self.conversation
        system = self.settings.system
        if system is None:
            context = RunContext(
                conversation.id,
                conversation.platform_context,
                dict(conversation.session),
                self.settings.agent_name,
                self.trusted.identity,
                self.trusted.deps,
            )
            system = yield ResolveInstructions(context)
        policy = self.settings.context
        fits = policy is not None and (policy.window or self.settings.context_window) is not None
        for _ in range(self.settings.max_iterations):
            left = self._time_left()
            if left is not None and left <= 0:
                return TURN_TIMEOUT
            if self._steps and (yield CheckCancel()):
                return CANCELLED
            self._steps += 1
            started = time.perf_counter()
            if fits:
                request = yield from self._fitted(system)
            else:
                request = self._model_request(system)
            if self.settings.hooks.before_model:  # no generator at all for an agent without hooks
                request = (yield from self._hooks("before_model", request)) or request
            response: ModelResponse | Stopped = yield CallModel(request, left)
            self._timings["model"] += time.perf_counter() - started
            if isinstance(response, Stopped):
                return response.reason
            if self.settings.hooks.after_model:
                response = (yield from self._hooks("after_model", response)) or response
            self._usage = self._usage + response.usage
            self._answered_by = response.runtime or self.settings.runtime_name
            conversation.add_assistant_message(
                response.text, at=self.settings.clock(), runtime=self._answered_by
            )
            if response.text:
                self._texts.append(response.text)
            if not response.tool_calls:
                return response.stop_reason
            runnable = []
            for proposed in response.tool_calls:
                call = self._propose(proposed)
                if self.emits:
                    yield Emit(ToolCallProposed(ToolCallView.of(call)))
                if call.status is ToolCallStatus.APPROVED:
                    runnable.append(call.id.value)
                elif call.status is ToolCallStatus.REJECTED:
                    self.rejected_now.append(call.id.value)
                    if self.emits:
                        yield Emit(ToolRejected(ToolCallView.of(call)))
                elif call.status is ToolCallStatus.FAILED:
                    self._finished.append(call.id.value)
                    if self.emits:
                        yield Emit(ToolFinished(ToolCallView.of(call)))
            stopped = yield from self._execute(runnable)
            if stopped is not None:
                return stopped
            if self.settings.has_approver:
                stopped = yield from self._ask_approver()
                if stopped is not None:
                    return stopped
            waiting = self._waiting()
            if waiting is not None:
                pending = conversation.pending_tool_calls
                if pending and self.emits:
                    yield Emit(ApprovalRequired(tuple(ToolCallView.of(c) for c in pending)))
                return waiting
        return "max_iterations"

    def _waiting(self) -> str | None:
        """Why the run must wait for the user (a call waits for approval, a question for an answer),
        or None: it can go on."""
        conversation = self.conversation
        if conversation.pending_tool_calls:
            return AWAITING_APPROVAL
        if conversation.questions and conversation.open_questions:
            return AWAITING_INPUT
        return None

    def _propose(self, proposed: ModelToolCall) -> ToolCall:
        """Record the model's call and settle what can be settled now: refuse it, fail it, or allow it."""
        conversation, settings = self.conversation, self.settings
        now = settings.clock()
        tool = settings.toolbox.get(proposed.name)
        problem = proposed.invalid_arguments
        arguments: dict[str, Any] = dict(proposed.arguments)
        if tool is None:
            known = ", ".join(sorted(settings.toolbox)) or "none"
            problem = f"unknown tool {proposed.name!r}; the tools are: {known}"
        elif problem is None:
            try:
                arguments = tool.validate(proposed.arguments)
            except InvalidToolArguments as exc:
                problem = exc.detail
        try:
            tool_input = ToolInput.of(arguments)
        except InvalidToolInput as exc:
            tool_input, problem = ToolInput.of({}), str(exc)
        call = conversation.request_tool_call(
            proposed.name,
            tool_input,
            requires_approval=tool.requires_approval if tool else True,
            editable=tool.editable if tool else False,
            description=tool.description if tool else "",
            secret_arguments=tool.secret_arguments if tool else frozenset(),
            approval_ttl=settings.approval_ttl,
            requested_by=None if self.trusted.identity is None else self.trusted.identity.name,
            at=now,
        )
        if problem is not None or tool is None:
            conversation.record_tool_failure(call.id.value, f"invalid call: {problem}", at=now)
            return call
        decision = settings.policy.decide(
            tool.name,
            arguments,
            tool_requires_approval=tool.requires_approval,
            context=conversation.platform_context,
            trusted=self.trusted,
        )
        if decision.verdict is Verdict.REQUIRE_APPROVAL:
            call.approval_reason = decision.reason
            call.approvers = decision.approvers
        if decision.verdict is Verdict.ALLOW:
            conversation.approve_tool_call(call.id.value, by=POLICY, kind=DeciderKind.POLICY, at=now)
        elif decision.verdict is Verdict.DENY:
            conversation.reject_tool_call(
                call.id.value,
                f"denied by policy: {decision.reason}",
                by=POLICY,
                kind=DeciderKind.POLICY,
                at=now,
            )
        return call

    def _ask_approver(self) -> Generator[Effect, Any, str | None]:
        settings = self.settings
        for call in self.conversation.pending_tool_calls:
            if not call.approvers.is_default:  # it needs people its rule names: it waits for them
                continue
            call_id = call.id.value
            answer: ApprovalAnswer = yield AskApprover(
                PendingApproval(
                    call_id,
                    call.name,
                    call.description,
                    call.shown(call.proposed_input),
                    call.approval_reason or "",
                    call.editable,
                )
            )
            decision = ToolDecision(
                call_id, answer.approved, edited_arguments=answer.edited_arguments, reason=answer.reason
            )
            now = settings.clock()
            try:
                status = apply_decision(
                    self.conversation,
                    settings,
                    decision,
                    by="approver",
                    kind=DeciderKind.APPROVER,
                    at=now,
                    trusted=self.trusted,
                )
                approved = status is ToolCallStatus.APPROVED
            except PolicyDenied as denied:  # an edit the policy denies: the call is refused
                why = f"denied by policy: {denied.reason}"
                self.conversation.reject_tool_call(call_id, why, by=POLICY, kind=DeciderKind.POLICY, at=now)
                approved = False
            except NotAnApprover:  # an edit a team rule covers: the call waits for the people it names
                continue
            if not approved:
                self.rejected_now.append(call_id)
                if self.emits:
                    yield Emit(ToolRejected(ToolCallView.of(call)))
                continue
            stopped = yield from self._execute([call_id])
            if stopped is not None:
                return stopped
        return None

    def _execute(self, call_ids: list[str]) -> Generator[Effect, Any, str | None]:
        """Run approved calls one after the other. Returns why the turn must stop (TURN_TIMEOUT, its
        time ran out; CANCELLED, it was asked to stop), calls it did not reach failing, not run; else
        None."""
        conversation, settings = self.conversation, self.settings
        stopped: str | None = None
        for call_id in call_ids:
            call = conversation.tool_call(call_id)
            tool = settings.toolbox.get(call.name)
            timeout, limit, the_turns = self._tool_limit(tool)
            if stopped is None and the_turns and timeout is not None and timeout <= 0:
                stopped = TURN_TIMEOUT
            if stopped is None and tool is not None and self._steps and (yield CheckCancel()):
                stopped = CANCELLED
            if tool is None:
                conversation.record_tool_failure(call_id, f"tool {call.name!r} is no longer available")
            elif stopped is not None:
                conversation.record_tool_failure(call_id, f"not run: {self._why_not_run(stopped)}")
            elif settings.hooks.before_tool and (refusal := (yield from self._before_tool(call))) is not None:
                conversation.record_tool_failure(call_id, f"not run: {refusal}")
                stopped = HOOK_FAILED if self._hook_failed is not None else None
            else:
                self._steps += 1
                if self.emits:
                    yield Emit(ToolStarted(call_id, call.name))
                session = Session(conversation.session)
                started = time.perf_counter()
                conversation.lease_tool_call(
                    call_id, settings.worker, until=settings.clock() + settings.lease_ttl
                )
                context = ToolContext(
                    conversation.id,
                    call_id,
                    conversation.platform_context,
                    session,
                    self.trusted.identity,
                    self.trusted.deps,
                )
                if conversation.questions:
                    context = replace(context, answers=self._answers(call_id))
                outcome: ToolOutcome = yield RunTool(
                    tool, call.effective_input.as_dict(), context, timeout, limit
                )
                self._timings["tools"] += time.perf_counter() - started
                now = settings.clock()
                asked = None
                if outcome.question is not None:
                    asked = self._ask(call_id, outcome.question, now)
                elif isinstance(outcome.output, ToolOutput):
                    output = outcome.output
                    conversation.record_tool_result(
                        call_id, output.text, attachments=output.attachments, at=now
                    )
                elif outcome.error is None:
                    conversation.record_tool_result(call_id, outcome.output or "", at=now)
                else:
                    conversation.record_tool_failure(call_id, outcome.error, at=now)
                if outcome.timed_out and the_turns:
                    stopped = TURN_TIMEOUT
                if session.changed:
                    conversation.replace_session(session.to_dict())
                if settings.hooks.after_tool and not (yield from self._after_tool(call)):
                    stopped = HOOK_FAILED
                if asked is not None:  # the call waits for the user's answer: not finished
                    if self.emits:
                        yield Emit(QuestionAsked(QuestionView.of(asked, call.name)))
                    continue
            self._finished.append(call_id)
            if self.emits:
                yield Emit(ToolFinished(ToolCallView.of(call)))
        if self._hook_failed is not None:  # every call it stopped is settled: the turn fails closed
            raise self._hook_failed
        return stopped

    # -- hooks: the agent's own code around model calls and tools ----------------------------------

    def _hooks(self, point: str, *arguments: Any, purpose: Purpose = "turn") -> Generator[Effect, Any, Any]:
        """Call the hooks at a model call: the request or answer they rewrote, or None. One that raises
        fails the turn (nothing was proposed yet)."""
        if not getattr(self.settings.hooks, point):
            return None
        context = self._hooked()
        if purpose != context.purpose:
            context = replace(context, purpose=purpose)
        answer = yield CallHooks(point, (context, *arguments))
        if isinstance(answer, HookFailed):
            raise answer
        return answer.value if isinstance(answer, Rewritten) else None

    def _before_tool(self, call: ToolCall) -> Generator[Effect, Any, str | None]:
        """Why an approved call must not run: a hook refused it (hooks come after the approval gate: they
        can stop a call, never let one run), or one failed. None: it runs."""
        if not self.settings.hooks.before_tool:
            return None
        answer = yield CallHooks("before_tool", (self._hooked(), ToolCallInfo.of(call)))
        if isinstance(answer, Refused):
            return f"refused by the hook {answer.hook!r}: {answer.reason}"
        if isinstance(answer, HookFailed):
            self._hook_failed = answer
            return f"the hook {answer.hook!r} failed before it ran"
        return None

    def _after_tool(self, call: ToolCall) -> Generator[Effect, Any, bool]:
        """Tell the hooks a call ran; False if one failed (the calls after it are then not run)."""
        if not self.settings.hooks.after_tool:
            return True
        failed = yield CallHooks("after_tool", (self._hooked(), ToolCallInfo.of(call)))
        if failed is not None:
            self._hook_failed = failed
        return failed is None

    def _hooked(self) -> HookContext:
        if self._hook_context is None:
            conversation = self.conversation
            self._hook_context = hook_context(
                self.settings.agent_name, conversation.id, conversation.platform_context.public()
            )
        return self._hook_context

    def _answers(self, call_id: str) -> tuple[Answered, ...]:
        return tuple(
            Answered(q.kind.value, q.prompt, tuple(q.options), value)
            for q in self.conversation.answered_questions(call_id)
            if (value := q.value) is not None
        )

    def _ask(self, call_id: str, asked: UserInputRequired, now: float) -> Question | None:
        """Open the question a tool asked, the call waiting for it; or fail the call (None) for a
        question that cannot be asked, or one it already had answered (a tool that ignores answers
        would ask forever)."""
        conversation = self.conversation
        again = [
            q
            for q in conversation.answered_questions(call_id)
            if q.asks(asked.kind, asked.question, asked.options)
        ]
        if again:
            problem = f"asked again a question the user already answered: {asked.question!r}"
            conversation.record_tool_failure(call_id, problem, at=now)
            return None
        try:
            return conversation.ask_question(
                call_id,
                asked.kind,
                asked.question,
                asked.options,
                max_length=asked.max_length,
                ttl=self.settings.question_ttl,
                at=now,
            )
        except InvalidQuestion as exc:
            conversation.record_tool_failure(call_id, f"asked a question that cannot be asked: {exc}", at=now)
            return None

    def _time_left(self) -> float | None:
        return None if self._deadline is None else self._deadline - self.settings.monotonic()

    def _why_not_run(self, stopped: str) -> str:
        if stopped == CANCELLED:
            return "the run was cancelled before it"
        if stopped == HOOK_FAILED and self._hook_failed is not None:
            return f"the hook {self._hook_failed.hook!r} failed before it ran"
        return f"{self._turn_limit()} ran out before it"

    def _turn_limit(self) -> str:
        return f"the turn's time limit of {self.settings.turn_timeout:g} s"

    def _tool_limit(self, tool: ExecutableTool | None) -> tuple[float | None, str, bool]:
        """How long a tool may run, whose limit that is (named in the error when it runs out), and
        whether it is what is left of the turn's (its own otherwise)."""
        own: float | None = getattr(tool, "timeout", None)  # optional: @tool(timeout=...)
        left = self._time_left()
        if left is not None and (own is None or left < own):
            return left, self._turn_limit(), True
        if own is not None:
            return own, f"the tool's time limit of {own:g} s", False
        return None, "", False

    def _model_request(self, system: str) -> ModelRequest:
        return ModelRequest(
            system=system,
            messages=self._transcript(),
            tools=self.settings.tool_specs,
            conversation_id=self.conversation.id,
            settings=self.settings.model_settings,
        )

    def _fitted(self, system: str) -> Generator[Effect, Any, ModelRequest]:
        """The request fitted to the context window by the policy (after the summary it asks for);
        the whole transcript when no window is known."""
        settings, conversation, policy = self.settings, self.conversation, self.settings.context
        window = None if policy is None else policy.window or settings.context_window
        if policy is None or window is None:
            return self._model_request(system)
        blocks, costs = self._blocks()
        view = ContextView(
            system,
            settings.tool_specs,
            blocks,
            conversation.summary,
            window,
            settings.count_tokens,
            settings.count_request_tokens,
            conversation.cut,
            costs,
        )
        fitted = policy.fit(view)
        if fitted.summarize is not None:
            text = yield from self._summary(fitted.summarize)
            if text is not None:  # None: the summary's call was stopped; the oldest go unsummarized
                conversation.summarize(text, through=fitted.through)
                fitted = policy.fit(replace(view, summary=conversation.summary))
        if conversation.cut < fitted.cut < conversation.message_count:  # later calls start there (ADR 25)
            conversation.move_cut(fitted.cut)
        return ModelRequest(
            fitted.system, fitted.messages, settings.tool_specs, conversation.id, settings.model_settings
        )

    def _summary(self, request: ModelRequest) -> Generator[Effect, Any, str | None]:
        """The summary the runtime writes, or None when its call was stopped. It sends the
        conversation's content to the model, so the model hooks see it as any model call, told by
        their context that it is the summary's; and its tokens are the turn's, counted in its usage."""
        hooks = self.settings.hooks
        if hooks.before_model:
            request = (yield from self._hooks("before_model", request, purpose="summary")) or request
        response: ModelResponse | None = yield Summarize(request)
        if response is None:
            return None
        self._usage = self._usage + response.usage
        if hooks.after_model:
            response = (yield from self._hooks("after_model", response, purpose="summary")) or response
        return response.text

    def _blocks(self) -> tuple[list[Block], list[int]]:
        """The conversation's blocks and their tokens, reusing those earlier model calls of this turn
        made: a block whose calls have all settled (and which is not the last one) reads the same from
        then on, and costs the same."""
        conversation, settled_blocks = self.conversation, self._settled_blocks
        accepts, count = self.settings.accepts, self.settings.count_tokens
        last = conversation.message_count - 1
        blocks, costs = [], []
        for index, message in enumerate(conversation.messages, conversation.message_offset):
            known = settled_blocks.get(index)
            if known is None:
                messages: list[ModelMessage] = []
                settled = transcribe(conversation, message, messages, accepts)
                block = Block(index, tuple(messages), message.role is Role.USER, pinned=not settled)
                known = (block, block_cost(block, count))
                if settled and index != last:
                    settled_blocks[index] = known
            blocks.append(known[0])
            costs.append(known[1])
        return blocks, costs

    def _transcript(self) -> tuple[ModelMessage, ...]:
        """The transcript, reusing what earlier model calls of this turn already transcribed: a message
        whose calls have all settled (and which is not the last one) reads the same from then on."""
        conversation, stable, accepts = self.conversation, self._stable, self.settings.accepts
        messages = conversation.messages
        tail: list[ModelMessage] = []
        for index in range(self._stable_messages, len(messages)):
            if tail or index == len(messages) - 1:
                transcribe(conversation, messages[index], tail, accepts)
            elif transcribe(conversation, messages[index], tail, accepts):
                stable.extend(tail)
                tail.clear()
                self._stable_messages = index + 1
        return (*stable, *tail)

    def _view(self, call_id: str) -> ToolCallView:
        return ToolCallView.of(self.conversation.tool_call(call_id))

    def fall_back(self, text: str) -> AgentResponse:
        """End the turn with `text` as the assistant's answer (an ``on_error`` hook's
        :class:`~dcaf_like.application.hooks.FallbackAnswer` after the model failed): added to the
        conversation like any answer, the response's ``stop_reason`` ``"fallback"``."""
        self.conversation.add_assistant_message(text, at=self.settings.clock())
        self._texts.append(text)
        return self._response(FALLBACK)

    def _response(self, stop_reason: str) -> AgentResponse:
        conversation = self.conversation
        return AgentResponse(
            conversation_id=conversation.id,
            text="\n\n".join(self._texts),
            pending_tool_calls=tuple(ToolCallView.of(c) for c in conversation.pending_tool_calls),
            executed_tool_calls=tuple(self._view(i) for i in self._finished),
            rejected_tool_calls=tuple(self._view(i) for i in self.rejected_now),
            session=dict(conversation.session),
            stop_reason=stop_reason,
            usage=self._usage,
            runtime=self.settings.runtime_name,
            answered_by=self._answered_by,
            timings=self._timings,  # the turn is over: the response takes its dict
            questions=tuple(self._questions()),
        )

    def _questions(self) -> list[QuestionView]:
        conversation = self.conversation
        if not conversation.questions:
            return []
        return [
            QuestionView.of(q, conversation.tool_call(q.call_id).name) for q in conversation.open_questions
        ]


def apply_decision(
    conversation: Conversation,
    settings: TurnSettings,
    decision: ToolDecision,
    *,
    by: str,
    kind: DeciderKind = DeciderKind.HUMAN,
    at: float,
    trusted: Trusted[Any] = NOBODY,
) -> ToolCallStatus:
    """Apply a decision about a pending call, whoever made it (a request's, the approver's): the call's
    status after it, APPROVED, REJECTED, or PENDING (an approval counted, the call needing more). It
    raises, changing nothing, on a decision it refuses: an edit of a call that is not editable, edited
    arguments the tool's schema refuses, or any refusal of :meth:`Conversation.approve_tool_call` (the
    policy is asked again about the call as it would run; its rule says who counts)."""
    call = conversation.tool_call(decision.call_id)
    call_id = call.id.value
    if not decision.approve:
        conversation.reject_tool_call(
            call_id, decision.reason, by=by, kind=kind, policy=settings.policy, trusted=trusted, at=at
        )
        return call.status
    edited = None
    if decision.edited_arguments is not None:
        if not call.editable:
            raise EditNotAllowed(call_id, call.name)
        tool = settings.toolbox.get(call.name)
        if tool is None:
            raise UnknownTool(call.name, sorted(settings.toolbox))
        edited = ToolInput.of(tool.validate(call.patched(decision.edited_arguments)))
    echoed = None if decision.arguments is None else ToolInput.of(call.unmasked(decision.arguments))
    conversation.approve_tool_call(
        call_id,
        by=by,
        kind=kind,
        tool_name=decision.tool_name,
        tool_input=echoed,
        edited_input=edited,
        policy=settings.policy,
        trusted=trusted,
        at=at,
    )
    return call.status
