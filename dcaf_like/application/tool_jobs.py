"""The worker side of a background tool: :class:`ToolJobs` runs one job at most once, wherever the
job went (this process, or a job engine's worker); :class:`InProcessExecutor` hands jobs to it at once.

The claim in the store decides, not the broker: a job runs only the call its conversation holds
approved and queued with the job's fingerprint, claimed here by a compare-and-set save. A job
delivered twice, replayed by hand, or forged runs nothing (docs/runs.md, "Tools on a job engine").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dcaf_like.application.dto import AgentRequest
from dcaf_like.application.effects import RunTool, ToolOutcome
from dcaf_like.application.errors import ConcurrencyConflict
from dcaf_like.application.executors import LEASED_TO_QUEUE, QUEUE_TTL, ToolExecutor, ToolJob
from dcaf_like.application.ports import (
    CancelSignal,
    ConversationStore,
    ExecutableTool,
    ToolContext,
    ToolOutput,
    acancel_requested,
    cancel_requested,
)
from dcaf_like.application.questions import answers_to, open_question
from dcaf_like.application.tool_execution import CANCEL_POLL, arun_tool, run_tool
from dcaf_like.application.tracing import NoTracer, Span, Tracer
from dcaf_like.concurrency.bridges import at_once
from dcaf_like.domain import CallOutcome, Conversation, Session, ToolCall, ToolCallStatus
from dcaf_like.domain.session import patched

logger = logging.getLogger("dcaf_like.jobs")

#: How a job's failed call ended, by (timed out, not started): as the turn's calls (tool_steps.py).
_FAILED_AS = {(True, False): CallOutcome.TIMEOUT, (False, True): CallOutcome.CANCELLED}
#: The error of a call whose job found the conversation cancelled before its tool started.
NOT_RUN_CANCELLED = "not run: the run was cancelled before it"
#: The error of a call whose conversation moved to another platform context after its approval.
NOT_RUN_CONTEXT_CHANGED = (
    "not run: the conversation's platform context changed after the call was approved in it"
)

#: Times a worker reads and saves again when another writer saved the conversation first.
ATTEMPTS = 5

#: Where a continuation's records say it came from.
JOB_ENTRANCE = "job"

#: A turn of the agent (the service's driver): the request, and whether to use the blocking ports.
Continuation = Callable[[AgentRequest, bool], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How a job ended: ``executed``, ``failed`` (the tool failed, or is not on this worker), ``asked``
    (the tool asked the user before it acted), ``refused`` (it ran nothing: `reason` says why), or
    ``lost`` (the tool ran, but the call was settled by another worker meanwhile: its result was not
    recorded). `continues`: its record settled the last call (or question) the run waited for, so the
    model is owed a turn to read the results; one record at most says so, whatever the workers."""

    outcome: str
    reason: str = ""
    continues: bool = False


