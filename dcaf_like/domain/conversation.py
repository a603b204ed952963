"""The Conversation aggregate: messages, the tool calls they proposed, and every decision about them."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dcaf_like.domain.attachment import Attachment, check_total
from dcaf_like.domain.audit import PYTHON, DecisionOutcome, DecisionRecord
from dcaf_like.domain.context import NO_CONTEXT, PlatformContext
from dcaf_like.domain.errors import (
    ApprovalMismatch,
    DomainError,
    DuplicateToolCall,
    IllegalTransition,
    PendingToolCalls,
    UnknownTask,
    UnknownToolCall,
)
from dcaf_like.domain.identity import NOBODY, Identity, Trusted
from dcaf_like.domain.policy import ApprovalPolicy
from dcaf_like.domain.question import (
    MAX_TEXT_ANSWER,
    OpenQuestions,
    Question,
    QuestionKind,
    QuestionStatus,
    UnknownQuestion,
)
from dcaf_like.domain.tool_call import (
    CallOutcome,
    DeciderKind,
    ToolCall,
    ToolCallId,
    ToolCallStatus,
    ToolInput,
)

INTERRUPTED = (
    "interrupted: the run of this call ended before its result was recorded (the worker running it "
    "stopped); it may or may not have run. It was not run again: check its effect before proposing it anew"
)
#: Who closes a question whose window closed (and rejects a call whose approval window did).
SYSTEM = "system"
#: Why the system rejected a call whose approval window closed.
EXPIRED = "the approval window closed before a decision"
STOPPED_WHILE_RUNNING = (
    "interrupted: the worker running this call stopped it (it was shutting down) before its result was "
    "recorded; it may or may not have had its effect. It was not run again: check before proposing it anew"
)


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


@dataclass(frozen=True, slots=True)
class MessageContent:
    """The text of a message. Empty is allowed (a turn that only carries decisions)."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise DomainError(f"message content must be text, got {type(self.text).__name__}")

    def __str__(self) -> str:
        return self.text


@dataclass(slots=True)
class Message:
    """A message is a value: once added to a conversation it is never changed in place (attaching a
    call replaces the last message with one that names it too), so a store may hand the same object
    to every reader of it."""

    role: Role
    content: MessageContent
    at: float
    # Ids of the tool calls an assistant message proposed, in the order the model gave them.
    tool_call_ids: tuple[str, ...] = ()
    # The model runtime that wrote an assistant message (the one that answered, when the agent's
    # runtime chose among several); None for a user's message, or one stored before this was kept.
    runtime: str | None = None
    # Images and files a user's message carries besides its text, in the order the user gave them.
    attachments: tuple[Attachment, ...] = ()

    @property
    def text(self) -> str:
        return self.content.text


def new_conversation_id() -> str:
    return "conv_" + secrets.token_hex(12)


class TaskOutcome(StrEnum):
    """How a task ended when its messages cannot show it."""

    FAILED = "failed"
    CANCELED = "canceled"


@dataclass(slots=True)
class TaskRecord:
    """A piece of work a protocol names (an A2A task): the messages from `first_message` on, up to
    the next task's. Whether it works, waits or completed is read from those messages and their
    tool calls; only an end they cannot show (failed, canceled) is recorded here."""

    id: str
    first_message: int
    opened_at: float
    outcome: TaskOutcome | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class ContextSummary:
    """What the model is told of ``messages[:through]`` once they no longer fit its context window:
    written by the agent's runtime, kept with the conversation so it is written once."""

    text: str
    through: int


@dataclass(frozen=True, slots=True)
class Received:
    """What :meth:`Conversation.receive_user_message` did: the message it added, the calls it rejected
    as expired first, and the calls that failed as their questions expired."""

    message: Message
    rejected: tuple[str, ...]
    failed: tuple[str, ...]


