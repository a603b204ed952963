"""Bridges between blocking and asyncio code, so sync and async callers share one implementation.

Items cross from one thread or event loop to another one way: the producer side (:func:`pump`, or
:func:`pump_blocking` for a blocking iterator) puts ``("item", x)`` for each item, then ``("end",
None)`` or ``("error", exc)``, and the consumer side (:func:`received`, :func:`areceived`) yields the
items and raises the error. :func:`iterate_in_thread`, :func:`iterate_sync`, the
:class:`~dcaf_like.concurrency.portal.Portal` and the time-limited iterators are made of them."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import queue
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def run_sync(awaitable: Awaitable[T]) -> T:
    """Wait for `awaitable` from blocking code, even when the calling thread runs an event loop."""

    async def wrap() -> T:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wrap())
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(wrap()))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name="dcaf-like-run-sync")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def at_once(awaitable: Awaitable[T]) -> T:
    """The result of an awaitable that never waits: a use case's blocking form performs its I/O in
    place, so its coroutine finishes on its first step. One that would wait is a bug, and says so."""
    steps = awaitable.__await__()
    try:
        steps.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    steps.close()
    raise RuntimeError("the blocking driver awaited something that waits for an event loop")


def at_once_each(items: AsyncGenerator[T, None]) -> Iterator[T]:
    """The items of an async generator that never waits, for blocking code (see :func:`at_once`).
    Left early, it is closed at once, so its ``finally`` blocks (a turn's save) run then."""
    try:
        while True:
            yield at_once(anext(items))
    except StopAsyncIteration:
        return
    finally:
        at_once(items.aclose())


async def resolve(value: Any) -> Any:
    """`value`, awaited first if it is awaitable (for callbacks that may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


def resolve_sync(value: Any) -> Any:
    if inspect.isawaitable(value):
        return run_sync(value)
    return value


Handed = tuple[str, Any]
"""What crosses: ``("item", x)``, then ``("end", None)`` or ``("error", exc)``."""


async def pump(
    items: AsyncIterator[T], put: Callable[[Handed], Any], stop: threading.Event | None = None
) -> None:
    """Hand `items` over with `put`, closing them at the end; stop after the item during which `stop`
    was set (the consumer went away)."""
    try:
        async for item in items:
            put(("item", item))
            if stop is not None and stop.is_set():
                break
    except BaseException as exc:
        put(("error", exc))
        return
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
    put(("end", None))


def pump_blocking(iterator: Iterator[T], put: Callable[[Handed], bool], *, close: bool = True) -> None:
    """Hand a blocking iterator's items over with `put`, which says whether someone still takes them
    (False: stop after this item); `close` the iterator at the end."""
    try:
        for item in iterator:
            if not put(("item", item)):
                break
        else:
            put(("end", None))
    except BaseException as exc:
        put(("error", exc))
    finally:
        closing = getattr(iterator, "close", None) if close else None
        if closing is not None:
            closing()


def received(get: Callable[[], Handed]) -> Iterator[Any]:
    """The items handed over, read with a blocking `get`; the error raised."""
    while True:
        kind, value = get()
        if kind == "item":
            yield value
        elif kind == "error":
            raise value
        else:
            return


async def areceived(get: Callable[[], Awaitable[Handed]]) -> AsyncIterator[Any]:
    """The items handed over, read with an awaited `get`; the error raised."""
    while True:
        kind, value = await get()
        if kind == "item":
            yield value
        elif kind == "error":
            raise value
        else:
            return


async def iterate_in_thread(iterator: Iterator[T]) -> AsyncIterator[T]:
    """Drive a blocking iterator from a worker thread, handing each item over as soon as it exists. A
    consumer that stops early (or whose event loop closes) stops it after its next item."""
    loop = asyncio.get_running_loop()
    handoff: asyncio.Queue[Handed] = asyncio.Queue()
    gone = threading.Event()

    def hand_over(item: Handed) -> bool:
        """Whether someone is still there to take it: False once the consumer stopped or its loop
        closed (then nothing is raised in this thread: nobody would see it)."""
        if gone.is_set():
            return False
        try:
            loop.call_soon_threadsafe(handoff.put_nowait, item)
        except RuntimeError:  # the event loop closed
            return False
        return True

    threading.Thread(
        target=pump_blocking, args=(iterator, hand_over), daemon=True, name="dcaf-like-stream"
    ).start()
    try:
        async for item in areceived(handoff.get):
            yield item
    finally:
        gone.set()


def iterate_sync(items: AsyncIterator[T]) -> Iterator[T]:
    """Iterate `items` from blocking code: it runs on its own event loop in a worker thread, each item
    handed over as soon as it exists. A consumer that stops early stops it after its next item."""
    handoff: queue.Queue[Handed] = queue.Queue()
    stop = threading.Event()
    threading.Thread(
        target=asyncio.run, args=(pump(items, handoff.put, stop),), daemon=True, name="dcaf-like-iterate"
    ).start()
    try:
        yield from received(handoff.get)
    finally:
        stop.set()


class PerLoop(Generic[T]):
    """What an object opens once per event loop (an asyncio client, a pool: they belong to the loop
    that opened them), closed with its loop: by :meth:`aclose`, or as the loop ends if nobody called it.

    A server closes its clients at shutdown (``Agent.aclose``); a script calling
    ``asyncio.run(agent.arun(...))`` again and again usually does not. Each value is kept by a task of
    its own, a keeper, that waits to be cancelled and then closes the value. ``asyncio.run`` (and so
    uvicorn) cancels every task of its loop before it closes the loop, so the value is closed while
    the tasks it runs itself are being cancelled, not after. That order matters: a psycopg pool's
    worker that is cancelled in the middle of opening a connection swallows the cancellation (to keep
    the pool consistent) and waits on its queue again, and only the pool's ``close()`` stops it; closed
    any later, ``asyncio.run`` waited for that worker forever (ADR 29).

    A keeper started while the loop was already cancelling its tasks (a turn's last save, opening a
    pool as its task is cancelled) is not cancelled with them: a parked async generator, which the
    loop's ``shutdown_asyncgens()`` closes next, stops it there."""

    def __init__(self, close: Callable[[T], Awaitable[None]]) -> None:
        self._close = close
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Kept[T]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T | None:
        """The running loop's value, if it has one."""
        found = self._by_loop.get(asyncio.get_running_loop())
        return None if found is None else found.value

    def put(self, value: T) -> T:
        """Keep `value` as the running loop's (the first one kept, if another came meanwhile)."""
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is not None:
            return found.value
        kept = _Kept(value, loop.create_future())
        kept.keeper = loop.create_task(self._keep(loop, kept), name="dcaf-like-per-loop-keeper")
        kept.fallback = self._at_shutdown(loop, kept)
        with contextlib.suppress(StopIteration):  # run it to its yield (nothing before waits): parked
            kept.fallback.asend(None).send(None)
        self._by_loop[loop] = kept
        return value

    async def aclose(self) -> None:
        """Close the running loop's value now (the next :meth:`put` keeps a new one); a failure to
        close it is raised here."""
        found = self._by_loop.get(asyncio.get_running_loop())
        if found is None:
            return
        if not found.stop.done():
            found.stop.set_result(None)
        await asyncio.wait({found.keeper})
        if not found.keeper.cancelled() and (error := found.keeper.exception()) is not None:
            raise error

    async def _keep(self, loop: asyncio.AbstractEventLoop, kept: _Kept[T]) -> None:
        try:
            await kept.stop  # set by aclose; else the keeper ends by being cancelled with its loop
        finally:
            await self._release(loop, kept)

    async def _at_shutdown(self, loop: asyncio.AbstractEventLoop, kept: _Kept[T]) -> AsyncGenerator[None]:
        try:
            yield
        finally:
            if not kept.keeper.done():
                kept.keeper.cancel()
                await asyncio.wait({kept.keeper})
            await self._release(loop, kept)  # a keeper cancelled before it ever ran closed nothing

    async def _release(self, loop: asyncio.AbstractEventLoop, kept: _Kept[T]) -> None:
        if kept.released:
            return
        kept.released = True
        if self._by_loop.get(loop) is kept:
            del self._by_loop[loop]
        await self._close(kept.value)


class _Kept(Generic[T]):
    """A value of :class:`PerLoop`, its keeper task and the parked generator that stops the keeper."""

    keeper: asyncio.Task[None]
    fallback: AsyncGenerator[None]

    def __init__(self, value: T, stop: asyncio.Future[None]) -> None:
        self.value = value
        self.stop = stop
        self.released = False
