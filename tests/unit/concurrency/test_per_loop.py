"""`PerLoop`: what an object opens per event loop (an asyncio client) is closed with its loop, by
`aclose` or, when nobody called it, as the loop shuts down (a script's `asyncio.run` per call)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

from dcaf_like.concurrency.bridges import PerLoop


class Client:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = 0


async def close(client: Client) -> None:
    await asyncio.sleep(0)  # closing takes the loop, as a real client's does
    client.closed += 1


def test_a_loop_that_ends_without_aclose_closes_its_value_once():
    clients = PerLoop(close)
    opened = []

    async def call(n: int) -> Client:
        client = clients.get() or clients.put(Client(f"c{n}"))
        opened.append(client)
        return client

    first = asyncio.run(call(1))
    second = asyncio.run(call(2))

    assert first is not second  # each loop had its own
    assert (first.closed, second.closed) == (1, 1)


def test_aclose_closes_now_and_the_next_value_is_not_closed_by_the_old_ones_closing():
    clients = PerLoop(close)

    async def main() -> tuple[Client, Client, int, int]:
        old = clients.put(Client("old"))
        await clients.aclose()
        new = clients.put(Client("new"))
        for _ in range(3):
            await asyncio.sleep(0)  # whatever the old one's closing scheduled has run
        return old, new, old.closed, new.closed

    old, new, old_closed, new_closed = asyncio.run(main())

    assert (old_closed, new_closed) == (1, 0)
    assert new.closed == 1  # then with its loop
    assert old.closed == 1


def test_the_first_value_kept_for_a_loop_stays_its_value():
    clients = PerLoop(close)

    async def main() -> tuple[bool, bool]:
        first = clients.put(Client("first"))
        second = Client("second")
        return clients.put(second) is first, clients.get() is first

    assert asyncio.run(main()) == (True, True)


def test_a_value_whose_own_task_swallows_a_cancel_is_closed_as_the_loop_ends_and_the_loop_ends():
    """As a psycopg pool's worker does: cancelled while it connects, it catches the cancellation (to
    keep its pool consistent) and waits on its queue again; only the pool's close stops it. Closed after
    the loop cancelled its tasks (at shutdown_asyncgens), asyncio.run waited for it forever."""

    class Pool:
        def __init__(self) -> None:
            self.tasks: asyncio.Queue[str] = asyncio.Queue()
            self.worker = asyncio.get_running_loop().create_task(self.work())
            self.closed = False

        async def work(self) -> None:
            while await self.tasks.get() != "stop":
                # connecting, never done; a cancel is caught ("make sure we don't die in the attempt")
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.get_running_loop().create_future()

        async def close(self) -> None:
            self.closed = True
            self.tasks.put_nowait("stop")

    async def close_pool(pool: Pool) -> None:
        await pool.close()

    pools = PerLoop(close_pool)
    made: list[Pool] = []

    async def request() -> None:
        pool = pools.put(Pool())
        made.append(pool)
        pool.tasks.put_nowait("connect")
        await asyncio.sleep(0)  # the worker is now connecting

    ended = threading.Event()
    thread = threading.Thread(target=lambda: (asyncio.run(request()), ended.set()), daemon=True)
    thread.start()
    thread.join(timeout=30)  # a bound for a hang, not a speed: it ends in milliseconds

    assert ended.is_set(), "asyncio.run never ended: the pool's worker was left waiting"
    assert made[0].closed
    assert made[0].worker.done()


def test_a_value_kept_while_the_loop_cancels_its_tasks_is_still_closed_with_the_loop():
    """A turn's last save, made as its task is cancelled, may open the loop's client then."""
    clients = PerLoop(close)
    late: list[Client] = []

    async def turn() -> None:
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            late.append(clients.put(Client("late")))

    async def main() -> None:
        asyncio.get_running_loop().create_task(turn())
        await asyncio.sleep(0)

    asyncio.run(main())

    assert late[0].closed == 1


def test_a_failure_to_close_is_raised_by_aclose():
    async def failing(client: Client) -> None:
        raise ConnectionError("the server went away")

    clients = PerLoop(failing)

    async def main() -> None:
        clients.put(Client("c"))
        await clients.aclose()

    with pytest.raises(ConnectionError, match="went away"):
        asyncio.run(main())
