"""The bridges between blocking and asyncio code that sync and async callers share."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator

import pytest

from dcaf_like.concurrency.bridges import iterate_in_thread, iterate_sync, run_sync


async def counting(limit: int, seen: list[int], closed: threading.Event):
    try:
        for n in range(limit):
            await asyncio.sleep(0)
            seen.append(n)
            yield n
    finally:
        closed.set()


def test_iterate_sync_hands_over_every_item_in_order():
    closed = threading.Event()
    assert list(iterate_sync(counting(5, [], closed))) == [0, 1, 2, 3, 4]
    assert closed.wait(5)


def test_iterate_sync_raises_the_iterators_error_in_the_caller():
    async def failing():
        yield 1
        raise LookupError("the remote went away")

    items = iterate_sync(failing())
    assert next(items) == 1
    with pytest.raises(LookupError, match="went away"):
        next(items)


def test_a_consumer_that_stops_early_closes_the_async_iterator():
    seen: list[int] = []
    closed = threading.Event()
    items = iterate_sync(counting(1_000_000, seen, closed))

    assert next(items) == 0
    items.close()  # what a `for` loop's break does

    assert closed.wait(5)
    assert len(seen) < 1_000_000


async def test_run_sync_and_iterate_in_thread_work_inside_a_running_loop():
    async def answer():
        return 42

    assert run_sync(answer()) == 42  # from a loop's thread: on a loop of its own in another thread
    assert [n async for n in iterate_in_thread(iter(range(3)))] == [0, 1, 2]


def test_a_consumer_that_stops_early_closes_the_blocking_iterator_and_its_thread_raises_nothing():
    produced: list[int] = []
    closed = threading.Event()
    loop_gone = threading.Event()

    def numbers() -> Iterator[int]:
        try:
            for n in itertools.count():
                produced.append(n)
                if n == 1:  # the second item comes once the consumer's loop is gone
                    loop_gone.wait(10)
                yield n
        finally:
            closed.set()

    async def first() -> int:
        async for n in iterate_in_thread(numbers()):
            return n
        raise AssertionError("no item")

    assert asyncio.run(first()) == 0
    loop_gone.set()

    assert closed.wait(10)
    assert produced == [0, 1]


def test_a_portal_closed_before_its_thread_runs_the_loop_stops_the_thread_without_an_error(monkeypatch):
    """A portal closed before its thread began running the loop (an agent built and dropped at once,
    on a loaded machine) stops the thread cleanly: it never runs a loop closed under it. The thread
    here is held back until `close` has been called, as a busy scheduler may hold it."""
    from dcaf_like.concurrency import portal as portals

    closing = threading.Event()

    class Late(threading.Thread):
        def run(self) -> None:
            closing.wait(10)  # until close() was called (a bound for a hang, not a measure)
            super().run()

    monkeypatch.setattr(portals.threading, "Thread", Late)
    failures: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    made = portals.Portal("late")
    original = made.loop.call_soon_threadsafe

    def queued(*args: object) -> object:  # close() reached the loop: let the thread go on
        handle = original(*args)  # type: ignore[arg-type]
        closing.set()
        return handle

    monkeypatch.setattr(made.loop, "call_soon_threadsafe", queued)

    made.close()

    assert not made.thread.is_alive()
    assert made.loop.is_closed()
    assert failures == []