class ToolJobs:
    """Runs the jobs of one agent's background tools, at most once each: a job runs only the call its
    conversation holds approved and queued with the job's fingerprint, claimed here by a
    compare-and-set save; its result is recorded the same way, if this worker still holds the call.
    While the tool runs its lease is renewed, as a turn renews it (docs/runs.md, "Claims and leases")."""

    def __init__(
        self,
        repository: ConversationStore,
        tools: Mapping[str, ExecutableTool],
        *,
        worker: str,
        lease_ttl: float,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        tracer: Tracer | None = None,
        deps: Any = None,
        on_outcome: Callable[[JobOutcome], None] | None = None,
        continuation: Continuation | None = None,
        question_ttl: float | None = None,
    ) -> None:
        self.repository, self.tools = repository, dict(tools)
        #: How long a question a job's tool asks stays open, as one asked in a turn (docs/runs.md).
        self.question_ttl = question_ttl
        self.worker, self.lease_ttl = worker, lease_ttl
        self.clock, self.monotonic = clock, monotonic
        self.tracer: Tracer = tracer or NoTracer()
        self.deps = deps
        self.on_outcome = on_outcome
        self.continuation = continuation

    def run(self, job: ToolJob, *, continue_run: bool = False) -> JobOutcome:
        """Run the job with the blocking ports, in this thread; with `continue_run` (a job engine's
        worker), then the turn its result is owed, if this job settled the run's last call."""
        return at_once(self._run(job, blocking=True, continue_run=continue_run))

    async def arun(self, job: ToolJob, *, continue_run: bool = False) -> JobOutcome:
        """Run the job with the async ports (`continue_run`: as :meth:`run`)."""
        return await self._run(job, blocking=False, continue_run=continue_run)

    async def _run(self, job: ToolJob, *, blocking: bool, continue_run: bool) -> JobOutcome:
        outcome = await self._traced(job, blocking)
        if continue_run and outcome.continues:
            await self._continue(job, blocking)
        return outcome

    async def _continue(self, job: ToolJob, blocking: bool) -> None:
        """The turn that lets the model read the results, in this worker, as a client's empty request
        would (docs/runs.md, "Tools on a job engine"): whatever it answers is saved with the
        conversation. A failure is logged; the user's next message goes on from the results."""
        if self.continuation is None:
            return
        conversation = await self._load(job, blocking)
        if conversation is None or job.call_id not in conversation.tool_calls:
            return
        since = conversation.tool_calls[job.call_id].decided_at or 0.0
        if await self._cancelled(job, since, blocking):
            return  # a human stopped the run: the model is not asked again until they write
        request = AgentRequest(
            conversation_id=conversation.id,
            platform_context=dict(conversation.platform_context),
            entrance=JOB_ENTRANCE,
        )
        try:
            await self.continuation(request, blocking)
        except Exception as exc:
            logger.warning(
                "the turn after the job for call %s of conversation %s failed (the next message goes on"
                " from its result): %s: %s",
                job.call_id,
                job.conversation_id,
                type(exc).__name__,
                exc,
            )

    async def _traced(self, job: ToolJob, blocking: bool) -> JobOutcome:
        attributes = {"dcaf.conversation_id": job.conversation_id, "dcaf.call_id": job.call_id}
        span = self.tracer.start("dcaf.job", attributes)
        try:
            outcome = await self._claimed_and_run(job, blocking, span)
            span.set("dcaf.job.outcome", outcome.outcome)  # what the metrics count
        except Exception as exc:
            span.fail(exc)
            raise
        finally:
            span.end()
        if outcome.outcome == "refused":
            logger.warning(
                "job for call %s of conversation %s refused: %s",
                job.call_id,
                job.conversation_id,
                outcome.reason,
            )
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome

    async def _claimed_and_run(self, job: ToolJob, blocking: bool, parent: Span) -> JobOutcome:
        claim = await self._claim(job, blocking)
        if isinstance(claim, JobOutcome):
            return claim
        conversation, call = claim
        # A cancel of the conversation asked since the call was approved reaches its job: before the
        # tool starts, or every half second while it runs, ADR 45 (docs/runs.md, "Tools on a job engine").
        since = call.decided_at or 0.0
        if call.context_fingerprint not in (None, conversation.platform_context.fingerprint):
            # Approved for one cluster or namespace, never run in another (docs/runs.md, "Tools on
            # a job engine"): a later turn may have stored another context while the job waited.
            return await self._record(job, ToolOutcome(error=NOT_RUN_CONTEXT_CHANGED), None, blocking)
        tool = self.tools.get(call.name)
        if tool is None:
            error = f"tool {call.name!r} is not available on the worker that took its job"
            return await self._record(job, ToolOutcome(error=error), None, blocking)
        if await self._cancelled(job, since, blocking):
            return await self._record(
                job, ToolOutcome(error=NOT_RUN_CANCELLED, not_started=True), None, blocking
            )
        claimed_session = dict(conversation.session)
        session = Session(claimed_session)
        context = ToolContext(
            conversation.id, call.id.value, conversation.platform_context, session, None, self.deps
        )
        if conversation.questions:
            context = replace(context, answers=answers_to(conversation, call.id.value))
        signal = context.cancel_signal
        # Every half second a cancel is read, as a turn reads it; every third of the lease it is
        # renewed, with the tool's latest progress report if it changed.
        beat = _Heartbeat(self, job, signal, since)
        context = replace(context, on_progress=beat.report)
        timeout: float | None = getattr(tool, "timeout", None)
        limit = f"the tool's time limit of {timeout:g} s" if timeout is not None else ""
        effect = RunTool(tool, call.effective_input.as_dict(), context, timeout, limit)
        attributes = {"dcaf.tool": tool.name, "dcaf.call_id": call.id.value, "dcaf.job": "background"}
        span = self.tracer.start("dcaf.tool", attributes, parent)
        every = min(CANCEL_POLL, self.lease_ttl / 3)
        if blocking:
            beaten = lambda: at_once(beat(blocking=True))  # noqa: E731
            outcome = run_tool(effect, span, renew=beaten, every=every)
        else:
            beating = lambda: beat(blocking=False)  # noqa: E731
            outcome = await arun_tool(effect, span, renew=beating, every=every, monotonic=self.monotonic)
        return await self._record(job, outcome, (claimed_session, session), blocking)

    async def _claim(self, job: ToolJob, blocking: bool) -> tuple[Conversation, ToolCall] | JobOutcome:
        """The conversation with the call claimed by this worker (saved), or why the job runs nothing."""
        for _ in range(ATTEMPTS):
            conversation = await self._load(job, blocking)
            now = self.clock()
            refusal = _refusal(conversation, job, now)
            if refusal is not None:
                return JobOutcome("refused", refusal)
            assert conversation is not None
            expected = conversation.version
            call = conversation.lease_tool_call(job.call_id, self.worker, until=now + self.lease_ttl)
            try:
                await self._save(conversation, expected, blocking)
            except ConcurrencyConflict:
                continue  # another writer saved first: read again (another worker's claim is refused then)
            return conversation, call
        return JobOutcome("refused", "the conversation kept changing under the claim")

    async def _renew(
        self, job: ToolJob, blocking: bool, *, progress: tuple[str, float | None] | None
    ) -> None:
        """Extend the lease of the call still running, and keep its tool's latest `progress` report on
        it (None: none new since the last renewal), in one save."""

        def renew(conversation: Conversation) -> None:
            conversation.lease_tool_call(job.call_id, self.worker, until=self.clock() + self.lease_ttl)
            if progress is not None:
                conversation.report_progress(job.call_id, *progress)

        await self._change(job, renew, blocking)

    async def _cancelled(self, job: ToolJob, since: float, blocking: bool) -> bool:
        repository = self.repository
        if blocking:
            return cancel_requested(repository, job.conversation_id, since=since)
        return await acancel_requested(repository, job.conversation_id, since=since)

    async def _record(
        self,
        job: ToolJob,
        outcome: ToolOutcome,
        session: tuple[dict[str, Any], Session] | None,
        blocking: bool,
    ) -> JobOutcome:
        kind: list[str] = []
        owed: list[bool] = []

        def record(conversation: Conversation) -> None:
            now = self.clock()
            kind.clear()
            owed.clear()
            if outcome.question is not None:
                open_question(conversation, job.call_id, outcome.question, ttl=self.question_ttl, at=now)
                kind.append("asked")
            elif isinstance(outcome.output, ToolOutput):
                output = outcome.output
                conversation.record_tool_result(
                    job.call_id, output.text, attachments=output.attachments, at=now
                )
                kind.append("executed")
            elif outcome.error is None:
                conversation.record_tool_result(job.call_id, outcome.output or "", at=now)
                kind.append("executed")
            else:  # named as a turn names it: a time limit, a cancel before the tool started, an error
                how = _FAILED_AS.get((outcome.timed_out, outcome.not_started), CallOutcome.ERROR)
                conversation.record_tool_failure(job.call_id, outcome.error, at=now, outcome=how)
                kind.append("failed")
            if session is not None and session[1].changed:  # the tool's changes, over a turn's meanwhile
                claimed, changed = session
                conversation.replace_session(patched(conversation.session, claimed, changed.to_dict()))
            # Saved by one compare-and-set: of two jobs ending at once, only the later sees both settled.
            owed.append(not conversation.unfinished_tool_calls and not conversation.open_questions)

        if not await self._change(job, record, blocking):
            logger.warning(
                "call %s of conversation %s was settled by another worker while its job ran: "
                "its result was not used",
                job.call_id,
                job.conversation_id,
            )
            return JobOutcome("lost", "the call was settled by another worker while its job ran")
        return JobOutcome(kind[0], outcome.error or "", continues=owed[0])

    async def _change(self, job: ToolJob, change: Callable[[Conversation], None], blocking: bool) -> bool:
        """Apply `change` to the stored conversation if this worker still holds the call, and save it,
        reading again when another writer saved first. False: the call is no longer this worker's."""
        for attempt in range(ATTEMPTS):
            conversation = await self._load(job, blocking)
            if conversation is None or job.call_id not in conversation.tool_calls:
                return False
            call = conversation.tool_call(job.call_id)
            if call.status is not ToolCallStatus.APPROVED or call.lease_owner != self.worker:
                return False
            expected = conversation.version
            change(conversation)
            try:
                await self._save(conversation, expected, blocking)
            except ConcurrencyConflict:
                if attempt == ATTEMPTS - 1:
                    raise
                continue
            return True
        raise AssertionError("unreachable")  # pragma: no cover

    async def _load(self, job: ToolJob, blocking: bool) -> Conversation | None:
        if blocking:
            return self.repository.get(job.conversation_id)
        return await self.repository.aget(job.conversation_id)

    async def _save(self, conversation: Conversation, expected: int, blocking: bool) -> None:
        if blocking:
            self.repository.save(conversation, expected)
        else:
            await self.repository.asave(conversation, expected)


