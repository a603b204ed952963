"""Store cost per turn: one read and one compare-and-set save of a conversation of N messages.

    .venv/bin/python benchmarks/stores.py [--redis redis://127.0.0.1:6379/14]
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres] [--dynamodb moto|none|URL]

Store only (no model, no HTTP). A turn reads the conversation, adds a question and its answer, and
saves; the read and the save are timed apart. A save writes what changed (ADR 16); the read is whole,
so it still grows with the conversation. PostgreSQL's figures are taken in a table of their own, dropped
afterwards, with the statements of each turn counted (each is one round trip).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

from dcaf_like import (
    ConversationRepository,
    DynamoDBConversationRepository,
    InMemoryConversationRepository,
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


def read_and_save(store: ConversationRepository, messages: int, turns: int) -> tuple[float, float]:
    """Seconds per turn of the read and of the save: each turn reads a stored conversation of `messages`
    messages, adds a question and its answer, and saves (each turn on a conversation of its own, so N
    is the length every turn saw; the seeding is not timed)."""
    ids = []
    for _ in range(turns):
        c = conversation(messages)
        store.save(c, 0)
        ids.append(c.id)
    read = save = 0.0
    for conversation_id in ids:
        start = time.perf_counter()
        loaded = store.get(conversation_id)
        read += time.perf_counter() - start
        assert loaded is not None
        expected = loaded.version
        loaded.add_user_message("and in namespace staging?")
        loaded.add_assistant_message("web-3 is Running; nothing crashes in staging.")
        start = time.perf_counter()
        store.save(loaded, expected)
        save += time.perf_counter() - start
    for conversation_id in ids:
        store.delete(conversation_id)
    return read / turns, save / turns


def per_turn(store: ConversationRepository, messages: int, turns: int) -> float:
    """Seconds per turn (read + compare-and-set save) on a stored conversation of `messages` messages."""
    return sum(read_and_save(store, messages, turns))


POSTGRES_URL = os.environ.get("DCAF_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("DCAF_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")


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
        with suppress(psycopg.Error), psycopg.connect(url, autocommit=True) as db:
            db.execute(
                f"DROP TABLE IF EXISTS {table}, {table}_schema_version, {table}_messages, {table}_calls, "
                f"{table}_decisions, {table}_cancels, {table}_waiting, {table}_grants, {table}_audit_heads, "
                f"{table}_audit_digests CASCADE"
            )


@contextmanager
def dynamodb_store(endpoint: str) -> Iterator[ConversationRepository | None]:
    """The DynamoDB store on `endpoint`, or on moto's emulator started here ('moto'); None for 'none'
    or when moto is not installed. Its figures are the emulator's, not AWS's: a round trip to AWS
    costs milliseconds."""
    server = None
    if endpoint == "none":
        yield None
        return
    if endpoint == "moto":
        try:
            from moto.server import ThreadedMotoServer
        except ImportError:
            yield None
            return
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
    store = DynamoDBConversationRepository(
        f"bench-{uuid.uuid4().hex[:8]}", region="eu-west-1", endpoint_url=endpoint
    )
    store.create_table()
    try:
        yield store
    finally:
        if server is not None:
            server.stop()


def turn_trips(store: CountingPostgres, messages: int) -> int:
    """Statements (round trips) of one turn: the read and the save."""
    c = conversation(messages)
    store.save(c, 0)
    before = store.statements
    loaded = store.get(c.id)
    assert loaded is not None
    loaded.add_user_message("and in namespace staging?")
    store.save(loaded, c.version)
    trips = store.statements - before
    store.delete(c.id)
    return trips


def postgres_markdown(turns: int, url: str = POSTGRES_URL) -> str:
    """`make bench`'s PostgreSQL table: ms and round trips per turn (read + compare-and-set save)."""
    try:
        with postgres_store(url) as store:
            rows = []
            for messages in (10, 100, 1000):
                count = turns if messages < 1000 else max(1, turns // 4)
                trips = turn_trips(store, messages)
                seconds = per_turn(store, messages, count)
                rows.append(f"| {messages} | {seconds * 1000:.2f} | {trips:g} |")
    except Exception as exc:  # a machine without PostgreSQL still gets every other figure
        return f"PostgreSQL per turn: not measured ({type(exc).__name__}: {exc})."
    header = "| Messages | ms per turn (PostgreSQL read + save) | PostgreSQL round trips per turn |"
    return "\n".join([header, "|---|---|---|", *rows])


@contextmanager
def every_store(
    redis_url: str = REDIS_URL, postgres_url: str = POSTGRES_URL, dynamodb: str = "moto"
) -> Iterator[list[tuple[str, ConversationRepository]]]:
    """Every store this machine can reach, each empty: in memory, SQLite (a temporary file), Redis
    (a prefix of its own, its keys deleted afterwards), PostgreSQL (a table of its own, dropped
    afterwards), DynamoDB (`dynamodb`: moto's emulator, an endpoint URL, or 'none'). One that cannot be
    reached is left out."""
    found: list[tuple[str, ConversationRepository]] = [
        ("in memory", InMemoryConversationRepository()),
        ("SQLite", SqliteConversationRepository(Path(tempfile.mkdtemp()) / "bench.sqlite3")),
    ]
    # A store that cannot be reached (no server here, no driver installed) is left out: suppress.
    with ExitStack() as stack:
        prefix = f"bench:{uuid.uuid4().hex[:8]}:"
        with suppress(Exception):
            redis = RedisConversationRepository(redis_url, prefix=prefix)
            redis.ping()
            found.append(("Redis", redis))
            stack.callback(_forget_redis_keys, redis, prefix)
        with suppress(Exception):
            postgres = stack.enter_context(postgres_store(postgres_url))
            postgres.ping()
            found.append(("PostgreSQL", postgres))
        with suppress(Exception):
            dynamo = stack.enter_context(dynamodb_store(dynamodb))
            if dynamo is not None:
                found.append(("DynamoDB (moto)" if dynamodb == "moto" else "DynamoDB", dynamo))
        yield found


def _forget_redis_keys(store: RedisConversationRepository, prefix: str) -> None:
    for key in store._sync.scan_iter(match=f"{prefix}*"):
        store._sync.delete(key)
    store.close()


def markdown(turns: int) -> str:
    """`make bench`'s table of every store: ms of the read and of the save of a turn (a question and its
    answer added) on a conversation of 10, 100 and 1,000 stored messages."""
    rows = []
    with every_store() as found:
        for name, store in found:
            for messages in (10, 100, 1000):
                read, save = read_and_save(store, messages, turns if messages < 1000 else max(1, turns // 4))
                figures = f"{read * 1000:.2f} | {save * 1000:.2f} | {(read + save) * 1000:.2f}"
                rows.append(f"| {name} | {messages} | {figures} |")
    header = "| Store: a turn on N stored messages | N | read, ms | save, ms | ms per turn (read + save) |"
    return "\n".join([header, "|---|---|---|---|---|", *rows])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default=REDIS_URL)
    parser.add_argument("--postgres", default=POSTGRES_URL)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument(
        "--dynamodb", default="moto", help="an endpoint URL, 'moto' (moto's server, if installed) or 'none'"
    )
    args = parser.parse_args()
    columns = ("stored KiB", "read ms", "save ms", "ms/turn", "trips")
    print(f"{'store':16} {'messages':>8} " + " ".join(f"{c:>10}" for c in columns))
    with every_store(args.redis, args.postgres, args.dynamodb) as found:
        for name, store in found:
            for messages in (10, 100, 1000):
                turns = args.turns if messages < 1000 else args.turns // 4
                trips = f"{turn_trips(store, messages)}" if isinstance(store, CountingPostgres) else ""
                read, save = read_and_save(store, messages, turns)
                size = len(encode(conversation(messages)).encode()) / 1024
                figures = f"{size:>10.1f} {read * 1000:>10.2f} {save * 1000:>10.2f}"
                print(f"{name:16} {messages:>8} {figures} {(read + save) * 1000:>10.2f} {trips:>10}")


if __name__ == "__main__":
    main()
