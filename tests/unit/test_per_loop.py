"""`PerLoop`: what an object opens per event loop (an asyncio client) is closed with its loop, by
`aclose` or, when nobody called it, as the loop shuts down (a script's `asyncio.run` per call)."""

from __future__ import annotations

import asyncio

from dcaf_like.application.concurrency import PerLoop


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