class _Heartbeat:
    """What a job's worker does while its tool runs, called every :data:`CANCEL_POLL` seconds (or
    every third of a shorter lease): it reads the store for a cancel asked since the call's approval
    and tells the tool (its context's :attr:`~dcaf_like.application.ports.ToolContext.cancelled`;
    ADR 45: the store's cancel flag, not Celery's revoke); and it renews the call's lease once a
    third of the lease has gone by since the last renewal, that save carrying the tool's latest
    progress report when it changed, so whoever reads the conversation sees it (ADR 46: no save of
    its own, which would make a turn running meanwhile lose its save). Only the latest report is
    kept."""

    def __init__(self, jobs: ToolJobs, job: ToolJob, signal: CancelSignal, since: float) -> None:
        self.jobs, self.job, self.signal, self.since = jobs, job, signal, since
        self.renew_at = jobs.monotonic() + jobs.lease_ttl / 3
        self._lock = threading.Lock()  # the tool reports from its own thread
        self._reported: tuple[str, float | None] | None = None
        self._saved: tuple[str, float | None] | None = None

    def report(self, message: str, fraction: float | None) -> None:
        """The tool's ``context.progress``: kept for the next renewal to save."""
        with self._lock:
            self._reported = (message, fraction)

    async def __call__(self, *, blocking: bool) -> None:
        jobs = self.jobs
        if jobs.monotonic() >= self.renew_at:
            with self._lock:
                reported = self._reported
            progress = reported if reported != self._saved else None
            await jobs._renew(self.job, blocking, progress=progress)
            self._saved = reported
            self.renew_at = jobs.monotonic() + jobs.lease_ttl / 3
        if not self.signal.is_set() and await jobs._cancelled(self.job, self.since, blocking):
            self.signal.set()


