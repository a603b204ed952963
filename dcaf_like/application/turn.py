"""One agent turn as a plain generator: it decides, and yields an effect whenever it needs the world.

Keeping the loop free of I/O gives one implementation of the rules for both the sync and the async
driver in :mod:`dcaf_like.application.service`, which perform the effects and send the results back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dcaf_like.application.dto import AgentResponse, ToolCallView
from dcaf_like.application.errors import InvalidToolArguments
from dcaf_like.application.events import (
    ApprovalRequired,
    StreamEvent,
    ToolCallProposed,
    ToolFinished,
    ToolRejected,
    ToolStarted,
)
from dcaf_like.application.model import (
    NO_USAGE,
    AssistantTurn,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserTurn,
)
from dcaf_like.application.ports import ApprovalAnswer, ExecutableTool, PendingApproval, ToolContext
from dcaf_like.domain import (
    ApprovalPolicy,
    Conversation,
    Decider,
    InvalidToolInput,
    Message,
    PlatformContext,
    Role,
    Session,
    ToolCall,
    ToolCallStatus,
    ToolInput,
    Verdict,
)

# -- effects: what the turn asks its driver to do ---------------------------------------------------
# Effects and outcomes live for one step of one turn and never leave the application layer. They are
# not frozen: a frozen dataclass's __init__ costs four times a plain one, and a turn makes several.


@dataclass(frozen=True, slots=True)
class RunContext:
    """What dynamic instructions and custom agent functions see of a run."""

    conversation_id: str
    platform_context: PlatformContext
    session: Mapping[str, Any]
    agent_name: str = ""


@dataclass(slots=True)
class ResolveInstructions:
    context: RunContext


@dataclass(slots=True)
class CallModel:
    request: ModelRequest


@dataclass(slots=True)
class RunTool:
    tool: ExecutableTool
    arguments: dict[str, Any]
    context: ToolContext


@dataclass(slots=True)
class AskApprover:
    pending: PendingApproval


@dataclass(slots=True)
class Emit:
    event: StreamEvent


Effect = ResolveInstructions | CallModel | RunTool | AskApprover | Emit


@dataclass(slots=True)
class ToolOutcome:
    output: str | None = None
    error: str | None = None


@dataclass(slots=True)  # never changed after it is made; not frozen, whose __init__ costs 2 µs per agent
class TurnSettings:
    toolbox: Mapping[str, ExecutableTool]
    policy: ApprovalPolicy
    tool_specs: tuple[ToolSpec, ...]
    max_iterations: int = 10
    approval_ttl: float | None = None
    has_approver: bool = False
    runtime_name: str = ""
    agent_name: str = ""
    clock: Callable[[], float] = time.time
    #: Instructions that are the same every turn; None when they are resolved per turn.
    system: str | None = None


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
    emits: bool = True
    _finished: list[str] = field(default_factory=list)
    _texts: list[str] = field(default_factory=list)
    _usage: Usage = NO_USAGE
    _timings: dict[str, float] = field(default_factory=lambda: {"model": 0.0, "tools": 0.0})
    # The transcript of conversation.messages[:_stable_messages], which no longer changes.
    _stable: list[ModelMessage] = field(default_factory=list)
    _stable_messages: int = 0

    def run(self) -> Generator[Effect, Any, AgentResponse]:
        started = time.perf_counter()
        for call_id in self.rejected_now:
            if self.emits:
                yield Emit(ToolRejected(self._view(call_id)))
        yield from self._execute(self.approved_now)
        stop_reason = "awaiting_approval"
        if not self.conversation.pending_tool_calls:
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
            )
            system = yield ResolveInstructions(context)
        for _ in range(self.settings.max_iterations):
            started = time.perf_counter()
            response: ModelResponse = yield CallModel(self._model_request(system))
            self._timings["model"] += time.perf_counter() - started
            self._usage = self._usage + response.usage
            conversation.add_assistant_message(response.text, at=self.settings.clock())
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
            yield from self._execute(runnable)
            if self.settings.has_approver:
                yield from self._ask_approver()
            pending = conversation.pending_tool_calls
            if pending:
                if self.emits:
                    yield Emit(ApprovalRequired(tuple(ToolCallView.of(c) for c in pending)))
                return "awaiting_approval"
        return "max_iterations"

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
        )
        call.policy_reason = decision.reason
        if decision.verdict is Verdict.ALLOW:
            conversation.approve_tool_call(call.id.value, by=POLICY, at=now, decider=Decider.POLICY)
        elif decision.verdict is Verdict.DENY:
            reason = f"denied by policy: {decision.reason}"
            conversation.reject_tool_call(call.id.value, reason, by=POLICY, at=now, decider=Decider.POLICY)
        return call

    def _ask_approver(self) -> Generator[Effect, Any, None]:
        for call in self.conversation.pending_tool_calls:
            answer: ApprovalAnswer = yield AskApprover(
                PendingApproval(
                    call.id.value,
                    call.name,
                    call.description,
                    call.shown(call.proposed_input),
                    call.policy_reason or "",
                    call.editable,
                )
            )
            call_id = call.id.value
            if not answer.approved:
                self.conversation.reject_tool_call(
                    call_id, answer.reason, by="approver", decider=Decider.APPROVER
                )
                self.rejected_now.append(call_id)
                if self.emits:
                    yield Emit(ToolRejected(ToolCallView.of(call)))
                continue
            edited = None
            if answer.edited_arguments is not None:
                tool = self.settings.toolbox[call.name]
                edited = ToolInput.of(tool.validate(call.patched(answer.edited_arguments)))
            self.conversation.approve_tool_call(
                call_id, by="approver", edited_input=edited, decider=Decider.APPROVER
            )
            yield from self._execute([call_id])

    def _execute(self, call_ids: list[str]) -> Generator[Effect, Any, None]:
        conversation = self.conversation
        for call_id in call_ids:
            call = conversation.tool_call(call_id)
            tool = self.settings.toolbox.get(call.name)
            if tool is None:
                conversation.record_tool_failure(call_id, f"tool {call.name!r} is no longer available")
            else:
                if self.emits:
                    yield Emit(ToolStarted(call_id, call.name))
                session = Session(conversation.session)
                started = time.perf_counter()
                outcome: ToolOutcome = yield RunTool(
                    tool,
                    call.effective_input.as_dict(),
                    ToolContext(conversation.id, call_id, conversation.platform_context, session),
                )
                self._timings["tools"] += time.perf_counter() - started
                now = self.settings.clock()
                if outcome.error is None:
                    conversation.record_tool_result(call_id, outcome.output or "", at=now)
                else:
                    conversation.record_tool_failure(call_id, outcome.error, at=now)
                if session.changed:
                    conversation.replace_session(session.to_dict())
            self._finished.append(call_id)
            if self.emits:
                yield Emit(ToolFinished(ToolCallView.of(call)))

    def _model_request(self, system: str) -> ModelRequest:
        return ModelRequest(
            system=system,
            messages=self._transcript(),
            tools=self.settings.tool_specs,
            conversation_id=self.conversation.id,
        )

    def _transcript(self) -> tuple[ModelMessage, ...]:
        """The transcript, reusing what earlier model calls of this turn already transcribed: a message
        whose calls have all settled (and which is not the last one) reads the same from then on."""
        conversation, stable = self.conversation, self._stable
        messages = conversation.messages
        tail: list[ModelMessage] = []
        for index in range(self._stable_messages, len(messages)):
            if tail or index == len(messages) - 1:
                _transcribe(conversation, messages[index], tail)
            elif _transcribe(conversation, messages[index], tail):
                stable.extend(tail)
                tail.clear()
                self._stable_messages = index + 1
        return (*stable, *tail)

    def _view(self, call_id: str) -> ToolCallView:
        return ToolCallView.of(self.conversation.tool_call(call_id))

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
            timings=dict(self._timings),
        )


def transcript(conversation: Conversation) -> tuple[ModelMessage, ...]:
    """The conversation as a model reads it: each proposal followed by the outcome of each of its calls."""
    messages: list[ModelMessage] = []
    for message in conversation.messages:
        _transcribe(conversation, message, messages)
    return tuple(messages)


def _transcribe(conversation: Conversation, message: Message, into: list[ModelMessage]) -> bool:
    """Append `message`'s model form to `into`; True if that form is final (every call settled)."""
    if message.role is Role.USER:
        into.append(UserTurn(message.text))
        return True
    calls = [conversation.tool_calls[i] for i in message.tool_call_ids]
    into.append(
        AssistantTurn(
            message.text,
            tuple(ModelToolCall(c.id.value, c.name, c.proposed_input.as_dict()) for c in calls),
        )
    )
    settled = True
    for call in calls:
        if call.status.is_terminal:
            into.append(_result_of(call))
        else:
            settled = False
    return settled


def _result_of(call: ToolCall) -> ToolResult:
    if call.status is ToolCallStatus.EXECUTED:
        content = call.result or ""
        if call.edited:
            content = (
                f"(A human edited the arguments before running: {call.effective_input.canonical_json})\n"
                + content
            )
        return ToolResult(call.id.value, call.name, content)
    if call.status is ToolCallStatus.REJECTED:
        return ToolResult(
            call.id.value, call.name, f"Not run. Rejected: {call.decision_note or 'no reason given'}", True
        )
    return ToolResult(call.id.value, call.name, f"Error: {call.error}", True)
