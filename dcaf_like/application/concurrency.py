"""Bridges between blocking and asyncio code, so sync and async callers share one implementation."""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

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
