"""A2A tasks over the conversation store: a task is a run of messages in a conversation (its context).

Nothing about a task lives in this process: its state is read from the stored conversation (its
messages, their tool calls, and the conversation's :class:`~dcaf_like.domain.TaskRecord`), so any
worker sharing the store answers for any task. Decisions on pending calls go through the agent like
the HelpDesk protocol's, with the same server-side checks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from dcaf_like.application.dto import AgentRequest, AgentResponse, QuestionAnswer, QuestionView, ToolCallView
from dcaf_like.application.errors import (
    ConcurrencyConflict,
    ConversationNotFound,
    InvalidRequest,
    MissingScope,
)
from dcaf_like.application.events import Done, RunFailed
from dcaf_like.application.messages import TextDelta
from dcaf_like.application.ports import ConversationRepository, ServedAgent
from dcaf_like.application.service import refuse_unaccepted
from dcaf_like.domain import (
    Attachment,
    Conversation,
    DomainError,
    IllegalTransition,
    Role,
    TaskOutcome,
    TaskRecord,
    ToolCall,
    ToolCallStatus,
    UnknownToolCall,
)
from dcaf_like.helpdesk.protocol import (
    calls_data,
    question_data,
    read_answers,
    read_command_decisions,
    read_decisions,
)
from dcaf_like.server.auth import ANYONE, Caller, authorized
from dcaf_like.server.errors import http_error
from dcaf_like.server.failures import audit_refused
from dcaf_like.server.runs import Runs, ShuttingDown

logger = logging.getLogger("dcaf_like.a2a")

CANCELED = "the task was canceled"
#: Seconds tasks/cancel waits for a working task to stop before answering with it as it is.
CANCEL_WAIT = 5.0


class TaskState(StrEnum):
    """The A2A task states this server reports."""

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

    def data(self) -> dict[str, Any]:
        """The calls of the task in the HelpDesk protocol's form (``data`` of a message), and the
        questions that wait."""
        data = calls_data(self.pending, self.executed, self.rejected)
        data["questions"] = [question_data(q) for q in self.questions]
        return data

    def to_dict(self) -> dict[str, Any]:
        """The task as the simple endpoints (``/a2a/tasks/...``) answer it."""
        return {
            "id": self.id,
            "context_id": self.context_id,
            "status": self.state.value,
            "text": self.text,
            **self.data(),
            **({"error": self.note} if self.state is TaskState.FAILED else {}),
        }


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


def _answered(role: Role, call_ids: Sequence[str]) -> bool:
    """The last message is the model's answer with no calls after it: the run is over."""
    return role is Role.ASSISTANT and not call_ids


