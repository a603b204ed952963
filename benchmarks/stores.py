"""Store cost per turn: one read and one compare-and-set save of a conversation of N messages.

    .venv/bin/python benchmarks/stores.py [--redis redis://127.0.0.1:6379/14]
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

Store only (no model, no HTTP). Every store rewrites the whole conversation on save, so the cost grows
with its length; this shows by how much. PostgreSQL's figures are taken in a table of their own, dropped
afterwards, with the statements of each turn counted (each is one round trip).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dcaf_like import (
    ConversationRepository,
    PostgresConversationRepository,
    RedisConversationRepository,
    SqliteConversationRepository,
)
from dcaf_like.domain import Conversation
from dcaf_like.stores._codec import encode


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


POSTGRES_URL = os.environ.get("DCAF_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


class CountingPostgres(PostgresConversationRepository):
    """The PostgreSQL store, counting its statements: in autocommit each is one round trip."""

    statements = 0

    def _run(self, db: Any, sql: str, params: Any) -> Any:
        self.statements += 1
        return super()._run(db, sql, params)


@contextmanager
def postgres_store(url: str = POSTGRES_URL) -> Iterator[CountingPostgres]:
    """The store in a table of its own, dropped afterwards."""
    import psycopg

    table = f"bench_{uuid.uuid4().hex[:8]}"
    store = CountingPostgres(url, table=table)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f"DROP TABLE IF EXISTS {table}, {table}_schema_version")


def postgres_markdown(turns: int, url: str = POSTGRES_URL) -> str:
    """`make bench`'s PostgreSQL table: ms and round trips per turn (read + compare-and-set save)."""
    try:
        with postgres_store(url) as store:
            rows = []
            for messages in (10, 100, 1000):
                before = store.statements
                count = turns if messages < 1000 else max(1, turns // 4)
                seconds = per_turn(store, messages, count)
                trips = (store.statements - before - 1) / count  # less the save that stored it first
                rows.append(f"| {messages} | {seconds * 1000:.2f} | {trips:g} |")
    except Exception as exc:  # a machine without PostgreSQL still gets every other figure
        return f"PostgreSQL per turn: not measured ({type(exc).__name__}: {exc})."
    header = "| Messages | ms per turn (PostgreSQL read + save) | PostgreSQL round trips per turn |"
    return "\n".join([header, "|---|---|---|", *rows])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--postgres", default=POSTGRES_URL)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    stores: list[tuple[str, ConversationRepository]] = [
        ("sqlite", SqliteConversationRepository(Path(tempfile.mkdtemp()) / "bench.sqlite3")),
        ("redis", RedisConversationRepository(args.redis, prefix=f"bench:{uuid.uuid4().hex[:8]}:")),
    ]
    print(f"{'store':8} {'messages':>8} {'stored KiB':>10} {'ms/turn':>8} {'turns/s':>8} {'trips':>5}")
    with postgres_store(args.postgres) as postgres:
        for name, store in [*stores, ("postgres", postgres)]:
            for messages in (10, 100, 1000):
                before = postgres.statements
                turns = args.turns if messages < 1000 else args.turns // 4
                seconds = per_turn(store, messages, turns)
                size = len(encode(conversation(messages)).encode()) / 1024
                trips = f"{(postgres.statements - before - 1) / turns:g}" if store is postgres else ""
                figures = f"{size:>10.1f} {seconds * 1000:>8.2f} {1 / seconds:>8.0f} {trips:>5}"
                print(f"{name:8} {messages:>8} {figures}")


if __name__ == "__main__":
    main()
