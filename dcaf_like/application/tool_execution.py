"""How a driver runs one tool: within its time limit, renewing the call's lease while it runs.

The turn (:mod:`dcaf_like.application.turn`) decides the limit and leases the call; these functions
only perform the run. A lease is renewed (a save) only by a tool still running after a third of the
lease: a turn whose tools are quick, or that runs none, never pays for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from dcaf_like.application.effects import RunTool, ToolOutcome, timed_out
from dcaf_like.application.errors import scrub_exception
from dcaf_like.application.ports import NoPreview, ToolCancelled, ToolOutput
from dcaf_like.application.questions import UserInputRequired
from dcaf_like.application.tracing import Span
from dcaf_like.application.workers import host_name
from dcaf_like.concurrency.bridges import resolve_sync, run_sync
from dcaf_like.concurrency.ticker import Ticker
from dcaf_like.concurrency.time_limits import OutOfTime, awithin

logger = logging.getLogger("dcaf_like")

#: The error of a call whose tool was stopped by a cancel while it ran (docs/runs.md).
STOPPED_BY_CANCEL = "stopped: the run was cancelled while the tool ran; it may have done part of its work"

#: Seconds (by the agent's clock) between two reads of the store for a cancel request while the model
#: answers or a tool runs (async ports only).
CANCEL_POLL = 0.5

T = TypeVar("T")


async def arun_tool(
    effect: RunTool,
    span: Span,
    *,
    renew: Callable[[], Awaitable[None]],
    every: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> ToolOutcome:
    """Run the tool, calling `renew` every `every` seconds (by `monotonic`) while it runs, and giving
    up on it at ``effect.timeout``: an ``async def`` tool is cancelled; a plain ``def`` tool runs in a
    thread, which cannot be stopped, so its late result is logged and not used."""
    renewal = _LoopRenewal(renew, every, effect, monotonic)
    report = _Report(effect, span)
    try:
        if effect.timeout is None:
            return report.of(ToolOutcome(output=await effect.tool.ainvoke(effect.arguments, effect.context)))
        return report.of(await _alimited(effect))
    except UserInputRequired as asked:  # the tool asks the user before it acts
        return report.of(ToolOutcome(question=asked))
    except ToolCancelled:  # it saw the run's cancel (context.check_cancelled) and stopped there
        return report.of(ToolOutcome(error=STOPPED_BY_CANCEL))
    except Exception as exc:
        _scrub_tool_failure(exc, effect)
        span.fail(exc)
        return report.of(ToolOutcome(error=_describe(exc)), exc)
    finally:
        await renewal.stop()
        report.end()


async def _alimited(effect: RunTool) -> ToolOutcome:
    tool = effect.tool
    if not tool.is_async:
        return await _athread(effect)
    work = asyncio.ensure_future(tool.ainvoke(effect.arguments, effect.context))
    try:
        done, _ = await asyncio.wait((work,), timeout=effect.timeout)
    except asyncio.CancelledError:
        work.cancel()
        raise
    if done:
        return ToolOutcome(output=work.result())
    work.cancel()
    with contextlib.suppress(BaseException):
        await work
    return timed_out(effect, cancelled=True)


async def _athread(effect: RunTool) -> ToolOutcome:
    """A plain ``def`` tool with a time limit, in a daemon thread of its own rather than the loop's
    executor: a thread that never ends must not hold a worker of the pool, nor the loop's shutdown."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[str | ToolOutput] = loop.create_future()
    abandoned: list[bool] = []

    def settle(value: Any, error: BaseException | None) -> None:
        if abandoned or result.done():
            _log_late(effect, error)
        elif error is not None:
            result.set_exception(error)
        else:
            result.set_result(value)

    def target() -> None:
        value, error = _invoked(effect)
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop has closed
            _log_late(effect, error)

    context = contextvars.copy_context()
    name = f"dcaf-tool-{effect.tool.name}"
    threading.Thread(target=context.run, args=(target,), name=name, daemon=True).start()
    try:
        done, _ = await asyncio.wait((result,), timeout=effect.timeout)
    except asyncio.CancelledError:
        abandoned.append(True)
        raise
    if done:
        return ToolOutcome(output=result.result())
    abandoned.append(True)
    return timed_out(effect, cancelled=False)


