"""A blocking call made from the event loop, in a thread: :func:`asyncio.to_thread`'s contract through
threads of our own.

``asyncio.to_thread`` hands each call to the loop's ``ThreadPoolExecutor``, whose submit, work item,
``concurrent.futures.Future`` (with its condition variable) and the callback chaining it back to an
asyncio future are Python code run on every call. A plain ``def`` tool served over HTTP crosses that
twice (there and back) on every run. Here a call is one tuple put on a ``queue.SimpleQueue`` (C), taken
by a waiting thread, and its outcome is set on an asyncio future with ``call_soon_threadsafe``.

What it keeps of ``to_thread`` (pinned by ``tests/unit/concurrency/test_thread_handoff.py``): the caller's
context variables are seen by the call (a copy, as ``to_thread`` gives); its result or its exception
comes back as raised; cancelling the awaiting task does not stop the call (no thread can be stopped),
its outcome is dropped; calls run side by side, up to as many threads as the default executor would
start (``min(32, CPUs + 4)``), then wait in line. Unlike the default executor, nothing waits for these
threads when a loop closes (they are daemons, as the threads of tools with a time limit are already):
a call that never returns cannot hold a server's shutdown. A forked child starts with no thread and
makes its own. Measured by ``benchmarks/thread_handoff.py``; the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: As many threads as ``ThreadPoolExecutor`` starts by default.
MAX_THREADS = min(32, (os.cpu_count() or 1) + 4)

_Job = tuple[
    Callable[..., Any], tuple[Any, ...], dict[str, Any], contextvars.Context, asyncio.AbstractEventLoop, Any
]


class _Threads:
    """The threads that take the calls, started as they are needed (none while no call was made)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        # One item per thread waiting for a call and not yet counted on by one: taken by each call,
        # a new thread is started when there is none (up to MAX_THREADS).
        self._idle: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._count = 0
        self._starting = threading.Lock()

    def submit(self, job: _Job) -> None:
        self.jobs.put(job)
        try:
            self._idle.get_nowait()
        except queue.Empty:
            self._start_one()

    def _start_one(self) -> None:
        with self._starting:
            if self._count >= MAX_THREADS:
                return  # the call waits for a thread to finish the one it runs
            self._count += 1
            name = f"dcaf-blocking-{self._count}"
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        jobs, idle = self.jobs, self._idle
        while True:
            _perform(jobs.get())
            idle.put(None)


def _perform(job: _Job) -> None:
    """Make the call and hand its outcome to the loop (a function of its own: the thread holds none
    of it while it waits for the next)."""
    function, args, kwargs, context, loop, future = job
    try:
        value = context.run(function, *args, **kwargs)
    except BaseException as exc:
        _deliver(loop, _fail, future, exc)
    else:
        _deliver(loop, _succeed, future, value)


def _deliver(
    loop: asyncio.AbstractEventLoop, settle: Callable[[Any, Any], None], future: Any, outcome: Any
) -> None:
    if loop.is_closed():  # nobody waits for the outcome any more
        return
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(settle, future, outcome)


def _succeed(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():  # a cancelled caller dropped it
        future.set_result(value)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


_threads = _Threads()


def _forget_threads() -> None:
    """In a forked child: the parent's threads did not come along."""
    global _threads
    _threads = _Threads()


os.register_at_fork(after_in_child=_forget_threads)


async def in_thread(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``await asyncio.to_thread(function, *args, **kwargs)``, at a fraction of its cost per call."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    _threads.submit((function, args, kwargs, contextvars.copy_context(), loop, future))
    return await future
