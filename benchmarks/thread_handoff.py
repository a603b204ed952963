"""A blocking call made from the event loop, in a thread: `in_thread` beside `asyncio.to_thread`.

    .venv/bin/python benchmarks/thread_handoff.py            # prints a Markdown table
    .venv/bin/python benchmarks/thread_handoff.py --quick    # a few calls: checks that it runs

A plain ``def`` tool served over HTTP, and every call of a store whose client blocks (DynamoDB), is
handed to a thread and back. This times that hand-off alone, for a call that returns at once: the
best of several rounds, microseconds per call, one call awaited after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from dcaf_like.concurrency.threads import in_thread

ROUNDS = 5


def answer() -> str:
    return '{"web-1": "Running"}'


def microseconds(handoff: Callable[..., Awaitable[Any]], calls: int) -> float:
    async def rounds() -> float:
        for _ in range(max(3, calls // 10)):
            await handoff(answer)
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(calls):
                await handoff(answer)
            best = min(best, time.perf_counter() - start)
        return best / calls * 1e6

    return asyncio.run(rounds())


def report(quick: bool) -> tuple[float, float]:
    """µs per call: (in_thread, asyncio.to_thread)."""
    calls = 20 if quick else 5_000
    return microseconds(in_thread, calls), microseconds(asyncio.to_thread, calls)


def markdown(figures: tuple[float, float]) -> str:
    fast, plain = figures
    return "\n".join(
        [
            "| Blocking call from the loop, there and back | µs | plain code | µs |",
            "|---|---|---|---|",
            f"| `thread_handoff.in_thread` | {fast:.1f} | `asyncio.to_thread` | {plain:.1f} |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a few calls: checks that it runs")
    print(markdown(report(parser.parse_args().quick)))


if __name__ == "__main__":
    main()