def _invoked(effect: RunTool) -> tuple[str | ToolOutput | None, BaseException | None]:
    """Run a plain ``def`` tool (in a thread of its own): its result, or what it raised."""
    try:
        return effect.tool.invoke(effect.arguments, effect.context), None
    except BaseException as exc:
        return None, exc


class _Report:
    """How a tool's run ended, said once: the span's ``dcaf.outcome`` (``ok``, ``error``, ``timeout``,
    ``cancelled``, ``interrupted``: what the metrics count) and, for all but ``ok``, one WARNING line an
    operator can start from (tool, call, conversation, worker, error class, duration; never an argument
    or an error's text, which may hold what the tool was given), the traceback at DEBUG."""

    __slots__ = ("effect", "error", "outcome", "span", "started")

    def __init__(self, effect: RunTool, span: Span) -> None:
        self.effect, self.span, self.started = effect, span, time.perf_counter()
        self.outcome: ToolOutcome | None = None
        self.error: BaseException | None = None

    def of(self, outcome: ToolOutcome, error: BaseException | None = None) -> ToolOutcome:
        self.outcome, self.error = outcome, error
        return outcome

    def end(self) -> None:
        seconds = time.perf_counter() - self.started
        kind = self._kind()
        self.span.set("dcaf.outcome", kind)
        self.span.end()
        if kind == "ok":
            return
        context = self.effect.context
        error = type(self.error).__name__ if self.error is not None else kind
        logger.warning(
            "tool %s %s (call=%s conversation=%s worker=%s:%d error=%s seconds=%.3f)",
            self.effect.tool.name,
            kind,
            context.call_id,
            context.conversation_id,
            host_name(),
            os.getpid(),
            error,
            seconds,
        )
        if self.error is not None:
            logger.debug("tool %s failed", self.effect.tool.name, exc_info=self.error)

    def _kind(self) -> str:
        if isinstance(self.error, NoPreview):  # a preview that says why it has none: no fault
            return "ok"
        outcome = self.outcome
        if outcome is None:  # its run was stopped under it: by a human's cancel, or by a shutdown
            return "cancelled" if self.effect.context.cancel_signal.is_set() else "interrupted"
        if outcome.timed_out:
            return "timeout"
        if outcome.error == STOPPED_BY_CANCEL:
            return "cancelled"
        return "error" if outcome.error is not None else "ok"


def _scrub_tool_failure(exc: Exception, effect: RunTool) -> None:
    """A tool's error goes to the model, the response and the store: without the request's credentials
    or the values of the tool's secret arguments (docs/approvals.md, "Secret arguments")."""
    names: frozenset[str] = getattr(effect.tool, "secret_arguments", frozenset())
    secrets = [v for k, v in effect.arguments.items() if k in names and isinstance(v, str)]
    secrets += effect.context.platform_context.secret_values()
    if secrets:
        scrub_exception(exc, secrets)


def run_tool(effect: RunTool, span: Span, *, renew: Callable[[], None], every: float) -> ToolOutcome:
    """The blocking twin of :func:`arun_tool`. The tool runs in the calling thread unless it has a
    time limit and is a plain ``def`` (then in a thread of its own, which cannot be stopped)."""
    tool = effect.tool
    renewal = _KEEPER.every(every, renew, effect)
    report = _Report(effect, span)
    try:
        if effect.timeout is None:
            if tool.is_async:
                output = resolve_sync(tool.ainvoke(effect.arguments, effect.context))
                return report.of(ToolOutcome(output=output))
            return report.of(ToolOutcome(output=tool.invoke(effect.arguments, effect.context)))
        if tool.is_async:
            try:
                limited = awithin(tool.ainvoke(effect.arguments, effect.context), effect.timeout)
                return report.of(ToolOutcome(output=run_sync(limited)))
            except OutOfTime:
                return report.of(timed_out(effect, cancelled=True))
        return report.of(_in_thread(effect))
    except UserInputRequired as asked:
        return report.of(ToolOutcome(question=asked))
    except ToolCancelled:
        return report.of(ToolOutcome(error=STOPPED_BY_CANCEL))
    except Exception as exc:
        _scrub_tool_failure(exc, effect)
        span.fail(exc)
        return report.of(ToolOutcome(error=_describe(exc)), exc)
    finally:
        renewal.stop()
        report.end()


