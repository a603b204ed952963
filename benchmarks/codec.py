"""The stored forms of a conversation: µs to write and read its JSON text, and the in-memory store's save
and read, for conversations of N messages (questions, approved tool calls with results, answers).

    .venv/bin/python benchmarks/codec.py [--rounds 2000]

No I/O: this is the cost every persistent store pays on each save (encode) and read (decode) on top
of its round trips, and all the in-memory store costs. Each figure is the best of five runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from growth import conversation

from dcaf_like import InMemoryConversationRepository
from dcaf_like.stores._codec import decode, encode


def best_us(work: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            work()
        best = min(best, (time.perf_counter() - start) / rounds)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    columns = ("encode µs", "decode µs", "memory save µs", "memory get µs")
    print(f"{'messages':>8} {'KiB':>6} " + " ".join(f"{c:>14}" for c in columns))
    for messages in (10, 100, 1000):
        c = conversation(messages)
        text = encode(c)
        store = InMemoryConversationRepository()
        store.save(c, 0)
        rounds = max(1, args.rounds * 10 // messages)

        def save_again(c=c, store=store) -> None:  # type: ignore[no-untyped-def]
            store.delete(c.id)
            store.save(c, 0)

        figures = (
            best_us(lambda c=c: encode(c), rounds),  # type: ignore[misc]
            best_us(lambda text=text, c=c: decode(text, c.id), rounds),  # type: ignore[misc]
            best_us(save_again, rounds),
            best_us(lambda c=c, store=store: store.get(c.id), rounds),  # type: ignore[misc]
        )
        size = len(text.encode()) / 1024
        print(f"{messages:>8} {size:>6.1f} " + " ".join(f"{f:>14.1f}" for f in figures))


if __name__ == "__main__":
    main()
