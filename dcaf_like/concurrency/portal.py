"""An event loop in a thread of its own, for asyncio clients that must always run on the loop they were
made on (ADK's model clients, MCP sessions), whoever calls them: blocking code or another event loop."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from dcaf_like.concurrency.bridges import Handed, areceived, pump, received

T = TypeVar("T")


class Portal:
    """An event loop running in a thread of its own, and ways to run coroutines and async iterators
    on it from blocking code or from another event loop."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def arun(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        handoff: queue.Queue[Handed] = queue.Queue()
        asyncio.run_coroutine_threadsafe(pump(items, handoff.put), self.loop)
        yield from received(handoff.get)

    async def aiterate(self, items: AsyncIterator[T]) -> AsyncIterator[T]:
        caller = asyncio.get_running_loop()
        handoff: asyncio.Queue[Handed] = asyncio.Queue()

        def put(item: Handed) -> None:
            caller.call_soon_threadsafe(handoff.put_nowait, item)

        asyncio.run_coroutine_threadsafe(pump(items, put), self.loop)
        async for item in areceived(handoff.get):
            yield item

    def close(self) -> None:
        """Stop the loop, wait for its thread, close it. The stop is queued even if the thread has not
        begun running the loop yet (a portal closed as soon as made): it stops at once when it does,
        instead of running a loop closed under it."""
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
        if not self.loop.is_closed() and not self.loop.is_running():
            self.loop.close()