def _in_thread(effect: RunTool) -> ToolOutcome:
    """Run a plain ``def`` tool in a thread of its own, waiting at most ``effect.timeout`` for it."""
    outcome: list[tuple[Any, BaseException | None]] = []
    abandoned: list[bool] = []
    finished = threading.Event()
    lock = threading.Lock()

    def target() -> None:
        value, error = _invoked(effect)
        with lock:
            if abandoned:
                _log_late(effect, error)
                return
            outcome.append((value, error))
            finished.set()

    context = contextvars.copy_context()
    name = f"dcaf-tool-{effect.tool.name}"
    threading.Thread(target=context.run, args=(target,), name=name, daemon=True).start()
    if not finished.wait(effect.timeout):
        with lock:
            if not finished.is_set():
                abandoned.append(True)
                return timed_out(effect, cancelled=False)
    value, error = outcome[0]
    if error is not None:
        raise error
    return ToolOutcome(output=value)


class _LoopRenewal:
    """Renews a lease every `every` seconds on the running event loop, until stopped. It costs no timer
    of its own: the loop's :class:`Ticker` asks it when to renew, by the agent's clock."""

    def __init__(
        self,
        renew: Callable[[], Awaitable[None]],
        every: float,
        effect: RunTool,
        monotonic: Callable[[], float],
    ) -> None:
        self._renew, self._every, self._effect, self._now = renew, every, effect, monotonic
        self._due = monotonic() + every
        self._running: asyncio.Task[None] | None = None
        self._stopped = False
        self._ticker = Ticker.of(asyncio.get_running_loop())
        self._ticker.add(self, every)

    def due(self) -> None:
        """Renew now if `every` has passed since the last renewal (one at a time)."""
        if self._running is None and not self._stopped and self._now() >= self._due:
            self._running = asyncio.get_running_loop().create_task(self._renewing())

    async def _renewing(self) -> None:
        try:
            await self._renew()
        except Exception as exc:  # the tool goes on; its lease may run out (docs/runs.md)
            _renewal_failed(self._effect, exc)
        self._due = self._now() + self._every
        self._running = None

    async def stop(self) -> None:
        """No renewal after this returns: one under way (it reads the conversation) is waited for."""
        self._stopped = True
        self._ticker.discard(self)
        running = self._running
        if running is not None and not running.done():
            await asyncio.shield(running)


class _Job:
    __slots__ = ("due", "effect", "every", "lock", "renew", "stopped")

    def __init__(self, renew: Callable[[], None], every: float, effect: RunTool) -> None:
        self.renew, self.every, self.effect = renew, every, effect
        self.due = time.monotonic() + every
        self.stopped = False
        self.lock = threading.Lock()  # held while renewing: stop() waits for a renewal under way

    def stop(self) -> None:
        with self.lock:
            self.stopped = True

    def is_stopped(self) -> bool:
        return self.stopped


class _Keeper:
    """One daemon thread renewing the leases of tools run with blocking ports.

    A tool costs an append to a queue the thread reads, not a thread, a lock or a wake-up: idle, the
    thread looks at the queue once a second (dropping the jobs of tools that ended), so a quick tool
    never hands it the GIL. Only a lease renewed more often than that wakes it at once."""

    IDLE = 1.0

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._new: deque[_Job] = deque()  # appended to by any thread without a lock
        self._due: list[tuple[float, int, _Job]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def every(self, seconds: float, renew: Callable[[], None], effect: RunTool) -> _Job:
        job = _Job(renew, seconds, effect)
        self._new.append(job)
        if self._thread is None or seconds < self.IDLE:
            with self._ready:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="dcaf-lease-keeper", daemon=True)
                    self._thread.start()
                self._ready.notify()
        return job

    def _next(self) -> _Job:
        """The next job due, once it is due. A job stopped meanwhile is dropped: one stopped before
        the thread saw it (a quick tool) never reaches the heap, so the heap holds running tools only
        rather than every tool of the last period."""
        with self._ready:
            while True:
                while self._new:
                    job = self._new.popleft()
                    if job.stopped:
                        continue
                    heapq.heappush(self._due, (job.due, next(self._order), job))
                while self._due and self._due[0][2].is_stopped():
                    heapq.heappop(self._due)
                now = time.monotonic()
                if self._due and self._due[0][0] <= now:
                    return heapq.heappop(self._due)[2]
                wake_at = min(self._due[0][0], now + self.IDLE) if self._due else now + self.IDLE
                self._ready.wait(wake_at - now)

    def _run(self) -> None:
        while True:
            job = self._next()
            with job.lock:
                if job.is_stopped():  # since it was taken off the heap
                    continue
                try:
                    job.renew()
                except Exception as exc:
                    _renewal_failed(job.effect, exc)
            job.due = time.monotonic() + job.every
            self._new.append(job)