#: The longest title a conversation takes (:meth:`Conversation.retitle`).
MAX_TITLE = 200


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """A user's message that arrived while the conversation could not take it (a turn ran, or calls
    waited for a decision): kept in order, and added as a user message at the turn's next model step
    (docs/runs.md, "A message into a running run")."""

    text: str
    at: float


@dataclass(eq=False)
class Conversation:
    """Aggregate root. Every change goes through a method that checks the rules and bumps
    :attr:`version`, which the repository uses for optimistic concurrency; a decision also leaves its
    record for the audit trail (:attr:`unsaved_decisions`)."""

    id: str
    messages: list[Message] = field(default_factory=list)
    tool_calls: dict[str, ToolCall] = field(default_factory=dict)
    platform_context: PlatformContext = NO_CONTEXT
    session: dict[str, Any] = field(default_factory=dict)
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    summary: ContextSummary | None = None
    #: Where what the model is sent begins when a context window without a summary left the oldest
    #: messages out: those before it are not sent again, but for one holding a call not settled yet
    #: (ADR 25). It only moves forward, as the summary's end does. 0: nothing was left out.
    cut: int = 0
    #: Questions its tools asked the user (docs/runs.md, "Questions"), by id, in the order asked.
    questions: dict[str, Question] = field(default_factory=dict)
    #: User messages waiting to be read at the next model step, oldest first.
    queued: list[QueuedMessage] = field(default_factory=list)
    version: int = 0
    created_at: float = field(default_factory=time.time)
    # The identity that started it, on a server with API keys (None: no one in particular).
    owner: str | None = None
    #: What people call it, to find it again in a list (None: untitled); see :meth:`retitle`.
    title: str | None = None
    # Decision records not yet written: the store appends them with the save that carries the
    # decisions (and then empties this list).
    unsaved_decisions: list[DecisionRecord] = field(default_factory=list, repr=False)
    # What changed since a store last held it, so that a save writes only that (ADR 16):
    # ``messages[:saved_messages]`` are stored as they are, and `changed_calls` names the calls added
    # or changed since. None: not known to be stored (a new conversation): a save writes all of it.
    saved_messages: int = field(default=0, repr=False)
    changed_calls: set[str] | None = field(default=None, repr=False)
    # Not stored: what a store's windowed read left out (ADR 22). ``messages[i]`` is message
    # ``message_offset + i`` of the conversation and the calls held are its calls from position
    # `call_offset` on; the ones before were settled, and no turn needs them. 0: all of it is held.
    message_offset: int = field(default=0, repr=False)
    call_offset: int = field(default=0, repr=False)

    def is_visible_to(self, identity: Identity | None) -> bool:
        """Whether `identity` may read, use, stop or forget this conversation: its owner, or an
        ``admin``; anyone when nobody was authenticated (a server without keys, the Python API)."""
        return identity is None or identity.can("admin") or self.owner == identity.name

    @classmethod
    def start(
        cls, conversation_id: str | None = None, *, at: float | None = None, owner: str | None = None
    ) -> Conversation:
        now = time.time() if at is None else at
        return cls(id=conversation_id or new_conversation_id(), created_at=now, owner=owner)

    # -- queries -------------------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        """How many messages the conversation has, held or not (:attr:`message_offset`)."""
        return self.message_offset + len(self.messages)

    @property
    def call_count(self) -> int:
        """How many calls the conversation has, held or not (:attr:`call_offset`)."""
        return self.call_offset + len(self.tool_calls)

    def window_start(self) -> tuple[int, int]:
        """Where what a turn may still show the model begins, as the positions of a message and of a
        call: the end of the summary or the cut, the later (what they leave out is not sent again), or
        before it the first message with a call not settled yet (its block is always sent), never past
        the last message; and the first call of that message or of a later one. A store's windowed read
        starts there (ADR 22, ADR 25)."""
        offset, count = self.message_offset, self.message_count
        start = min(max(self.cut, 0 if self.summary is None else self.summary.through), count - 1)
        if start <= offset:
            return offset, self.call_offset
        unsettled = {k for k, c in self.tool_calls.items() if not c.status.is_terminal}
        for index in range(len(self.messages) - 1, -1, -1):  # the first message holding one of them
            if not unsettled:
                break
            ids = self.messages[index].tool_call_ids
            if not unsettled.isdisjoint(ids):
                start = min(start, offset + index)
                unsettled.difference_update(ids)
        wanted = {i for m in self.messages[start - offset :] for i in m.tool_call_ids}
        first_call = self.call_count  # no call from `start` on: none is needed
        for position, call_id in enumerate(reversed(self.tool_calls)):  # the earliest of `wanted`
            if not wanted:
                break
            first_call = self.call_count - 1 - position
            wanted.discard(call_id)
        return start, first_call

    @property
    def pending_tool_calls(self) -> list[ToolCall]:
        return [c for c in self.tool_calls.values() if c.status is ToolCallStatus.PENDING]

    @property
    def unfinished_tool_calls(self) -> list[ToolCall]:
        """Calls not yet in a final state: pending, or approved and not yet run."""
        return [c for c in self.tool_calls.values() if not c.status.is_terminal]

    @property
    def open_questions(self) -> list[Question]:
        return [q for q in self.questions.values() if q.status is QuestionStatus.OPEN]

    def tool_call(self, call_id: str) -> ToolCall:
        try:
            return self.tool_calls[call_id]
        except KeyError:
            raise UnknownToolCall(call_id, self.id) from None

    # -- messages ------------------------------------------------------------------------------

    def add_user_message(
        self, text: str, *, attachments: tuple[Attachment, ...] = (), at: float | None = None
    ) -> Message:
        """A new user turn, with the images and files it carries (at most MAX_PARTS_BYTES in all).
        Refused while calls wait for a decision; a turn that carries decisions applies them first.
        Approved calls may still be running: their results stay attached to the message that proposed
        them."""
        if self.tool_calls and (pending := self.pending_tool_calls):
            raise PendingToolCalls([c.id.value for c in pending])
        if self.questions and (asked := self.open_questions):
            raise OpenQuestions([q.id for q in asked])
        if attachments:
            check_total(attachments)
        return self._add_message(Role.USER, text, at, attachments=tuple(attachments))

    def receive_user_message(
        self, text: str, *, attachments: tuple[Attachment, ...] = (), at: float, entrance: str = PYTHON
    ) -> Received:
        """A user's new message, as every entrance takes it (HelpDesk and A2A alike), in this order:
        calls left waiting past their approval window are rejected by the system (`EXPIRED`), open
        questions past theirs expire (their calls fail, not run), then the message is added, refused
        while anything still waits (:class:`PendingToolCalls`, :class:`OpenQuestions`)."""
        rejected: list[str] = []
        for call in self.pending_tool_calls if self.tool_calls else ():
            if call.is_expired(at):
                system = DeciderKind.SYSTEM
                self.reject_tool_call(
                    call.id.value, EXPIRED, by=SYSTEM, kind=system, at=at, entrance=entrance
                )
                rejected.append(call.id.value)
        expired = self.expire_questions(at=at, entrance=entrance) if self.questions else []
        failed = [c.id.value for c in expired]
        message = self.add_user_message(text, attachments=attachments, at=at)
        return Received(message, tuple(rejected), tuple(failed))

    def queue_user_message(self, text: str, *, at: float) -> QueuedMessage:
        """Keep a user's message for the next model step, as it is now refused as a turn's message (calls
        wait for a decision) or arrives while a turn runs. It decides nothing: a waiting call stays
        waiting."""
        if not text:
            raise DomainError("a queued message needs text")
        queued = QueuedMessage(text, at)
        self.queued.append(queued)
        self.version += 1
        return queued

    def read_queued(self) -> list[Message]:
        """Add the queued messages as user messages, in the order they came (nothing waits for a
        decision or an answer at a model step); the messages added."""
        if not self.queued:
            return []
        added = [self.add_user_message(q.text, at=q.at) for q in self.queued]
        self.queued = []
        return added

    def add_assistant_message(
        self, text: str, *, at: float | None = None, runtime: str | None = None
    ) -> Message:
        return self._add_message(Role.ASSISTANT, text, at, runtime)

    def _add_message(
        self,
        role: Role,
        text: str,
        at: float | None,
        runtime: str | None = None,
        attachments: tuple[Attachment, ...] = (),
    ) -> Message:
        message = Message(role, MessageContent(text), _now(at), (), runtime, attachments)
        self.messages.append(message)
        self.version += 1
        return message

    # -- tool calls ----------------------------------------------------------------------------

    def request_tool_call(
        self,
        name: str,
        tool_input: ToolInput,
        *,
        requires_approval: bool,
        editable: bool = False,
        description: str = "",
        approval_reason: str | None = None,
        secret_arguments: frozenset[str] = frozenset(),
        approval_ttl: float | None = None,
        call_id: ToolCallId | None = None,
        requested_by: str | None = None,
        risk: str | None = None,
        at: float | None = None,
    ) -> ToolCall:
        """Record a call the model proposed, attached to the latest assistant message; `requested_by`
        is the identity whose request led to it (the requester, whom a rule may keep from approving)."""
        if not self.messages or self.messages[-1].role is not Role.ASSISTANT:
            raise DomainError("a tool call must follow the assistant message that proposed it")
        call_id = call_id or ToolCallId.new()
        if call_id.value in self.tool_calls:
            raise DuplicateToolCall(call_id.value)
        now = _now(at)
        call = ToolCall(
            id=call_id,
            name=name,
            proposed_input=tool_input,
            requires_approval=requires_approval,
            editable=editable,
            description=description,
            proposed_at=now,
            expires_at=None if approval_ttl is None else now + approval_ttl,
            approval_reason=approval_reason,
            secret_arguments=secret_arguments,
            context_fingerprint=self.platform_context.fingerprint,
            requested_by=requested_by,
            risk=risk,
        )
        self.tool_calls[call_id.value] = call
        last = self.messages[-1]
        ids = (*last.tool_call_ids, call_id.value)
        self.messages[-1] = Message(last.role, last.content, last.at, ids, last.runtime, last.attachments)
        self.saved_messages = min(self.saved_messages, len(self.messages) - 1)  # the proposing message
        self._changed(call_id.value)
        self.version += 1
        return call

    def approve_tool_call(
        self,
        call_id: str,
        *,
        by: str,
        tool_name: str | None = None,
        tool_input: ToolInput | None = None,
        edited_input: ToolInput | None = None,
        kind: DeciderKind = DeciderKind.HUMAN,
        policy: ApprovalPolicy | None = None,
        trusted: Trusted[Any] = NOBODY,
        at: float | None = None,
        note: str = "",
        entrance: str = PYTHON,
    ) -> ToolCall:
        """Approve a pending call, to run in this conversation's current platform context (and the
        policy's conditions see `trusted`: who approves, the agent's dependencies). `note` is the
        reason its record in the audit trail gives (a grant's approval names the grant's rule).

        `tool_name` and `tool_input`, when the approver sends them, must be exactly what was proposed:
        an approval binds to the proposal's fingerprint. Changing the arguments is a separate decision,
        `edited_input`, which only tools marked editable accept. The current context must be the one
        the call was proposed in, its credentials aside (:class:`ContextChanged`), and with a `policy`
        the call as it would run must not be denied now (:class:`PolicyDenied`).

        A call whose rule needs more than one approver counts the approval and waits for the others
        (its status stays pending); the audit trail records it as ``counted``. Sent arguments must then
        be those the call stands with (an earlier approver's edit, if any).
        """
        call = self.tool_call(call_id)
        if tool_name is not None and tool_name != call.name:
            raise ApprovalMismatch(call_id, f"tool {tool_name!r} was sent, {call.name!r} was proposed")
        if tool_input is not None and tool_input != call.effective_input:
            raise ApprovalMismatch(
                call_id, "the arguments differ from the proposal; send an explicit edit to change them"
            )
        now = _now(at)
        done = call.approve(
            by=by,
            at=now,
            edited_input=edited_input,
            kind=kind,
            context=self.platform_context,
            policy=policy,
            trusted=trusted,
        )
        self._changed(call_id)
        self.version += 1
        if not done:
            counted = call.approvals[-1]
            needs = call.approvers.describe()
            edit = ", with an edit" if call.edited else ""
            note = f"approval counted for stage {counted.stage + 1} of {needs}{edit}"
            self._audit(call, DecisionOutcome.COUNTED, counted.by, kind, now, note, entrance=entrance)
        elif call.requires_approval or kind is not DeciderKind.POLICY:  # an ungated call needs no decision
            outcome = DecisionOutcome.EDITED if call.edited else DecisionOutcome.APPROVED
            self._audit(call, outcome, call.decided_by or by, kind, now, note, entrance=entrance)
        return call

    def reject_tool_call(
        self,
        call_id: str,
        reason: str,
        *,
        by: str,
        kind: DeciderKind = DeciderKind.HUMAN,
        policy: ApprovalPolicy | None = None,
        trusted: Trusted[Any] = NOBODY,
        at: float | None = None,
        entrance: str = PYTHON,
    ) -> ToolCall:
        """Reject a call, under any context: a rejection runs nothing. Of a call whose rule names its
        approvers, only they or the requester may (:class:`NotAnApprover`); `policy` knows the groups."""
        call = self.tool_call(call_id)
        now = _now(at)
        call.reject(reason, by=by, at=now, kind=kind, policy=policy, trusted=trusted)
        self._changed(call_id)
        self.version += 1
        self._audit(call, DecisionOutcome.REJECTED, by, kind, now, reason, entrance=entrance)
        return call

    def claim_notice(self, call_id: str, notice: str, *, at: float, entrance: str = PYTHON) -> ToolCall:
        """Record that the `notice` a waiting call's escalation owes (``"reminder"``, ``"escalation"``)
        is sent now (docs/approvals.md, "Escalation"); the save that stores it is the claim."""
        call = self.tool_call(call_id)
        call.claim_notice(notice, at=at)
        escalation = call.approvers.escalation
        if notice == "escalation" and escalation is not None:
            groups = ", ".join(sorted(escalation.escalate_to))
            outcome, reason = DecisionOutcome.ESCALATED, f"escalated to {groups}"
        else:
            outcome, reason = DecisionOutcome.REMINDED, "its approvers reminded"
        self._audit(call, outcome, SYSTEM, DeciderKind.SYSTEM, at, reason, entrance=entrance)
        self._changed(call_id)
        self.version += 1
        return call

    def refusal(
        self,
        call_id: str,
        reason: str,
        *,
        by: str,
        at: float | None = None,
        kind: DeciderKind = DeciderKind.HUMAN,
        entrance: str = PYTHON,
    ) -> DecisionRecord:
        """The record of a decision about `call_id` that was refused (it changed nothing): the caller
        writes it to the audit trail, as no save carries it."""
        call = self.tool_calls.get(call_id)
        return DecisionRecord(
            conversation_id=self.id,
            call_id=call_id,
            tool_name=call.name if call is not None else "",
            fingerprint=call.fingerprint if call is not None else "",
            outcome=DecisionOutcome.REFUSED,
            decided_by=by,
            decider=kind,
            entrance=entrance,
            at=_now(at),
            reason=reason,
        )

    def _audit(
        self,
        call: ToolCall,
        outcome: DecisionOutcome,
        by: str,
        kind: DeciderKind,
        at: float,
        reason: str = "",
        question_id: str = "",
        *,
        entrance: str,
    ) -> None:
        self.unsaved_decisions.append(
            DecisionRecord(
                conversation_id=self.id,
                call_id=call.id.value,
                tool_name=call.name,
                fingerprint=call.fingerprint,
                outcome=outcome,
                decided_by=by,
                decider=kind,
                entrance=entrance,
                at=at,
                reason=reason,
                question_id=question_id,
            )
        )

    def record_tool_result(
        self,
        call_id: str,
        result: str,
        *,
        attachments: tuple[Attachment, ...] = (),
        at: float | None = None,
        ran_for: float | None = None,
    ) -> ToolCall:
        """The call ran (for `ran_for` seconds): its result's text, and the images and files it holds
        besides."""
        call = self.tool_call(call_id)
        now = _now(at)
        call.record_result(result, at=now, attachments=attachments, ran_for=ran_for)
        self._changed(call_id)
        self.version += 1
        return call

    def record_tool_failure(
        self,
        call_id: str,
        error: str,
        *,
        at: float | None = None,
        outcome: CallOutcome = CallOutcome.ERROR,
        ran_for: float | None = None,
    ) -> ToolCall:
        """The call failed, or was not run: `outcome` says how (an error, a time limit, a refusal, ...)."""
        call = self.tool_call(call_id)
        now = _now(at)
        call.record_failure(error, at=now, outcome=outcome, ran_for=ran_for)
        self._changed(call_id)
        self.version += 1
        return call

    def reopen_stale_call(
        self,
        call_id: str,
        preview: str | None,
        *,
        error: str | None = None,
        at: float | None = None,
        entrance: str = PYTHON,
    ) -> ToolCall:
        """An approved call whose preview, run again before it ran, changed: it waits again with the
        new `preview` (or the `error` of the recheck), bound to the next approval (ADR 38)."""
        call = self.tool_call(call_id)
        now = _now(at)
        call.went_stale(preview, error=error, at=now)
        why = (
            "its preview failed when rechecked"
            if preview is None
            else "its preview changed since it was approved"
        )
        why = f"not run: {why}"
        self._audit(call, DecisionOutcome.STALE, SYSTEM, DeciderKind.SYSTEM, now, why, entrance=entrance)
        self._changed(call_id)
        self.version += 1
        return call

    def lease_tool_call(self, call_id: str, owner: str, *, until: float) -> ToolCall:
        """`owner` runs this approved call until `until`, unless it renews the lease before then."""
        call = self.tool_call(call_id)
        call.lease(owner, until=until)
        self._changed(call_id)
        self.version += 1
        return call

    def report_progress(self, call_id: str, message: str, fraction: float | None = None) -> ToolCall:
        """The tool of this approved call, running, said how far it got (kept on the call)."""
        call = self.tool_call(call_id)
        call.report_progress(message, fraction)
        self._changed(call_id)
        self.version += 1
        return call

    def settle_abandoned_calls(
        self, *, at: float | None = None, gone: Callable[[str], bool] | None = None
    ) -> list[ToolCall]:
        """Mark INTERRUPTED every approved call whose run ended without a result: its lease ran out,
        or its holder is known to be `gone` (the worker running it crashed or was killed). It is not
        run again; its outcome is unknown."""
        now = _now(at)
        abandoned = [c.id.value for c in self.tool_calls.values() if c.is_abandoned(now, gone)]
        return [self.interrupt_tool_call(call_id, INTERRUPTED, at=now) for call_id in abandoned]

    def interrupt_tool_call(self, call_id: str, reason: str, *, at: float | None = None) -> ToolCall:
        call = self.tool_call(call_id)
        now = _now(at)
        call.interrupt(reason, at=now)
        self._changed(call_id)
        self.version += 1
        return call

    # -- questions -----------------------------------------------------------------------------

    def question(self, question_id: str) -> Question:
        """A question asked in this conversation; any other id (forged, another conversation's) is
        an UnknownQuestion."""
        try:
            return self.questions[question_id]
        except KeyError:
            raise UnknownQuestion(question_id, self.id) from None

    def ask_question(
        self,
        call_id: str,
        kind: QuestionKind | str,
        prompt: str,
        options: list[str] | tuple[str, ...] = (),
        *,
        max_length: int = MAX_TEXT_ANSWER,
        ttl: float | None = None,
        at: float | None = None,
    ) -> Question:
        """The running call `call_id` asks the user: a new open question, and the call waits for it
        (for `ttl` seconds at most, if given: the question then expires)."""
        call = self.tool_call(call_id)
        question = Question.ask(call_id, kind, prompt, options, max_length=max_length, at=_now(at), ttl=ttl)
        call.ask()
        self.questions[question.id] = question
        self._changed(call_id)
        self.version += 1
        return question

    def answer_question(
        self,
        question_id: str,
        value: object,
        *,
        by: str,
        worker: str,
        until: float,
        at: float | None = None,
        entrance: str = PYTHON,
    ) -> ToolCall:
        """Answer an open question: its call is claimed by `worker` (leased until `until`) to run again
        with the answer. Refused, changing nothing, for a question not open or a value it does not take."""
        question = self.question(question_id)
        call = self.tool_call(question.call_id)
        if question.is_open and call.status is not ToolCallStatus.ASKING:
            raise IllegalTransition(call.id.value, call.status.value, ToolCallStatus.APPROVED.value)
        now = _now(at)
        question.accept(value, by=by, at=now)
        call.resume(worker, until=until)
        self._changed(call.id.value)
        self.version += 1
        answered = DecisionOutcome.ANSWERED
        self._audit(call, answered, by, DeciderKind.HUMAN, now, question_id=question.id, entrance=entrance)
        return call

    def decline_question(
        self, question_id: str, *, by: str, at: float | None = None, entrance: str = PYTHON
    ) -> ToolCall:
        """The user will not answer: the question is closed and the call that asked fails, not run."""
        question = self.question(question_id)
        call = self.tool_call(question.call_id)
        now = _now(at)
        question.decline(by=by, at=now)
        call.record_failure(f"not run: the user declined to answer {question.prompt!r}", at=now)
        self._changed(call.id.value)
        self.version += 1
        declined = DecisionOutcome.DECLINED
        self._audit(call, declined, by, DeciderKind.HUMAN, now, question_id=question.id, entrance=entrance)
        return call

    def expire_questions(self, *, at: float | None = None, entrance: str = PYTHON) -> list[ToolCall]:
        """Close every open question whose window closed before an answer: the system declines it as
        expired, and the call that asked fails, not run (the model reads why). The calls that failed."""
        now = _now(at)
        failed = []
        for question in [q for q in self.questions.values() if q.is_expired(now)]:
            call = self.tool_call(question.call_id)
            question.expire(by=SYSTEM, at=now)
            call.record_failure(
                f"not run: the question {question.prompt!r} expired: its window closed before the user "
                "answered",
                at=now,
            )
            self._changed(call.id.value)
            self.version += 1
            self._audit(
                call,
                DecisionOutcome.EXPIRED,
                SYSTEM,
                DeciderKind.SYSTEM,
                now,
                "expired",
                question.id,
                entrance=entrance,
            )
            failed.append(call)
        return failed

    def answer_refusal(
        self, question_id: str, reason: str, *, by: str, at: float | None = None, entrance: str = PYTHON
    ) -> DecisionRecord:
        """The record of an answer to `question_id` that was refused (it changed nothing): the caller
        writes it to the audit trail, as no save carries it. `reason` never holds the answer."""
        question = self.questions.get(question_id)
        call = self.tool_calls.get(question.call_id) if question is not None else None
        return DecisionRecord(
            conversation_id=self.id,
            call_id=call.id.value if call is not None else "",
            tool_name=call.name if call is not None else "",
            fingerprint=call.fingerprint if call is not None else "",
            outcome=DecisionOutcome.REFUSED,
            decided_by=by,
            decider=DeciderKind.HUMAN,
            entrance=entrance,
            at=_now(at),
            reason=reason,
            question_id=question_id,
        )

    def answered_questions(self, call_id: str) -> list[Question]:
        """The questions `call_id` asked that were answered, in the order asked."""
        return [
            q for q in self.questions.values() if q.call_id == call_id and q.status is QuestionStatus.ANSWERED
        ]

    # -- tasks ---------------------------------------------------------------------------------

    def open_task(self, *, at: float | None = None, first_message: int | None = None) -> TaskRecord:
        """Start a task with the next message (or with `first_message`, for a run recorded as a task
        once it happened). Its id names this conversation (``<id>~<n>``), so a task is found from its
        id alone."""
        task_id = f"{self.id}~{len(self.tasks) + 1}"
        count = self.message_count
        start = count if first_message is None else first_message
        if not 0 <= start <= count:
            raise DomainError(f"a task cannot start at message {start} of {count}")
        record = TaskRecord(task_id, start, _now(at))
        self.tasks[task_id] = record
        self.version += 1
        return record

    def task(self, task_id: str) -> TaskRecord:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise UnknownTask(task_id) from None

    def end_task(self, task_id: str, outcome: TaskOutcome, note: str = "") -> TaskRecord:
        record = self.task(task_id)
        if record.outcome is not None:
            raise DomainError(f"task {task_id} already ended: {record.outcome.value}")
        record.outcome = outcome
        record.note = note
        self.version += 1
        return record

    # -- state ---------------------------------------------------------------------------------

    def summarize(self, text: str, *, through: int) -> ContextSummary:
        """Keep `text` as the summary of ``messages[:through]``; a summary only ever grows forward."""
        covered = 0 if self.summary is None else self.summary.through
        count = self.message_count
        if not covered < through <= count:
            raise DomainError(f"a summary covers messages {covered + 1} to {count}, not up to {through}")
        self.summary = ContextSummary(MessageContent(text).text, through)
        self.version += 1
        return self.summary

    def move_cut(self, to: int) -> None:
        """Send the model nothing before message `to` any more (a context window without a summary
        dropped them), but for a message holding a call not settled yet; the cut only moves forward."""
        count = self.message_count
        if not self.cut < to < count:
            raise DomainError(f"the cut is at message {self.cut} of {count}: it cannot move to {to}")
        self.cut = to
        self.version += 1

    def retitle(self, title: str | None) -> None:
        """Call the conversation `title` (None: untitled): one line of at most :data:`MAX_TITLE`
        characters, its outer spaces dropped; an empty or longer one is a DomainError."""
        if title is not None:
            title = title.strip()
            if not title or len(title) > MAX_TITLE or "\n" in title or "\r" in title:
                raise DomainError(f"a title is one line of 1 to {MAX_TITLE} characters")
        if title != self.title:
            self.title = title
            self.version += 1

    def replace_session(self, values: dict[str, Any]) -> None:
        if values != self.session:
            self.session = dict(values)
            self.version += 1

    def use_platform_context(self, context: PlatformContext) -> None:
        """The context tools of this turn run with; no change of version: it arrives with each request."""
        self.platform_context = context

    def mark_saved(self) -> None:
        """A store holds this conversation as it is now (it was just loaded or saved)."""
        self.saved_messages = len(self.messages)
        self.changed_calls = set()

    def _changed(self, call_id: str) -> None:
        if self.changed_calls is not None:
            self.changed_calls.add(call_id)


def _now(at: float | None) -> float:
    return time.time() if at is None else at
