"""Turns the server runs apart from the requests that started them, and how a server drains them.

A client that goes away (a closed tab, a dropped connection) makes Starlette cancel its request's
task, and with it whatever that task awaits. A turn that has claimed an approval must not stop there:
its tools would be left half run and its outcome unsaved. So each turn runs in a task of its own,
which the request only watches; the server keeps a reference to every such task (so none is garbage
collected mid-run) and waits for them at shutdown (up to a grace period), before it closes the store.

On SIGTERM (what Kubernetes sends before it kills a pod) the server drains first (:func:`drain_on_sigterm`):
it keeps listening, but a new turn gets 503 with ``Retry-After`` and ``/ready`` says 503, so the load
balancer moves traffic elsewhere; the turns under way go on for up to the grace period; then the
server shuts down as uvicorn does, stopping what is still running (a call it was running is settled
as interrupted). A second SIGTERM shuts down at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from typing import Any, TypeVar

from dcaf_like.application.events import StreamEvent
from dcaf_like.application.run_events import RunLog

T = TypeVar("T")

logger = logging.getLogger("dcaf_like.http")

#: Seconds a server shutting down waits for the turns under way (Kubernetes' default
#: terminationGracePeriodSeconds is 30: keep this below it).
SHUTDOWN_GRACE = 25.0

#: Seconds a client refused during a drain is told to wait before it tries again.
RETRY_AFTER = 5


class ShuttingDown(Exception):
    """The server is draining: it takes no new turn (503, ``Retry-After``)."""

    retry_after = RETRY_AFTER


class Runs:
    """The turns under way on this server."""

    def __init__(self, grace: float = SHUTDOWN_GRACE) -> None:
        if grace < 0:
            raise ValueError("shutdown_grace must be zero or more seconds")
        self.grace = grace
        self._tasks: set[asyncio.Task[Any]] = set()
        # Runs whose request went away: nobody else will hear how they ended.
        self._unwatched: set[asyncio.Task[Any]] = set()
        self.draining = False
        self._deadline: float | None = None  # time.monotonic() when a drain stops waiting
        #: The lines of each conversation's latest streamed run, for a client that resumes its stream.
        self.log = RunLog()

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        if self.draining:
            work.close()
            raise ShuttingDown
        return self.keep(work)

    def keep(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run `work`, part of a run already started (its stream's writer), in a task the server waits
        for at shutdown like the run's own, draining or not."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """`work`'s result, from a task of its own: if the caller is cancelled (its client went away),
        the work goes on to its end, and a failure it ends with is logged rather than lost.

        The caller waits on a plain future the task settles (not on the task, which a cancelled
        caller would cancel too, nor through ``asyncio.shield``, which costs a future, two callbacks
        and a turn of the event loop more)."""
        if self.draining:
            work.close()
            raise ShuttingDown
        waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        task = self.start(_settling(work, waiter))
        try:
            return await waiter
        except asyncio.CancelledError:
            if not task.done():
                self._unwatched.add(task)
            raise

    def stream(self, events: AsyncIterator[StreamEvent]) -> AsyncGenerator[StreamEvent]:
        """`events`, produced by a run of their own: the reader may stop reading (or be cancelled)
        and the run still goes to its end, saving what it did."""
        queue: asyncio.Queue[StreamEvent | BaseException | None] = asyncio.Queue()

        async def produce() -> None:
            try:
                async for event in events:
                    queue.put_nowait(event)
            except Exception as exc:
                queue.put_nowait(exc)
                if asyncio.current_task() in self._unwatched:
                    logger.warning("a run whose client had gone away failed: %s: %s", type(exc).__name__, exc)
            except asyncio.CancelledError:
                # Only a shutdown past its grace period stops a run (a client going away does not): its
                # reader ends with an error event, so a cut stream never reads as a finished one.
                queue.put_nowait(ShuttingDown())
                raise
            finally:
                queue.put_nowait(None)

        task = self.start(produce())
        return _read(queue, task, self)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        unwatched = task in self._unwatched
        self._unwatched.discard(task)
        if task.cancelled():
            return
        error = task.exception()  # retrieved, so asyncio does not report it again
        if error is not None and unwatched:
            logger.warning("a run whose client had gone away failed: %s: %s", type(error).__name__, error)

    def open(self) -> None:
        """Take turns (at the app's startup: an app started again after a shutdown takes them again)."""
        self.draining = False
        self._deadline = None

    def begin_drain(self) -> None:
        """Take no new turn from now on; the grace period starts."""
        if not self.draining:
            self.draining = True
            self._deadline = time.monotonic() + self.grace

    async def drained(self) -> None:
        """Return once no run is under way, or the grace period is over."""
        while self._tasks:
            left = (self._deadline or time.monotonic()) - time.monotonic()
            if left <= 0:
                return
            await asyncio.wait(set(self._tasks), timeout=left)

    async def aclose(self) -> None:
        """At shutdown: let the runs under way finish and save, within the grace period (counted from
        the drain's start, if there was one); then stop them (each saves what it did; a call it was
        running is settled as interrupted)."""
        self.begin_drain()
        await self.drained()
        await self.stop()

    async def stop(self) -> None:
        """Cancel the runs still under way, and wait until they have stopped."""
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def drain_on_sigterm(runs: Runs) -> None:
    """From now on, SIGTERM drains `runs` before uvicorn's own handler shuts the server down.

    Called at the app's startup, after uvicorn has put its signal handlers in place (only the main
    thread can; elsewhere, as under a test client, nothing changes). uvicorn puts its own back when
    it stops serving."""
    if threading.current_thread() is not threading.main_thread():
        return
    shut_down = signal.getsignal(signal.SIGTERM)
    if not callable(shut_down):
        return
    loop = asyncio.get_running_loop()
    drainers: set[asyncio.Task[None]] = set()

    def on_sigterm(number: int, frame: Any) -> None:
        if runs.draining:  # a second SIGTERM: no more waiting
            if drainers:  # the grace period is not over: stop the runs now, and the drain goes on
                loop.call_soon_threadsafe(stop_now)
            else:
                shut_down(number, frame)  # uvicorn's own second signal: it exits without waiting
            return
        runs.begin_drain()
        logger.warning(
            "SIGTERM: draining: %d turn(s) under way get up to %g s; new turns are refused (503)",
            len(runs),
            runs.grace,
        )

        async def then_shut_down() -> None:
            await runs.drained()
            # What outlived the grace period stops now: its request ends, so uvicorn, which waits for
            # every request under way before it shuts down, is not held by it.
            await runs.stop()
            shut_down(number, frame)

        def start() -> None:
            drainers.add(task := loop.create_task(then_shut_down()))
            task.add_done_callback(drainers.discard)

        loop.call_soon_threadsafe(start)

    def stop_now() -> None:
        # Each stopped run settles its call and ends its request; the drain then shuts down at once.
        drainers.add(task := loop.create_task(runs.stop()))
        task.add_done_callback(drainers.discard)

    signal.signal(signal.SIGTERM, on_sigterm)


async def _settling(work: Coroutine[Any, Any, T], waiter: asyncio.Future[T]) -> T:
    """Run `work` and hand its outcome to `waiter`, unless whoever waited on it has gone."""
    try:
        result = await work
    except asyncio.CancelledError:
        # Only a shutdown past its grace period cancels a run: whoever waits is told so (503), as a
        # stream's reader is, not handed a cancellation that answers 500.
        if not waiter.done():
            waiter.set_exception(ShuttingDown())
        raise
    except BaseException as exc:
        if not waiter.done():
            waiter.set_exception(exc)
        raise
    if not waiter.done():
        waiter.set_result(result)
    return result


async def _read(
    queue: asyncio.Queue[StreamEvent | BaseException | None], task: asyncio.Task[None], runs: Runs
) -> AsyncGenerator[StreamEvent]:
    finished = False
    try:
        while True:
            item = await queue.get()
            if item is None:
                finished = True
                return
            if isinstance(item, BaseException):
                finished = True
                raise item
            yield item
    finally:
        if not finished and not task.done():
            runs._unwatched.add(task)