def _refusal(conversation: Conversation | None, job: ToolJob, now: float) -> str | None:
    """Why a job must run nothing: it names no call of a stored conversation, or one that is not
    approved and waiting in the queue, as approved (a forged, replayed or redelivered job)."""
    if conversation is None:
        return "no such conversation"
    call = conversation.tool_calls.get(job.call_id)
    if call is None:
        return "the conversation has no such call"
    if call.status is not ToolCallStatus.APPROVED:
        return f"the call is {call.status.value}, not approved"
    if call.approved_fingerprint != job.fingerprint:
        return "the job's fingerprint is not the approved call's"
    if call.lease_owner != LEASED_TO_QUEUE:
        return "the call was already claimed"
    if call.lease_expires_at is None or now >= call.lease_expires_at:
        return "the call waited in the queue past its window"
    return None


class InProcessExecutor:
    """Runs each job at once, in the process that submits it, through the agent's :class:`ToolJobs`
    (the same claim and record as a job engine's worker): ``Agent(executor=InProcessExecutor)``.
    The turn that submits the job waits for it; its response still says the call ran in the
    background, and the next turn reads its result. For tests and single-process deployments."""

    def __init__(self, jobs: ToolJobs, *, queue_ttl: float = QUEUE_TTL) -> None:
        self.jobs, self.queue_ttl = jobs, queue_ttl

    def submit(self, job: ToolJob) -> None:
        self.jobs.run(job)

    async def asubmit(self, job: ToolJob) -> None:
        await self.jobs.arun(job)


def executor_for(
    given: ToolExecutor | Callable[[ToolJobs], ToolExecutor] | None, jobs: ToolJobs
) -> ToolExecutor | None:
    """The agent's executor: as given, or made from its jobs by a factory (``InProcessExecutor``)."""
    if given is None or isinstance(given, ToolExecutor):
        return given
    return given(jobs)


def background_tools(
    tools: Sequence[ExecutableTool], executor: ToolExecutor | None, *, everything: bool
) -> frozenset[str]:
    """The names of the tools whose calls go to the executor; a background tool needs one."""
    names = frozenset(t.name for t in tools if everything or getattr(t, "background", False))
    if names and executor is None:
        listed = ", ".join(sorted(names))
        raise ValueError(f"tools run in the background ({listed}) need an executor: Agent(executor=...)")
    return names
