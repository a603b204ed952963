"""Turns the server runs apart from the requests that started them.

A client that goes away (a closed tab, a dropped connection) makes Starlette cancel its request's
task, and with it whatever that task awaits. A turn that has claimed an approval must not stop there:
its tools would be left half run and its outcome unsaved. So each turn runs in a task of its own,
which the request only watches; the server keeps a reference to every such task (so none is garbage
collected mid-run) and waits for them at shutdown (up to a grace period), before it closes the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from typing import Any, TypeVar

from dcaf_like.application.events import StreamEvent

T = TypeVar("T")

logger = logging.getLogger("dcaf_like.http")

#: Seconds a server shutting down waits for the turns under way.
SHUTDOWN_GRACE = 60.0


class Runs:
    """The turns under way on this server."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        # Runs whose request went away: nobody else will hear how they ended.
        self._unwatched: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    async def watch(self, task: asyncio.Task[T]) -> T:
        """`task`'s result; if the caller is cancelled (its client went away), the task goes on."""
        try:
            return await asyncio.shield(task)
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

    async def aclose(self, grace: float = SHUTDOWN_GRACE) -> None:
        """At shutdown: let the runs under way finish and save, for up to `grace` seconds; then stop
        them (each saves what it did; a call it was running is settled as interrupted later)."""
        deadline = asyncio.get_running_loop().time() + grace
        while self._tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                return
            await asyncio.wait(set(self._tasks), timeout=left)


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
