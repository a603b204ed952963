"""Running an approved call for a turn: under a lease renewed while it runs (so no other worker settles
it), its span, a cancel that reaches it (async ports), and its progress reports streamed as they come;
or, for a background tool, its job handed to the agent's executor once the turn is saved."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from dcaf_like.application.effects import Enqueue, RunTool, RunTools, ToolOutcome, ToolOutcomes
from dcaf_like.application.errors import ConcurrencyConflict
from dcaf_like.application.events import CancelRequested, ToolProgress
from dcaf_like.application.executors import LEASED_TO_QUEUE, ToolExecutor, ToolJob
from dcaf_like.application.ports import ConversationStore, acancel_requested
from dcaf_like.application.run_state import TurnRun
from dcaf_like.application.tool_execution import (
    CANCEL_POLL,
    STOPPED_BY_CANCEL,
    CancelPoll,
    RunCancelled,
    arun_tool,
    run_tool,
)
from dcaf_like.application.tracing import Tracer
from dcaf_like.concurrency.bridges import at_once
from dcaf_like.domain import Conversation, ToolCallStatus
from dcaf_like.domain.conversation import STOPPED_WHILE_RUNNING

logger = logging.getLogger("dcaf_like.jobs")


class ToolRuns:
    """The tool runs of one agent's turns. `save` saves a run's conversation (a lease renewal)."""

    def __init__(
        self,
        repository: ConversationStore,
        tracer: Tracer,
        save: Callable[[TurnRun], Awaitable[None]],
        *,
        worker: str,
        lease_ttl: float,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        executor: ToolExecutor | None = None,
    ) -> None:
        self.repository, self.tracer, self.save = repository, tracer, save
        self.worker, self.lease_ttl = worker, lease_ttl
        self.clock, self.monotonic = clock, monotonic
        #: Where the calls of background tools go (docs/runs.md, "Tools on a job engine").
        self.executor = executor

    async def enqueue(self, effect: Enqueue, run: TurnRun) -> None:
        """Keep the job of a call the turn queued: it is handed over after the turn's last save."""
        run.jobs.append(effect.job)

    async def hand_over(self, run: TurnRun) -> None:
        """Hand the turn's queued jobs to the executor (the conversation is saved). A job that cannot
        be handed over fails its call, not run, in the store: the next turn reads why."""
        jobs, run.jobs = run.jobs, []
        for job in jobs:
            try:
                if self.executor is None:
                    raise RuntimeError("the agent has no executor")
                if run.blocking:
                    self.executor.submit(job)
                else:
                    await self.executor.asubmit(job)
            except Exception as exc:
                why = type(exc).__name__
                logger.warning("the job of call %s could not be queued: %s", job.call_id, why)
                await self._not_queued(job, f"not run: its job could not be queued ({why})", run.blocking)

    async def _not_queued(self, job: ToolJob, error: str, blocking: bool) -> None:
        """Fail a queued call whose job never left, unless a worker took it meanwhile."""
        repository = self.repository
        for _ in range(3):
            stored = (
                repository.get(job.conversation_id)
                if blocking
                else await repository.aget(job.conversation_id)
            )
            call = None if stored is None else stored.tool_calls.get(job.call_id)
            if (
                call is None
                or call.status is not ToolCallStatus.APPROVED
                or call.lease_owner != LEASED_TO_QUEUE
            ):
                return
            assert stored is not None
            expected = stored.version
            stored.record_tool_failure(job.call_id, error, at=self.clock())
            try:
                await _save(repository, stored, expected, blocking)
            except ConcurrencyConflict:
                continue
            return

    async def run(self, effect: RunTool, run: TurnRun, poll: CancelPoll | None = None) -> ToolOutcome:
        """Run one tool. Served, a cancel asked meanwhile reaches it through `poll`, the batch's when
        it runs side by side (one store read per half second for the batch), else one of its own."""
        attributes = {"dcaf.tool": effect.tool.name, "dcaf.call_id": effect.context.call_id}
        span = self.tracer.start("dcaf.tool", attributes, run.span)
        call_id, every = effect.context.call_id, self.lease_ttl / 3

        async def renew() -> None:
            """Extend the lease of the call still running, and save it (so no other worker settles it).
            A preview's call waits, unleased: nothing to extend. Tools side by side renew one at a time
            (each save expects the version of the last)."""
            if run.renewing is None:
                await extend()
                return
            async with run.renewing:
                await extend()

        async def extend() -> None:
            if run.conversation.tool_call(call_id).status is not ToolCallStatus.APPROVED:
                return
            run.conversation.lease_tool_call(call_id, self.worker, until=self.clock() + self.lease_ttl)
            await self.save(run)

        if run.blocking:
            return run_tool(effect, span, renew=lambda: at_once(renew()), every=every)
        # A cancel asked while the tool runs reaches it (docs/runs.md, "Stopping a running tool"): an
        # async def tool is cancelled; a def tool, which no one can stop from outside, sees its
        # context's cancel signal and may stop at its next check.
        own = poll is None
        if poll is None:
            poll = self._cancel_poll(run, [effect])
        running = arun_tool(effect, span, renew=renew, every=every, monotonic=self.monotonic)
        try:
            return await (poll.step(running) if effect.tool.is_async else running)
        except RunCancelled:
            return ToolOutcome(error=STOPPED_BY_CANCEL)
        except asyncio.CancelledError:
            # The task of this turn was stopped (a server shutting down past its grace period): the
            # call is settled now, in the save the driver makes on its way out, not when its lease ends.
            if run.conversation.tool_call(call_id).status is ToolCallStatus.APPROVED:  # not a preview's
                run.conversation.interrupt_tool_call(call_id, STOPPED_WHILE_RUNNING, at=self.clock())
            raise
        finally:
            if own:
                poll.close()

    def _cancel_poll(self, run: TurnRun, effects: list[RunTool]) -> CancelPoll:
        """Reads the store for a cancel of the run while its tools run: once seen, each `async def`
        tool stepping through it is cancelled, and each tool's cancel signal is set (a plain ``def``
        tool, which no one can stop from outside, sees it at its next check)."""
        conversation_id, since, repository = run.conversation.id, run.started, self.repository
        signals = [effect.context.cancel_signal for effect in effects]

        def on_cancel() -> None:
            for signal in signals:
                signal.set()
            run.cancel_seen()

        return CancelPoll(
            lambda: acancel_requested(repository, conversation_id, since=since),
            CANCEL_POLL,
            on_cancel=on_cancel,
            monotonic=self.monotonic,
        )

    async def run_all(self, effect: RunTools, run: TurnRun) -> ToolOutcomes:
        """Run tools side by side, at most ``effect.most`` at a time: each under its own lease, span,
        time limit and cancel poll, as :meth:`run` runs one; served, ``async def`` tools on the loop and
        plain ``def`` ones on threads; blocking, each on a thread of its own (docs/runs.md, "Tools side
        by side"). A tool that fails is its own outcome and stops none of the others; a cancel reaches
        each of them. Their outcomes come back in the order of ``effect.runs``."""
        if run.blocking:
            return self._run_all_blocking(effect, run)
        run.renewing = asyncio.Lock()
        slots = asyncio.Semaphore(effect.most)
        poll = self._cancel_poll(run, effect.runs)

        async def one(each: RunTool) -> ToolOutcome:
            async with slots:
                if poll.fired():  # cancelled while it waited for a slot: it never starts
                    return ToolOutcome(not_started=True)
                started = time.perf_counter()
                outcome = await self.run(each, run, poll)
            outcome.ran_for = time.perf_counter() - started
            return outcome

        runs = [asyncio.ensure_future(one(each)) for each in effect.runs]
        try:
            await asyncio.wait(runs)
        except asyncio.CancelledError:
            # The turn's task is stopped (a shutdown): every sibling is stopped and settles its call
            # before the driver's last save.
            for each in runs:
                each.cancel()
            await asyncio.wait(runs)
            raise
        finally:
            run.renewing = None
            poll.close()
        return ToolOutcomes([each.result() for each in runs])

    def _run_all_blocking(self, effect: RunTools, run: TurnRun) -> ToolOutcomes:
        """The blocking twin of :meth:`run_all`: the calling thread waits for threads that run the
        tools (a lease renewal comes from the one thread that renews them all, one at a time)."""

        def one(each: RunTool) -> ToolOutcome:
            started = time.perf_counter()
            outcome = at_once(self.run(each, run))
            outcome.ran_for = time.perf_counter() - started
            return outcome

        workers = min(effect.most, len(effect.runs))
        with ThreadPoolExecutor(workers, thread_name_prefix="dcaf-tools") as pool:
            # Each tool sees the turn's context variables, as a tool run in the calling thread does.
            runs = [pool.submit(contextvars.copy_context().run, one, each) for each in effect.runs]
            return ToolOutcomes([each.result() for each in runs])

    def run_reporting(
        self, effect: RunTool | RunTools, run: TurnRun
    ) -> AsyncGenerator[ToolProgress | CancelRequested | ToolOutcome | ToolOutcomes, None]:
        """Run a tool, or tools side by side, yielding their progress reports as ToolProgress events
        as they come (from any thread) and a cancel's acknowledgement as soon as it is seen, then the
        ToolOutcome (ToolOutcomes side by side)."""
        if isinstance(effect, RunTool):
            return self._reporting([effect], run, lambda: self.run(effect, run))
        return self._reporting(effect.runs, run, lambda: self.run_all(effect, run))

    async def _reporting(
        self,
        effects: list[RunTool],
        run: TurnRun,
        running_of: Callable[[], Awaitable[ToolOutcome | ToolOutcomes]],
    ) -> AsyncGenerator[ToolProgress | CancelRequested | ToolOutcome | ToolOutcomes, None]:
        loop = asyncio.get_running_loop()
        reports: asyncio.Queue[ToolProgress | CancelRequested] = asyncio.Queue()

        def reporter(call_id: str, name: str) -> Callable[[str, float | None], None]:
            def report(message: str, fraction: float | None) -> None:
                event = ToolProgress(call_id, name, message, fraction)
                try:
                    if asyncio.get_running_loop() is loop:
                        reports.put_nowait(event)
                        return
                except RuntimeError:  # no loop in this thread: a tool in a worker thread
                    pass
                loop.call_soon_threadsafe(reports.put_nowait, event)

            return report

        def acknowledge() -> None:  # the cancel poll saw a cancel while the tool runs: say so at once
            if (ack := run.acknowledge_cancel()) is not None:
                reports.put_nowait(ack)

        for effect in effects:
            report = reporter(effect.context.call_id, effect.tool.name)
            effect.context = replace(effect.context, on_progress=report)
        run.on_cancel_seen = acknowledge
        running = asyncio.ensure_future(running_of())
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
            run.on_cancel_seen = None
            if not running.done():
                # Stopped (a shutdown past its grace period): the tool's run settles its call before
                # the driver's last save, so the save carries it (not left approved under its lease).
                running.cancel()
                await asyncio.wait({running})
        yield running.result()


async def _save(
    repository: ConversationStore, conversation: Conversation, expected: int, blocking: bool
) -> None:
    if blocking:
        repository.save(conversation, expected)
    else:
        await repository.asave(conversation, expected)
