"""A2A tasks as the server runs them: a message read into the agent's request, a turn run (in the
background when the client does not wait), and a task written in A2A's terms.

What a task is, and every change to one, is the use case's
(:class:`~dcaf_like.application.tasks.TaskLifecycle`): opening, recording, ending and cancelling go
through it, and a task's turn through the agent, with the same server-side checks as HelpDesk's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dcaf_like.application.cancel import CancelRun
from dcaf_like.application.dto import AgentRequest, AgentResponse
from dcaf_like.application.errors import InvalidRequest, MissingScope
from dcaf_like.application.events import Done, RunFailed
from dcaf_like.application.messages import TextDelta
from dcaf_like.application.ports import ConversationStore, ServedAgent
from dcaf_like.application.requests import refuse_unaccepted
from dcaf_like.application.tasks import (
    CANCELED,
    TaskLifecycle,
    TaskState,
    TaskView,
    TaskWorking,
    answered_by_text,
    conversation_of,
)
from dcaf_like.domain import Attachment, TaskOutcome
from dcaf_like.helpdesk.protocol import (
    calls_data,
    question_data,
    read_data,
)
from dcaf_like.server.auth import ANYONE, Caller, authorized
from dcaf_like.server.detached import Runs, ShuttingDown
from dcaf_like.server.errors import http_error
from dcaf_like.server.failures import audit_refused

logger = logging.getLogger("dcaf_like.a2a")

#: Seconds tasks/cancel waits for a working task to stop before answering with it as it is.
CANCEL_WAIT = 5.0


def task_data(view: TaskView) -> dict[str, Any]:
    """The calls of a task in the HelpDesk protocol's form (``data`` of a message), and the questions
    that wait."""
    data = calls_data(view.pending, view.executed, view.rejected)
    data["questions"] = [question_data(q) for q in view.questions]
    return data


def task_dict(view: TaskView) -> dict[str, Any]:
    """A task as the simple endpoints (``/a2a/tasks/...``) answer it."""
    return {
        "id": view.id,
        "context_id": view.context_id,
        "status": view.state.value,
        "text": view.text,
        **task_data(view),
        **({"error": view.note} if view.state is TaskState.FAILED else {}),
    }


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
    decisions, answers = read_data(message.data)
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
    def repository(self) -> ConversationStore:
        """The agent's store at the time of asking (one swapped after the app was built is the one seen)."""
        repository = self.agent.repository
        if repository is None:
            raise TypeError(f"{self.agent.name} no longer keeps conversations")
        return repository

    @property
    def tasks(self) -> TaskLifecycle:
        """The use case every A2A entrance goes through, on the agent's store and clock."""
        return TaskLifecycle(self.repository, self.agent.clock)

    async def get(self, task_id: str, caller: Caller = ANYONE) -> TaskView:
        """The task as stored; another identity's task is not found."""
        return await self.tasks.get(task_id, identity=caller.identity)

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
        waiting = await self.tasks.waiting_task(message.task_id, message.context_id, identity=caller.identity)
        if waiting is not None:
            request = await self._answering(waiting, request, caller)
            return waiting, self._run(waiting, request, new_task=False, deltas=deltas), True
        if request.decisions:
            task_id, first = await self.tasks.next_deciding_task(
                message.context_id, request.decisions, identity=caller.identity
            )
            return (
                task_id,
                self._run(task_id, request, new_task=False, deltas=deltas, record_from=first),
                True,
            )
        runtime = self.agent.runtime
        if runtime is not None:  # refused before the task is stored, as the HelpDesk routes refuse it
            refuse_unaccepted(request.attachments, runtime)
        task_id = await self.tasks.open(
            message.context_id, request.text, request.attachments, identity=caller.identity
        )
        # The user's message is stored with the task, so the task reads as working from the start.
        run = self._run(task_id, replace(request, text="", attachments=()), new_task=True, deltas=deltas)
        return task_id, run, False

    async def cancel(self, task_id: str, *, caller: Caller = ANYONE) -> TaskView:
        """A task waiting for input (or not started) is canceled: its pending calls are rejected and
        never run. A working task is asked to stop, on whichever worker runs it (docs/runs.md); it is
        returned once canceled, or as it is after `CANCEL_WAIT` seconds (a running tool is told
        to stop, docs/runs.md). A finished task cannot be canceled."""
        try:
            return await self.tasks.cancel_waiting(task_id, identity=caller.identity)
        except TaskWorking:
            return await self._stop(task_id, caller)

    # -- internals ----------------------------------------------------------------------------

    async def _stop(self, task_id: str, caller: Caller) -> TaskView:
        cancel = CancelRun(self.repository, self.agent.clock)
        await cancel(conversation_of(task_id), identity=caller.identity, entrance="a2a")
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

    async def _stored(self, task_id: str) -> bool:
        conversation = await self.repository.aget(conversation_of(task_id))
        return conversation is not None and task_id in conversation.tasks

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
        await self.tasks.end(task_id, outcome, note)

    async def _record(self, task_id: str, first_message: int) -> None:
        recorded = await self.tasks.record(task_id, first_message)
        if recorded != task_id:  # another task was opened in the context meanwhile
            logger.warning("task %s was recorded as %s", task_id, recorded)
