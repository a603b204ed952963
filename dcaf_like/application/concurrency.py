"""Bridges between blocking and asyncio code, so sync and async callers share one implementation."""

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


async def resolve(value: Any) -> Any:
    """`value`, awaited first if it is awaitable (for callbacks that may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


def resolve_sync(value: Any) -> Any:
    if inspect.isawaitable(value):
        return run_sync(value)
    return value


async def iterate_in_thread(iterator: Iterator[T]) -> AsyncIterator[T]:
    """Drive a blocking iterator from a worker thread, handing each item over as soon as it exists. A
    consumer that stops early (or whose event loop closes) stops it after its next item."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    gone = threading.Event()

    def hand_over(kind: str, value: Any) -> bool:
        """Whether someone is still there to take it: False once the consumer stopped or its loop
        closed (then nothing is raised in this thread: nobody would see it)."""
        if gone.is_set():
            return False
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
        except RuntimeError:  # the event loop closed
            return False
        return True

    def pump() -> None:
        try:
            for item in iterator:
                if not hand_over("item", item):
                    break
            else:
                hand_over("end", None)
        except BaseException as exc:
            hand_over("error", exc)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    threading.Thread(target=pump, daemon=True, name="dcaf-like-stream").start()
    try:
        while True:
            kind, value = await queue.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        gone.set()


def iterate_sync(items: AsyncIterator[T]) -> Iterator[T]:
    """Iterate `items` from blocking code: it runs on its own event loop in a worker thread, each item
    handed over as soon as it exists. A consumer that stops early stops it after its next item."""
    handoff: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()

    async def pump() -> None:
        try:
            async for item in items:
                handoff.put(("item", item))
                if stop.is_set():
                    break
        except BaseException as exc:
            handoff.put(("error", exc))
            return
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()
        handoff.put(("end", None))

    threading.Thread(target=asyncio.run, args=(pump(),), daemon=True, name="dcaf-like-iterate").start()
    try:
        while True:
            kind, value = handoff.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        stop.set()


class PerLoop(Generic[T]):
    """What an object opens once per event loop (an asyncio client, a pool: they belong to the loop
    that opened them), closed with its loop: by :meth:`aclose`, or when the loop shuts down if nobody
    called it.

    A server closes its clients at shutdown (``Agent.aclose``); a script calling
    ``asyncio.run(agent.arun(...))`` again and again usually does not, and each run's loop ended with
    the client's connections still open and its tasks cancelled under it. An open async generator is
    closed by the loop's ``shutdown_asyncgens()`` (``asyncio.run`` and uvicorn both call it), on the
    loop: each value is kept with one, parked, that closes the value there."""

    def __init__(self, close: Callable[[T], Awaitable[None]]) -> None:
        self._close = close
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[T, AsyncGenerator[None]]
        ] = weakref.WeakKeyDictionary()

    def get(self) -> T | None:
        """The running loop's value, if it has one."""
        found = self._by_loop.get(asyncio.get_running_loop())
        return None if found is None else found[0]

    def put(self, value: T) -> T:
        """Keep `value` as the running loop's (the first one kept, if another came meanwhile)."""
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is not None:
            return found[0]
        closing = self._closing(loop, value)
        with contextlib.suppress(StopIteration):  # run it to its yield (nothing before waits): open
            closing.asend(None).send(None)
        self._by_loop[loop] = (value, closing)
        return value

    async def aclose(self) -> None:
        """Close the running loop's value now (the next :meth:`put` keeps a new one)."""
        found = self._by_loop.get(asyncio.get_running_loop())
        if found is not None:
            await found[1].aclose()

    async def _closing(self, loop: asyncio.AbstractEventLoop, value: T) -> AsyncGenerator[None]:
        try:
            yield
        finally:
            found = self._by_loop.get(loop)
            if found is not None and found[0] is value:
                del self._by_loop[loop]
            await self._close(value)