def _platform_context(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The platform context a message's data part carries (``{"platform_context": {...}}``), as a
    HelpDesk message carries it: the tools run in it, and a decision is checked against it."""
    context = data.get("platform_context")
    if context is not None and not isinstance(context, Mapping):
        raise InvalidRequest("data.platform_context", "expected an object")
    return context or {}


def agent_request(message: Incoming, caller: Caller, at: float | None = None) -> AgentRequest:
    """The turn a message asks for: its text, and the decisions its data carries in the HelpDesk
    protocol's form (``{"tool_calls": [{"id": ..., "execute": true}]}``), as `caller` may ask it."""
    decisions = read_decisions(message.data.get("tool_calls"), "data.tool_calls")
    decisions += read_command_decisions(message.data.get("cmds"), "data.cmds")
    answers = read_answers(message.data.get("answers"), "data.answers")
    request = AgentRequest(
        text=message.text,
        attachments=message.attachments,
        decisions=decisions,
        answers=answers,
        platform_context=dict(_platform_context(message.data)),
        user=caller.name,
        conversation_id=message.context_id or (conversation_of(message.task_id) if message.task_id else None),
    )
    return authorized(request, caller, "a2a", at)


def conversation_of(task_id: str) -> str:
    conversation_id, sep, number = task_id.rpartition("~")
    if not sep or not number.isdigit() or not conversation_id:
        raise TaskNotFound(task_id)
    return conversation_id


@dataclass(frozen=True, slots=True)
class Incoming:
    """An A2A message reduced to what the agent needs: text, HelpDesk ``data`` (decisions), and the
    images and files its file parts carry."""

    text: str
    data: Mapping[str, Any]
    task_id: str | None = None
    context_id: str | None = None
    attachments: tuple[Attachment, ...] = ()


class A2ATasks:
    """Starts, resumes, reads and cancels tasks of one agent. Background runs are kept referenced
    here until they finish."""

    def __init__(self, agent: ServedAgent, runs: Runs | None = None) -> None:
        self.runs = runs  # the server's turns: while it drains, no task starts or resumes
        if agent.repository is None:
            raise TypeError(
                "a2a=True needs an Agent that keeps conversations (A2A tasks live in its store); "
                f"{type(agent).__name__} keeps none"
            )
        self.agent = agent
        self._running: set[asyncio.Future[None]] = set()

    @property
    def repository(self) -> ConversationRepository:
        """The agent's store at the time of asking (one swapped after the app was built is the one seen)."""
        repository = self.agent.repository
        if repository is None:
            raise TypeError(f"{self.agent.name} no longer keeps conversations")
        return repository

    async def get(self, task_id: str, caller: Caller = ANYONE) -> TaskView:
        """The task as stored; another identity's task is not found."""
        conversation = await self.repository.aget(conversation_of(task_id))
        if conversation is None or task_id not in conversation.tasks or not caller.sees(conversation):
            raise TaskNotFound(task_id)
        return task_view(conversation, task_id)

    async def send(self, message: Incoming, *, caller: Caller = ANYONE, wait: bool = True) -> TaskView:
        """Resume the task `message` names (or its context's task waiting for input) with the
        decisions it carries, or start a task with it. With `wait` False the run goes on in the
        background and the task is returned as it is then (a refused decision then leaves the task
        waiting, as it was)."""
        task_id, run, resumes = await self.begin(message, caller=caller)
        if wait or (resumes and not await self._stored(task_id)):  # decisions recorded once they ran
            await run
        else:
            self.in_background(run, task_id)
        return await self.get(task_id, caller)

    def in_background(self, run: Coroutine[Any, Any, None], task_id: str) -> asyncio.Future[None]:
        """Run on, whatever becomes of the request that started it (its state is in the store)."""
        background = asyncio.ensure_future(self._in_background(run, task_id))
        self._running.add(background)
        background.add_done_callback(self._running.discard)
        return background

    async def aclose(self, grace: float = 30.0) -> None:
        """At shutdown: let runs in progress finish (and save), for up to `grace` seconds."""
        if self._running:
            _, late = await asyncio.wait(set(self._running), timeout=grace)
            for run in late:
                run.cancel()

    async def begin(
        self, message: Incoming, *, caller: Caller = ANYONE, deltas: asyncio.Queue[str] | None = None
    ) -> tuple[str, Coroutine[Any, Any, None], bool]:
        """The task `message` goes to (opened if it starts one), its run, not yet started, and
        whether the message resumes a waiting task (its decisions are refused or not by the run).
        With `deltas`, the run streams and puts the model's text there as it comes."""
        if self.runs is not None and self.runs.draining:
            raise ShuttingDown
        # Read and authorized before anything is stored: a malformed or forbidden message changes nothing.
        try:
            request = agent_request(message, caller, self.agent.clock())
        except MissingScope as refusal:
            await audit_refused(self.agent, refusal)
            raise
        waiting = await self._waiting_task(message, caller)
        if waiting is not None:
            request = await self._answering(waiting, request, caller)
            return waiting, self._run(waiting, request, new_task=False, deltas=deltas), True
        if request.decisions:
            return await self._begin_deciding(message.context_id, request, caller, deltas)
        runtime = self.agent.runtime
        if runtime is not None:  # refused before the task is stored, as the HelpDesk routes refuse it
            refuse_unaccepted(request.attachments, runtime)
        task_id = await self._open(message.context_id, request.text, request.attachments, caller)
        # The user's message is stored with the task, so the task reads as working from the start.
        run = self._run(task_id, replace(request, text="", attachments=()), new_task=True, deltas=deltas)
        return task_id, run, False

    async def cancel(self, task_id: str, *, caller: Caller = ANYONE) -> TaskView:
        """A task waiting for input (or not started) is canceled: its pending calls are rejected and
        never run. A working task is asked to stop, on whichever worker runs it (docs/runs.md); it is
        returned once canceled, or as it is after `CANCEL_WAIT` seconds (a running tool is told
        to stop, docs/runs.md). A finished task cannot be canceled."""
        for _ in range(3):
            conversation = await self.repository.aget(conversation_of(task_id))
            if conversation is None or task_id not in conversation.tasks or not caller.sees(conversation):
                raise TaskNotFound(task_id)
            view = task_view(conversation, task_id)
            if view.state is TaskState.WORKING:
                return await self._stop(task_id, caller)
            if view.state not in (TaskState.INPUT_REQUIRED, TaskState.SUBMITTED):
                raise TaskRefused(
                    f"task {task_id} is {view.state.value}; "
                    "only a task waiting for input, or working, can be canceled"
                )
            expected = conversation.version
            conversation.entrance = "a2a"
            now = self.agent.clock()  # the time the agent's windows are measured by
            for call in view.pending:
                conversation.reject_tool_call(call.id, CANCELED, by=caller.name, at=now)
            conversation.expire_questions(at=now)  # past their window: the system closes them
            for question in view.questions:  # its call fails, not run
                if conversation.question(question.id).is_open:
                    conversation.decline_question(question.id, by=caller.name, at=now)
            conversation.end_task(task_id, TaskOutcome.CANCELED, CANCELED)
            try:
                await self.repository.asave(conversation, expected)
            except ConcurrencyConflict:
                continue
            return task_view(conversation, task_id)
        raise TaskRefused(f"task {task_id} kept changing; try again")

    # -- internals ----------------------------------------------------------------------------

    async def _stop(self, task_id: str, caller: Caller) -> TaskView:
        await self.repository.arequest_cancel(conversation_of(task_id), at=self.agent.clock())
        deadline = time.monotonic() + CANCEL_WAIT
        view = await self.get(task_id, caller)
        while view.state is TaskState.WORKING and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            view = await self.get(task_id, caller)
        return view

    async def _answering(self, task_id: str, request: AgentRequest, caller: Caller) -> AgentRequest:
        """A message to a task waiting on one question, with text and nothing else, answers it."""
        if request.answers or request.decisions or request.attachments or not request.text:
            return request
        view = await self.get(task_id, caller)
        if len(view.questions) != 1:
            return request
        return replace(request, text="", answers=(answered_by_text(view.questions[0], request.text),))

    async def _waiting_task(self, message: Incoming, caller: Caller) -> str | None:
        """The task a message continues: the one it names, which must wait for input, or else the
        task of its context that waits for input. None: the message starts a task."""
        if message.task_id:
            view = await self.get(message.task_id, caller)
            if message.context_id and message.context_id != view.context_id:
                raise TaskRefused(f"task {message.task_id} is not in context {message.context_id}")
            if view.state is not TaskState.INPUT_REQUIRED:
                raise TaskRefused(
                    f"task {message.task_id} is {view.state.value}: only a task waiting for input takes "
                    "a message; send a new message in its context instead"
                )
            return view.id
        if not message.context_id:
            return None
        conversation = await self.repository.aget(message.context_id)
        if conversation is not None and not caller.sees(conversation):
            raise ConversationNotFound(message.context_id)  # another identity's context
        if conversation is None or not conversation.tasks:
            return None
        current = task_view(conversation, next(reversed(conversation.tasks)))
        return current.id if current.state is TaskState.INPUT_REQUIRED else None

    async def _begin_deciding(
        self,
        context_id: str | None,
        request: AgentRequest,
        caller: Caller,
        deltas: asyncio.Queue[str] | None,
    ) -> tuple[str, Coroutine[Any, Any, None], bool]:
        """Decisions no task of the context waits for: on calls proposed over the HelpDesk routes, or
        on none at all. Nothing is written before the agent has honoured them, so a refused decision
        leaves the conversation as it was; honoured, the run is recorded as the context's next task."""
        conversation = await self.repository.aget(context_id) if context_id else None
        if conversation is not None and not caller.sees(conversation):
            raise ConversationNotFound(conversation.id)  # another identity's: as if it did not exist
        if conversation is None:
            raise UnknownToolCall(request.decisions[0].call_id, context_id or "(a new context)")
        for decision in request.decisions:  # the agent would refuse these too; refused here, cheaply
            call = conversation.tool_call(decision.call_id)
            if call.status is not ToolCallStatus.PENDING:
                wanted = ToolCallStatus.APPROVED if decision.approve else ToolCallStatus.REJECTED
                raise IllegalTransition(call.id.value, call.status.value, wanted.value)
        task_id = f"{conversation.id}~{len(conversation.tasks) + 1}"
        first = len(conversation.messages)
        return task_id, self._run(task_id, request, new_task=False, deltas=deltas, record_from=first), True

    async def _stored(self, task_id: str) -> bool:
        conversation = await self.repository.aget(conversation_of(task_id))
        return conversation is not None and task_id in conversation.tasks

    async def _record(self, task_id: str, first_message: int) -> None:
        """The task of a run that already happened, from its first message on."""
        for _ in range(3):
            conversation = await self.repository.aget(conversation_of(task_id))
            if conversation is None or task_id in conversation.tasks:
                return
            expected = conversation.version
            record = conversation.open_task(first_message=first_message)
            if record.id != task_id:  # another task was opened in the context meanwhile
                logger.warning("task %s was recorded as %s", task_id, record.id)
            try:
                await self.repository.asave(conversation, expected)
            except ConcurrencyConflict:
                continue
            return

    async def _open(
        self, conversation_id: str | None, text: str, attachments: tuple[Attachment, ...], caller: Caller
    ) -> str:
        for _ in range(3):
            stored = await self.repository.aget(conversation_id) if conversation_id else None
            if stored is not None and not caller.sees(stored):
                raise ConversationNotFound(stored.id)
            now = self.agent.clock()  # the time the agent's windows are measured by
            conversation = (
                stored
                if stored is not None
                else Conversation.start(conversation_id, at=now, owner=caller.owner)
            )
            expected = stored.version if stored is not None else 0
            record: TaskRecord = conversation.open_task(at=now)
            if text or attachments:  # as over /api/chat: expired calls and questions are closed first
                conversation.receive_user_message(text, attachments=attachments, at=now)
            try:
                await self.repository.asave(conversation, expected)
            except ConcurrencyConflict:
                continue
            return record.id
        raise TaskRefused("the context kept changing; try again")

    async def _run(
        self,
        task_id: str,
        request: AgentRequest,
        *,
        new_task: bool,
        deltas: asyncio.Queue[str] | None,
        record_from: int | None = None,
    ) -> None:
        """One turn of the agent on the task's conversation. A refused decision on a waiting task
        changes nothing and is raised; any other failure also ends the task as failed. With
        `record_from`, the task is not stored yet: once the turn did something (a refused decision
        does nothing), it is recorded from that message on."""
        request = replace(request, conversation_id=conversation_of(task_id), session=None, history=())
        try:
            if deltas is None:
                response = await self.agent.ahandle(request)
            else:
                response = await self._streamed(request, deltas)
        except Exception as exc:
            error = http_error(exc)
            if error.is_client_error and not new_task:
                raise
            if record_from is not None:
                await self._record(task_id, record_from)
            logger.warning("task %s failed: %s: %s", task_id, error.code, error.message)
            await self._fail(task_id, error.message)
            if error.is_client_error:
                raise
            return
        if record_from is not None:
            await self._record(task_id, record_from)
        # The messages would read as still working: say how the run ended.
        if response.stop_reason == "max_iterations":
            await self._fail(task_id, "the agent stopped at its max_iterations without an answer")
        elif response.stop_reason == "turn_timeout":
            await self._fail(task_id, "the agent's turn ran out of time (its turn_timeout)")
        elif response.stop_reason == "cancelled":
            await self._fail(task_id, CANCELED, TaskOutcome.CANCELED)

    async def _streamed(self, request: AgentRequest, deltas: asyncio.Queue[str]) -> AgentResponse:
        async for event in self.agent.ahandle_stream(request):
            if isinstance(event, TextDelta):
                deltas.put_nowait(event.text)
            elif isinstance(event, Done):
                return event.response
            elif isinstance(event, RunFailed):
                raise event.exception or RuntimeError(event.error)
        raise RuntimeError("the agent's stream ended without an answer")

    async def _in_background(self, run: Awaitable[None], task_id: str) -> None:
        try:
            await run
        except Exception as exc:  # the client is gone; the task's state says what happened
            logger.info("task %s: %s: %s", task_id, type(exc).__name__, exc)

    async def _fail(self, task_id: str, note: str, outcome: TaskOutcome = TaskOutcome.FAILED) -> None:
        for _ in range(3):
            conversation = await self.repository.aget(conversation_of(task_id))
            if conversation is None:
                return
            expected = conversation.version
            try:
                conversation.end_task(task_id, outcome, note)
                await self.repository.asave(conversation, expected)
            except ConcurrencyConflict:
                continue
            except DomainError:
                return  # already ended
            return
