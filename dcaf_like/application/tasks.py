"""A2A tasks over the conversation store: the use case behind every A2A entrance (JSON-RPC 1.0 and
0.3, the ``/a2a/tasks/...`` routes) that opens, records, ends or cancels a task.

A task is a run of messages in a conversation (its context); nothing about it lives in a process:
its state is read from the stored conversation (its messages, their calls, and the conversation's
:class:`~dcaf_like.domain.TaskRecord`), so any worker sharing the store answers for any task. The
rules are those of every other entrance: the conversation must be the caller's
(:meth:`Conversation.is_visible_to`; another identity's task is not found), times come from the
agent's clock, and a user's message is taken as every entrance takes it
(:meth:`Conversation.receive_user_message`). Every change is one load-change-save retried on a lost
race (:func:`changed`). Running a turn is the agent's
(:class:`~dcaf_like.application.service.AgentService`), as on HelpDesk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from dcaf_like.application.dto import QuestionAnswer, QuestionView, ToolCallView, ToolDecision
from dcaf_like.application.errors import ConcurrencyConflict, ConversationNotFound, InvalidRequest
from dcaf_like.application.ports import ConversationStore
from dcaf_like.domain import (
    Attachment,
    Conversation,
    DomainError,
    Identity,
    IllegalTransition,
    Role,
    TaskOutcome,
    ToolCall,
    ToolCallStatus,
    UnknownToolCall,
)

#: The note (and rejection reason) of a canceled task.
CANCELED = "the task was canceled"
#: The entrance named in the records of the decisions a task's cancel makes.
A2A = "a2a"
#: How many times a change is tried when another writer saved the conversation first.
ATTEMPTS = 3


class TaskState(StrEnum):
    """The A2A task states a task is reported in."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        return self in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED)