_KEEPER = _Keeper()


def _log_late(effect: RunTool, error: BaseException | None) -> None:
    outcome = "succeeded" if error is None else f"failed ({_describe(error)})"
    logger.warning(
        "tool %s (call %s) %s after its time limit of %g s; its result was not used",
        effect.tool.name,
        effect.context.call_id,
        outcome,
        effect.timeout,
        extra={"call_id": effect.context.call_id, "conversation_id": effect.context.conversation_id},
    )


def _renewal_failed(effect: RunTool, exc: Exception) -> None:
    logger.warning(
        "could not renew the lease of call %s (%s): %s",
        effect.context.call_id,
        effect.tool.name,
        _describe(exc),
        extra={"call_id": effect.context.call_id, "conversation_id": effect.context.conversation_id},
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# -- cancel requests during a model call ------------------------------------------------------------


class RunCancelled(Exception):
    """The turn was asked to stop while it waited for the model."""


class CancelPoll:
    """Asks `check` every `every` seconds (by `monotonic`, the agent clock's), from the first step on,
    whether the turn was cancelled, and interrupts the step under way (:meth:`step`) when it was. The
    polls of one event loop share one timer (:class:`Ticker`): a model call shorter than `every`
    costs no timer and no store read; a longer one reads the store about once per `every`."""

    def __init__(
        self,
        check: Callable[[], Awaitable[bool]],
        every: float,
        on_cancel: Callable[[], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._check, self._every, self._on_cancel, self._now = check, every, on_cancel, monotonic
        self._due = monotonic() + every
        self._asking: asyncio.Task[None] | None = None
        # The tasks in a step now: one for a model call, one per async tool of a batch side by side.
        self._stepping: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._fired = False
        self._ticker = Ticker.of(asyncio.get_running_loop())
        self._ticker.add(self, every)

    def fired(self) -> bool:
        """The turn was found cancelled."""
        return self._fired

    async def step(self, awaitable: Awaitable[T]) -> T:
        """`awaitable`'s result, or RunCancelled (it is then cancelled) if the turn is cancelled first."""
        if self.fired():
            raise RunCancelled
        task = asyncio.current_task()
        if task is not None:
            self._stepping.add(task)
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self.fired() and task is not None and task.uncancel() == 0:
                raise RunCancelled from None
            raise
        finally:
            if task is not None:
                self._stepping.discard(task)

    async def each(self, events: AsyncIterator[T]) -> AsyncIterator[T]:
        """`events`' items, each read as a :meth:`step`."""
        while True:
            try:
                item = await self.step(anext(events))
            except StopAsyncIteration:
                return
            yield item

    def due(self) -> None:
        """Ask `check` now if `every` has passed since the last answer (one question at a time)."""
        if self._asking is None and not self._closed and self._now() >= self._due:
            self._asking = asyncio.get_running_loop().create_task(self._ask())

    async def _ask(self) -> None:
        try:
            cancelled = await self._check()
        except Exception as exc:  # the store could not say: the model call goes on
            logger.warning("could not read cancel requests: %s", _describe(exc))
            cancelled = False
        self._asking = None
        if self._closed:
            return
        if cancelled:
            self._fired = True
            self._ticker.discard(self)
            if self._on_cancel is not None:
                self._on_cancel()
            for task in list(self._stepping):
                task.cancel()
        else:
            self._due = self._now() + self._every

    def close(self) -> None:
        self._closed = True
        self._ticker.discard(self)
        if self._asking is not None and not self._asking.done():
            self._asking.cancel()
