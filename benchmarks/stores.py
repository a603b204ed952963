"""Store cost per turn: one read and one compare-and-set save of a conversation of N messages.

    .venv/bin/python benchmarks/stores.py [--redis redis://127.0.0.1:6379/14]

Store only (no model, no HTTP). Every store rewrites the whole conversation on save, so the cost grows
with its length; this shows by how much.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from dcaf_like import ConversationRepository, RedisConversationRepository, SqliteConversationRepository
from dcaf_like.adapters.serialization import encode
from dcaf_like.domain import Conversation


def conversation(messages: int) -> Conversation:
    c = Conversation.start()
    for _ in range(messages // 2):
        c.add_user_message("please list the pods in namespace prod and tell me which ones crash")
        c.add_assistant_message("web-1 is Running; web-2 is in CrashLoopBackOff since 10:42 (OOMKilled)")
    return c


def per_turn(store: ConversationRepository, messages: int, turns: int) -> float:
    c = conversation(messages)
    store.save(c, 0)
    version = c.version
    start = time.perf_counter()
    for _ in range(turns):
        loaded = store.get(c.id)
        assert loaded is not None
        loaded.version = version + 1
        store.save(loaded, version)
        version += 1
    return (time.perf_counter() - start) / turns


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    stores: list[tuple[str, ConversationRepository]] = [
        ("sqlite", SqliteConversationRepository(Path(tempfile.mkdtemp()) / "bench.sqlite3")),
        ("redis", RedisConversationRepository(args.redis, prefix=f"bench:{uuid.uuid4().hex[:8]}:")),
    ]
    print(f"{'store':8} {'messages':>8} {'stored KiB':>10} {'ms/turn':>8} {'turns/s':>8}")
    for name, store in stores:
        for messages in (10, 100, 1000):
            seconds = per_turn(store, messages, args.turns if messages < 1000 else args.turns // 4)
            size = len(encode(conversation(messages)).encode()) / 1024
            print(f"{name:8} {messages:>8} {size:>10.1f} {seconds * 1000:>8.2f} {1 / seconds:>8.0f}")


if __name__ == "__main__":
    main()