class TaskNotFound(LookupError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no task {task_id}")


class TaskRefused(ValueError):
    """The task cannot take this message or this cancel in its state."""


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as the store says it is."""

    id: str
    context_id: str
    state: TaskState
    text: str
    pending: tuple[ToolCallView, ...]
    executed: tuple[ToolCallView, ...]
    rejected: tuple[ToolCallView, ...]
    #: Its messages with text or parts: role, text and the images and files a user's carried.
    history: tuple[tuple[str, str, tuple[Attachment, ...]], ...]
    note: str = ""
    #: Questions the task's calls asked that wait for the user's answer.
    questions: tuple[QuestionView, ...] = ()


def task_view(conversation: Conversation, task_id: str) -> TaskView:
    record = conversation.task(task_id)
    order = list(conversation.tasks)
    later = [conversation.tasks[t].first_message for t in order[order.index(task_id) + 1 :]]
    end = min(later, default=len(conversation.messages))
    messages = conversation.messages[record.first_message : end]
    calls = [conversation.tool_calls[i] for m in messages for i in m.tool_call_ids]
    replies = [m for m in messages if m.role is Role.ASSISTANT]
    if record.outcome is not None:
        state = TaskState(record.outcome.value)
    elif any(c.status in _WAITING for c in calls):
        state = TaskState.INPUT_REQUIRED
    elif later or (messages and _answered(messages[-1].role, messages[-1].tool_call_ids)):
        state = TaskState.COMPLETED
    elif not messages:
        state = TaskState.SUBMITTED
    else:
        state = TaskState.WORKING
    views = [ToolCallView.of(c) for c in calls]
    return TaskView(
        id=task_id,
        context_id=conversation.id,
        state=state,
        text=replies[-1].text if replies else "",
        pending=tuple(v for v in views if v.status == ToolCallStatus.PENDING.value),
        executed=tuple(v for v in views if v.status in ("executed", "failed", "interrupted")),
        rejected=tuple(v for v in views if v.status == ToolCallStatus.REJECTED.value),
        history=tuple((m.role.value, m.text, m.attachments) for m in messages if m.text or m.attachments),
        note=record.note,
        questions=_open_questions(conversation, calls),
    )


# A call waiting for the user: for a decision, or for the answer to its question.
_WAITING = (ToolCallStatus.PENDING, ToolCallStatus.ASKING)


def _open_questions(conversation: Conversation, calls: list[ToolCall]) -> tuple[QuestionView, ...]:
    if not conversation.questions:
        return ()
    names = {c.id.value: c.name for c in calls}
    return tuple(
        QuestionView.of(q, names[q.call_id]) for q in conversation.open_questions if q.call_id in names
    )


def _answered(role: Role, call_ids: Sequence[str]) -> bool:
    """The last message is the model's answer with no calls after it: the run is over."""
    return role is Role.ASSISTANT and not call_ids


def answered_by_text(question: QuestionView, text: str) -> QuestionAnswer:
    """A message's text as the answer to the one question its task waits for (A2A: the next message
    answers it): ``yes`` / ``no`` for a confirmation, an option (as written) for a selection."""
    if question.kind == "confirmation":
        said = text.strip().lower()
        if said in ("yes", "y", "true"):
            return QuestionAnswer(question.id, True)
        if said in ("no", "n", "false"):
            return QuestionAnswer(question.id, False)
        raise InvalidRequest("message", f"question {question.id} is answered yes or no")
    if question.kind == "selection":
        return QuestionAnswer(question.id, text.strip())
    return QuestionAnswer(question.id, text)


def conversation_of(task_id: str) -> str:
    """The conversation (context) a task id names: ``<context>~<number>``."""
    conversation_id, sep, number = task_id.rpartition("~")
    if not sep or not number.isdigit() or not conversation_id:
        raise TaskNotFound(task_id)
    return conversation_id


async def changed(
    repository: ConversationStore,
    conversation_id: str,
    change: Callable[[Conversation | None], Conversation | None],
) -> Conversation | None:
    """Load the conversation, apply `change` to it (None: the store holds none), and save what it
    returns (None: nothing to save), expecting the version it read; when another writer saved
    first, all of it again, up to ATTEMPTS times (then ConcurrencyConflict). The conversation as
    saved, or as read when nothing was."""
    for attempt in range(ATTEMPTS):
        stored = await repository.aget(conversation_id)
        expected = stored.version if stored is not None else 0
        changing = change(stored)
        if changing is None:
            return stored
        try:
            await repository.asave(changing, expected)
        except ConcurrencyConflict:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        return changing
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class TaskLifecycle:
    """Opens, reads, records, ends and cancels the tasks of one agent's store. `identity` is who the
    server authenticated (None: a server without keys, which trusts its callers)."""

    repository: ConversationStore
    clock: Callable[[], float]

    async def get(self, task_id: str, *, identity: Identity | None) -> TaskView:
        """The task as stored; another identity's task is not found."""
        conversation = await self.repository.aget(conversation_of(task_id))
        return task_view(_visible(conversation, task_id, identity), task_id)

    async def context(self, context_id: str, *, identity: Identity | None) -> Conversation | None:
        """The conversation of a context, if the store holds one (another identity's is not found)."""
        conversation = await self.repository.aget(context_id)
        if conversation is not None and not conversation.is_visible_to(identity):
            raise ConversationNotFound(context_id)
        return conversation

    async def waiting_task(
        self, task_id: str | None, context_id: str | None, *, identity: Identity | None
    ) -> str | None:
        """The task a message continues: the one it names, which must wait for input, or else the
        task of its context that waits for input. None: the message starts a task."""
        if task_id:
            view = await self.get(task_id, identity=identity)
            if context_id and context_id != view.context_id:
                raise TaskRefused(f"task {task_id} is not in context {context_id}")
            if view.state is not TaskState.INPUT_REQUIRED:
                raise TaskRefused(
                    f"task {task_id} is {view.state.value}: only a task waiting for input takes "
                    "a message; send a new message in its context instead"
                )
            return view.id
        if not context_id:
            return None
        conversation = await self.context(context_id, identity=identity)
        if conversation is None or not conversation.tasks:
            return None
        current = task_view(conversation, next(reversed(conversation.tasks)))
        return current.id if current.state is TaskState.INPUT_REQUIRED else None

    async def next_deciding_task(
        self, context_id: str | None, decisions: Sequence[ToolDecision], *, identity: Identity | None
    ) -> tuple[str, int]:
        """Decisions no task of the context waits for (on calls proposed over HelpDesk, or on none):
        the id the task will have and its first message, once the agent honoured them. Refused here,
        before anything is written, when a call does not wait for a decision."""
        conversation = await self.context(context_id, identity=identity) if context_id else None
        if conversation is None:
            raise UnknownToolCall(decisions[0].call_id, context_id or "(a new context)")
        for decision in decisions:  # the agent would refuse these too; refused here, cheaply
            call = conversation.tool_call(decision.call_id)
            if call.status is not ToolCallStatus.PENDING:
                wanted = ToolCallStatus.APPROVED if decision.approve else ToolCallStatus.REJECTED
                raise IllegalTransition(call.id.value, call.status.value, wanted.value)
        return f"{conversation.id}~{len(conversation.tasks) + 1}", len(conversation.messages)

    async def open(
        self,
        context_id: str | None,
        text: str,
        attachments: tuple[Attachment, ...],
        *,
        identity: Identity | None,
    ) -> str:
        """Open a task in the context (a new conversation when there is none) with the user's
        message, taken as over ``/api/chat`` (calls and questions past their window are closed
        first). The new task's id."""
        opened: list[str] = []

        def open_task(stored: Conversation | None) -> Conversation:
            if stored is not None and not stored.is_visible_to(identity):
                raise ConversationNotFound(stored.id)
            now = self.clock()
            owner = identity.name if identity is not None else None
            conversation = (
                stored if stored is not None else Conversation.start(context_id, at=now, owner=owner)
            )
            opened[:] = [conversation.open_task(at=now).id]
            if text or attachments:
                conversation.receive_user_message(text, attachments=attachments, at=now)
            return conversation

        if context_id is None:  # a new context: nothing to read, nobody to race
            conversation = open_task(None)
            await self.repository.asave(conversation, 0)
            return opened[0]
        await changed(self.repository, context_id, open_task)
        return opened[0]

    async def record(self, task_id: str, first_message: int) -> str:
        """Record the task of a run that already happened, from its first message on (decisions sent
        in a context with no task waiting). The id it was recorded as."""
        recorded = [task_id]

        def record_task(conversation: Conversation | None) -> Conversation | None:
            if conversation is None or task_id in conversation.tasks:
                return None
            recorded[:] = [conversation.open_task(first_message=first_message).id]
            return conversation

        await changed(self.repository, conversation_of(task_id), record_task)
        return recorded[0]

    async def end(self, task_id: str, outcome: TaskOutcome, note: str) -> None:
        """Say how a task's run ended when its messages would not (failed, canceled); a task already
        ended is left as it ended."""

        def end_task(conversation: Conversation | None) -> Conversation | None:
            if conversation is None:
                return None
            try:
                conversation.end_task(task_id, outcome, note)
            except DomainError:
                return None  # already ended
            return conversation

        await changed(self.repository, conversation_of(task_id), end_task)

    async def cancel_waiting(self, task_id: str, *, identity: Identity | None) -> TaskView:
        """Cancel a task waiting for input (or not started): its pending calls are rejected and never
        run, its open questions declined. A working task raises :class:`TaskWorking` (the caller asks
        its run to stop); a finished one is refused."""
        by = identity.name if identity is not None else "user"

        def cancel(conversation: Conversation | None) -> Conversation:
            view = task_view(_visible(conversation, task_id, identity), task_id)
            assert conversation is not None
            if view.state is TaskState.WORKING:
                raise TaskWorking(task_id)
            if view.state not in (TaskState.INPUT_REQUIRED, TaskState.SUBMITTED):
                raise TaskRefused(
                    f"task {task_id} is {view.state.value}; "
                    "only a task waiting for input, or working, can be canceled"
                )
            now = self.clock()
            for call in view.pending:
                conversation.reject_tool_call(call.id, CANCELED, by=by, at=now, entrance=A2A)
            conversation.expire_questions(at=now, entrance=A2A)  # past their window: the system closes them
            for question in view.questions:  # its call fails, not run
                if conversation.question(question.id).is_open:
                    conversation.decline_question(question.id, by=by, at=now, entrance=A2A)
            conversation.end_task(task_id, TaskOutcome.CANCELED, CANCELED)
            return conversation

        try:
            saved = await changed(self.repository, conversation_of(task_id), cancel)
        except ConcurrencyConflict:
            raise TaskRefused(f"task {task_id} kept changing; try again") from None
        assert saved is not None
        return task_view(saved, task_id)


class TaskWorking(Exception):
    """The task's turn is running: a cancel asks it to stop (through
    :class:`~dcaf_like.application.cancel.CancelRun`)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id} is working")


def _visible(conversation: Conversation | None, task_id: str, identity: Identity | None) -> Conversation:
    if conversation is None or task_id not in conversation.tasks or not conversation.is_visible_to(identity):
        raise TaskNotFound(task_id)
    return conversation
