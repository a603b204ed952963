"""One agent turn as a plain generator: it decides, and yields an effect whenever it needs the world.

Keeping the loop free of I/O gives one implementation of the rules, whichever ports perform its
effects: the driver in :mod:`dcaf_like.application.service` performs them, blocking or async, and
sends the results back.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Any

from dcaf_like.application.callbacks import approver_decision
from dcaf_like.application.context import ContextView
from dcaf_like.application.decisions import (
    POLICY,
    apply_decision,
    approve_by_grant,
    may_be_granted,
    propose,
)
from dcaf_like.application.dto import AgentResponse, QuestionView, ToolCallView
from dcaf_like.application.effects import (
    AWAITING_APPROVAL,
    AWAITING_INPUT,
    AWAITING_REQUESTER,
    CANCELLED,
    FALLBACK,
    HOOK_FAILED,
    QUEUED,
    RUNNING_IN_BACKGROUND,
    TURN_TIMEOUT,
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
    RunTools,
    Stopped,
    Summarize,
    ToolOutcome,
    ToolOutcomes,
)
from dcaf_like.application.errors import HookFailed
from dcaf_like.application.events import (
    ApprovalRequired,
    QuestionAsked,
    RunStarted,
    ToolCallProposed,
    ToolFinished,
    ToolQueued,
    ToolRejected,
    ToolStarted,
    UserMessageRead,
)
from dcaf_like.application.executors import LEASED_TO_QUEUE, ToolJob
from dcaf_like.application.hooks import (
    HookContext,
    Purpose,
    Refused,
    Rewritten,
    ToolCallInfo,
    hook_context,
)
from dcaf_like.application.messages import NO_USAGE, ModelRequest, ModelResponse, Usage
from dcaf_like.application.ports import (
    ApprovalAnswer,
    PendingApproval,
)
from dcaf_like.application.previews import previewed, went_stale
from dcaf_like.application.tool_steps import Ready, Started, not_run, record, start, tool_limit, turn_limit
from dcaf_like.application.transcript import TranscriptCache
from dcaf_like.application.turn_settings import TurnSettings
from dcaf_like.domain import (
    NOBODY,
    CallOutcome,
    Conversation,
    DeciderKind,
    NotAnApprover,
    PolicyDenied,
    ToolCall,
    ToolCallStatus,
    Trusted,
)
from dcaf_like.domain.audit import PYTHON
from dcaf_like.domain.grant import Grant


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
    #: The request's message was queued (calls wait): the turn reports ``stop_reason: "queued"``.
    queued_now: bool = False
    #: The request decided calls another identity asked for: the model waits for that requester.
    waits_for_requester: bool = False
    #: Where the request came in (http, stream, a2a, ...): named in the turn's decision records.
    entrance: str = PYTHON
    _finished: list[str] = field(init=False, default_factory=list)
    _texts: list[str] = field(init=False, default_factory=list)
    _usage: Usage = field(init=False, default=NO_USAGE)
    _timings: dict[str, float] = field(init=False, default_factory=lambda: {"model": 0.0, "tools": 0.0})
    # What earlier model calls of this turn already transcribed (it reads the same for the rest of it).
    _transcribed: TranscriptCache = field(init=False, default_factory=TranscriptCache)
    # settings.monotonic() when the turn's time limit runs out (None: no limit).
    _deadline: float | None = field(init=False, default=None)
    # Model calls and tool runs so far: every step after the first checks for a cancel.
    _steps: int = field(init=False, default=0)
    # The runtime that answered the last model call (None: no model call yet).
    _answered_by: str | None = field(init=False, default=None)
    # What the hooks are told of the turn (made when first needed), and the failure of one that raised.
    _hook_context: HookContext | None = field(init=False, default=None)
    _hook_failed: HookFailed | None = field(init=False, default=None)
    # Calls this turn handed to the agent's executor: they run in the background (docs/runs.md).
    _queued: list[str] = field(init=False, default_factory=list)
    # The standing grants in force, once read (None: not yet; docs/approvals.md, "Grants").
    _granted: tuple[Grant, ...] | None = field(init=False, default=None)

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
            if stop_reason is None and self.waits_for_requester:
                stop_reason = AWAITING_REQUESTER
            elif stop_reason is None:
                stop_reason = yield from self._loop()
            elif self.queued_now and stop_reason == AWAITING_APPROVAL:
                stop_reason = QUEUED
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
            yield from self._read_queued()
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
                if (yield from self._arrived()):  # a message came while the model answered: it reads it
                    continue
                return response.stop_reason
            runnable = []
            for proposed in response.tool_calls:
                call = propose(conversation, self.settings, proposed, self.trusted, entrance=self.entrance)
                if may_be_granted(call):
                    grants = yield from self._grants()
                    approve_by_grant(
                        conversation, self.settings, call, grants, self.trusted, entrance=self.entrance
                    )
                yield from previewed(self.conversation, self.settings, call, self.trusted)
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
            side_by_side = self.settings.parallel_tools > 1 and len(runnable) > 1
            stopped = yield from self._execute(runnable, side_by_side=side_by_side)
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

    def _grants(self) -> Generator[Effect, Any, tuple[Grant, ...]]:
        """The standing grants in force, read once per turn, at the first call one could approve."""
        if self._granted is None:
            self._granted = tuple((yield ReadGrants()))
        return self._granted

    def _arrived(self) -> Generator[Effect, Any, bool]:
        """Queue the messages that arrived for this run since it last looked; whether any wait."""
        for text, at in (yield ReadArrived()):
            self.conversation.queue_user_message(text, at=at)
        return bool(self.conversation.queued)

    def _read_queued(self) -> Generator[Effect, Any, None]:
        """Add the queued messages, and those that arrived for the run, before the next model call
        (nothing waits at a model step)."""
        if not (yield from self._arrived()):
            return
        for message in self.conversation.read_queued():
            if self.emits:
                yield Emit(UserMessageRead(message.text, message.at))

    def _waiting(self) -> str | None:
        """Why the run must wait for the user (a call waits for approval, a question for an answer)
        or for a job engine (calls it runs in the background), or None: it can go on."""
        conversation = self.conversation
        if conversation.pending_tool_calls:
            return AWAITING_APPROVAL
        if conversation.questions and conversation.open_questions:
            return AWAITING_INPUT
        if self._queued:  # the model reads their results on the next turn
            return RUNNING_IN_BACKGROUND
        return None

    def _ask_approver(self) -> Generator[Effect, Any, str | None]:
        settings = self.settings
        for call in self.conversation.pending_tool_calls:
            if not call.approvers.is_default:  # it needs people its rule names: it waits for them
                continue
            call_id = call.id.value
            shown = PendingApproval.of(call)
            answer: ApprovalAnswer = yield AskApprover(shown)
            decision = approver_decision(shown, answer)
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
                    entrance=self.entrance,
                )
                approved = status is ToolCallStatus.APPROVED
            except PolicyDenied as denied:  # an edit the policy denies: the call is refused
                why = f"denied by policy: {denied.reason}"
                self.conversation.reject_tool_call(
                    call_id, why, by=POLICY, kind=DeciderKind.POLICY, at=now, entrance=self.entrance
                )
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

    def _execute(
        self, call_ids: list[str], *, side_by_side: bool = False
    ) -> Generator[Effect, Any, str | None]:
        """Run approved calls one after the other, or, `side_by_side`, those that pass their checks
        together once all were checked (docs/runs.md, "Tools side by side"). Returns why the turn must
        stop (TURN_TIMEOUT, its time ran out; CANCELLED, it was asked to stop), calls it did not reach
        failing, not run; else None."""
        conversation, settings = self.conversation, self.settings
        stopped: str | None = None
        ready: list[Ready] = []  # side by side: the calls that passed their checks, in proposal order
        for call_id in call_ids:
            call = conversation.tool_call(call_id)
            tool = settings.toolbox.get(call.name)
            timeout, limit, the_turns = tool_limit(tool, self._time_left(), settings.turn_timeout)
            if stopped is None and the_turns and timeout is not None and timeout <= 0:
                stopped = TURN_TIMEOUT
            # Side by side, one cancel check before the batch stands for all of it.
            checks = self._steps and not ready
            if stopped is None and tool is not None and checks and (yield CheckCancel()):
                stopped = CANCELLED
            if tool is None:
                conversation.record_tool_failure(
                    call_id, f"tool {call.name!r} is no longer available", outcome=CallOutcome.NOT_FOUND
                )
            elif stopped is not None:
                self._not_run(call_id, stopped)
            elif settings.hooks.before_tool and (refusal := (yield from self._before_tool(call))) is not None:
                failed = self._hook_failed is not None  # a hook that raised is an error, not a refusal
                refused = CallOutcome.ERROR if failed else CallOutcome.UNAUTHORIZED
                conversation.record_tool_failure(call_id, f"not run: {refusal}", outcome=refused)
                stopped = HOOK_FAILED if failed else None
            elif (
                yield from went_stale(conversation, settings, call, self.trusted, self.emits, self.entrance)
            ):
                continue  # not run: it waits again, with its new preview (ADR 38)
            elif call.name in settings.background:
                yield from self._enqueue(call)
                continue  # it runs elsewhere: not finished
            elif side_by_side:
                ready.append(Ready(call, tool, timeout, limit, the_turns))
                continue
            else:
                started = yield from self._start(Ready(call, tool, timeout, limit, the_turns))
                outcome: ToolOutcome = yield started.effect
                stopped = (yield from self._settle(started, outcome)) or stopped
                continue
            self._finished.append(call_id)
            if self.emits:
                yield Emit(ToolFinished(ToolCallView.of(call)))
        if ready:
            stopped = (yield from self._side_by_side(ready, stopped)) or stopped
        if self._hook_failed is not None:  # every call it stopped is settled: the turn fails closed
            raise self._hook_failed
        return stopped

    def _side_by_side(self, ready: list[Ready], stopped: str | None) -> Generator[Effect, Any, str | None]:
        """Start the calls that passed their checks and run them together, then settle each in the
        order proposed; none of them runs when the turn had to stop while they were checked (a hook
        failed, its time ran out)."""
        if stopped is not None:
            for each in ready:
                call_id = each.call.id.value
                self._not_run(call_id, stopped)
                self._finished.append(call_id)
                if self.emits:
                    yield Emit(ToolFinished(ToolCallView.of(each.call)))
            return stopped
        batch = []
        for each in ready:
            batch.append((yield from self._start(each, side_by_side=True)))
        if len(batch) == 1:
            outcomes = ToolOutcomes([(yield batch[0].effect)])
        else:
            began = time.perf_counter()
            outcomes = yield RunTools([s.effect for s in batch], self.settings.parallel_tools)
            self._timings["tools"] += time.perf_counter() - began
        for started, outcome in zip(batch, outcomes.each, strict=True):  # in the order proposed
            stopped = (yield from self._settle(started, outcome)) or stopped
        return stopped

    def _not_run(self, call_id: str, stopped: str) -> None:
        not_run(self.conversation, call_id, stopped, self._why_not_run(stopped))

    def _start(self, ready: Ready, *, side_by_side: bool = False) -> Generator[Effect, Any, Started]:
        """Say the call started, and lease it to this worker: the run its driver is to perform."""
        self._steps += 1
        if self.emits:
            yield Emit(ToolStarted(ready.call.id.value, ready.call.name))
        return start(self.conversation, self.settings, self.trusted, ready, side_by_side=side_by_side)

    def _settle(self, started: Started, outcome: ToolOutcome) -> Generator[Effect, Any, str | None]:
        """Record how a call's run ended, and say so: why the turn must stop now (its time limit ran
        out in the tool, a hook after it failed), or None."""
        call = started.call
        call_id = call.id.value
        if outcome.not_started:  # side by side, the run was cancelled while it waited for a slot
            self._not_run(call_id, CANCELLED)
            self._finished.append(call_id)
            if self.emits:
                yield Emit(ToolFinished(ToolCallView.of(call)))
            return CANCELLED
        ran_for = outcome.ran_for
        if ran_for is None:
            ran_for = time.perf_counter() - started.at
            self._timings["tools"] += ran_for
        asked = record(self.conversation, self.settings, started, outcome, ran_for=ran_for)
        stopped = TURN_TIMEOUT if outcome.timed_out and started.the_turns else None
        if self.settings.hooks.after_tool and not (yield from self._after_tool(call)):
            stopped = HOOK_FAILED
        if asked is not None:  # the call waits for the user's answer: not finished
            if self.emits:
                yield Emit(QuestionAsked(QuestionView.of(asked, call.name)))
            return stopped
        self._finished.append(call_id)
        if self.emits:
            yield Emit(ToolFinished(ToolCallView.of(call)))
        return stopped

    def _enqueue(self, call: ToolCall) -> Generator[Effect, Any, None]:
        """Queue an approved call for the agent's executor: a lease no worker holds yet. The driver
        hands its job over once the conversation is saved, so the job finds the call queued."""
        conversation, settings, call_id = self.conversation, self.settings, call.id.value
        conversation.lease_tool_call(call_id, LEASED_TO_QUEUE, until=settings.clock() + settings.queue_ttl)
        yield Enqueue(ToolJob(conversation.id, call_id, call.approved_fingerprint))
        self._queued.append(call_id)
        if self.emits:
            yield Emit(ToolQueued(ToolCallView.of(call)))

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

    def _time_left(self) -> float | None:
        return None if self._deadline is None else self._deadline - self.settings.monotonic()

    def _why_not_run(self, stopped: str) -> str:
        if stopped == CANCELLED:
            return "the run was cancelled before it"
        if stopped == HOOK_FAILED and self._hook_failed is not None:
            return f"the hook {self._hook_failed.hook!r} failed before it ran"
        return f"{self._turn_limit()} ran out before it"

    def _turn_limit(self) -> str:
        return turn_limit(self.settings.turn_timeout)

    def _model_request(self, system: str) -> ModelRequest:
        return ModelRequest(
            system=system,
            messages=self._transcribed.messages(self.conversation, self.settings.accepts),
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
        blocks, costs = self._transcribed.blocks(conversation, settings.accepts, settings.count_tokens)
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
