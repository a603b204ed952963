"""A call, or the items of an iterator, within a time limit: :class:`OutOfTime` once it has passed.

An async call is cancelled there; a blocking one runs in a thread of its own, which cannot be stopped,
so it goes on and what it returns is dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

from dcaf_like.concurrency.bridges import Handed, pump_blocking, received

T = TypeVar("T")


class OutOfTime(Exception):
    """A call went past its time limit (not a TimeoutError of its own: that is the call's failure)."""


async def awithin(awaitable: Awaitable[T], seconds: float) -> T:
    """`awaitable`'s result, or OutOfTime once `seconds` have passed (it is then cancelled)."""
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            return await awaitable
    except TimeoutError:
        if limit.expired():
            raise OutOfTime from None
        raise


async def aiterate_within(iterator: AsyncIterator[T], seconds: float) -> AsyncIterator[T]:
    """`iterator`'s items, or OutOfTime once `seconds` have passed since the first was asked for."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            item = await awithin(anext(iterator), deadline - asyncio.get_running_loop().time())
        except StopAsyncIteration:
            return
        yield item


def within(call: Callable[[], T], seconds: float) -> T:
    """`call()` run in a thread of its own, or OutOfTime once `seconds` have passed (the thread, which
    cannot be stopped, goes on; what it returns is dropped)."""
    outcome: list[tuple[Any, BaseException | None]] = []
    finished = threading.Event()

    def target() -> None:
        try:
            outcome.append((call(), None))
        except BaseException as exc:
            outcome.append((None, exc))
        finished.set()

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(target,), name="dcaf-model-call", daemon=True).start()
    if not finished.wait(seconds):
        raise OutOfTime
    value, error = outcome[0]
    if error is not None:
        raise error
    return value  # type: ignore[no-any-return]


def iterate_within(iterator: Iterator[T], seconds: float) -> Iterator[T]:
    """`iterator`'s items, read in a thread of its own, or OutOfTime once `seconds` have passed."""
    items: queue.SimpleQueue[Handed] = queue.SimpleQueue()
    deadline = time.monotonic() + seconds

    def put(item: Handed) -> bool:
        items.put(item)
        return True

    def get() -> Handed:
        try:
            return items.get(timeout=max(deadline - time.monotonic(), 0))
        except queue.Empty:
            raise OutOfTime from None

    context = contextvars.copy_context()
    threading.Thread(
        target=context.run, args=(pump_blocking, iterator, put), kwargs={"close": False},
        name="dcaf-model-stream", daemon=True,
    ).start()  # fmt: skip
    yield from received(get)
