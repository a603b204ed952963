"""A script that calls ``asyncio.run(...)`` once per request, as many users' scripts do, against each
client dcaf_like opens per event loop: the PostgreSQL store's pool, the Redis store's client and the
OpenAI-compatible runtime's HTTP client. Each run's loop must end (no hang) and leave no connection
open (PostgreSQL's ``pg_stat_activity``, Redis's ``CLIENT LIST``, the stub's open sockets).

    python scripts/loop_per_call.py --runs 500            # every kind
    python scripts/loop_per_call.py --runs 500 --kind postgres

Run two copies at once beside ``stress --cpu 2`` to load the machine as a full test suite does.
It exits 1 naming the kind and the run that hung or leaked. The test suite runs a bounded version
(tests/integration/test_loop_per_call.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

HANG_SECONDS = 30.0
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/15"


def run_once(call: Callable[[], Any], timeout: float = HANG_SECONDS) -> bool:
    """``asyncio.run(call())`` in a thread of its own: False when its loop did not end in `timeout`."""
    done = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(call())
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, daemon=True, name="loop-per-call").start()
    if not done.wait(timeout):
        return False
    if failure:
        raise failure[0]
    return True


def postgres_connections(url: str, application_name: str, settle: float = 5.0) -> int:
    """The server's backends still serving `application_name`. A backend leaves pg_stat_activity
    shortly after its client closed the socket, so a count above zero is read again for up to
    `settle` seconds before it is believed."""
    import psycopg

    deadline = time.monotonic() + settle
    with psycopg.connect(url, autocommit=True) as db:
        while True:
            row = db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
            ).fetchone()
            count = int(row[0]) if row else 0
            if count == 0 or time.monotonic() > deadline:
                return count
            time.sleep(0.01)


def loopback_connections(port: int) -> int:
    """This machine's established TCP connections to `port` on loopback, counted at the client's end."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                remote_port, state = int(fields[2].rsplit(":", 1)[1], 16), fields[3]
                count += remote_port == port and state == "01"  # ESTABLISHED
    return count


def redis_connections(url: str, name: str) -> int:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return sum(1 for c in client.client_list() if c.get("name") == name)
    finally:
        client.close()


def check_postgres(runs: int, url: str = POSTGRES_URL, concurrent: int = 1) -> str:
    """`runs` loops, each reading through the store (`concurrent` reads at once: more than the pool
    holds make it grow, its workers connecting in the background); the store is never closed, as in
    such scripts."""
    from dcaf_like.stores.postgres import PostgresConversationRepository

    app = f"dcaf-loop-{uuid.uuid4().hex[:8]}"
    table = f"loop_{uuid.uuid4().hex[:8]}"
    store = PostgresConversationRepository(f"{url}?application_name={app}", table=table)

    async def reads(n: int) -> None:
        await asyncio.gather(*(store.aget(f"conv_{n}_{k}") for k in range(concurrent)))

    try:
        for n in range(runs):
            if not run_once(lambda n=n: reads(n)):
                return f"postgres: run {n + 1} of {runs} hung as its loop ended"
            if (open_ := postgres_connections(url, app)) > 0:
                return f"postgres: run {n + 1} left {open_} connection(s) open"
    finally:
        store.close()
        _drop_tables(url, table)
    return f"postgres: {runs} runs, no hang, no connection left open"


def _drop_tables(url: str, table: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        for suffix in ("", "_messages", "_calls", "_decisions", "_cancels", "_schema_version"):
            db.execute(f"DROP TABLE IF EXISTS {table}{suffix} CASCADE")


def check_redis(runs: int, url: str = REDIS_URL) -> str:
    from dcaf_like.stores.redis import RedisConversationRepository

    name = f"dcaf-loop-{uuid.uuid4().hex[:8]}"
    store = RedisConversationRepository(f"{url}?client_name={name}", prefix=f"{name}:")
    try:
        for n in range(runs):
            if not run_once(lambda n=n: store.aget(f"conv_{n}")):
                return f"redis: run {n + 1} of {runs} hung as its loop ended"
            if (open_ := redis_connections(url, name)) > 0:
                return f"redis: run {n + 1} left {open_} connection(s) open"
    finally:
        store.close()
    return f"redis: {runs} runs, no hang, no connection left open"


def check_openai(runs: int) -> str:
    from dcaf_like.application.messages import ModelRequest, UserTurn
    from dcaf_like.runtimes.openai_chat import OpenAIRuntime
    from dcaf_like.testing.openai_server import OpenAICompatibleServer

    with OpenAICompatibleServer() as server:
        port = int(server.root_url.rsplit(":", 1)[1])
        runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=0)
        request = ModelRequest(system="", messages=(UserTurn("hi"),), tools=())
        for n in range(runs):
            server.reply("Fine.")
            if not run_once(lambda: runtime.ainvoke(request)):
                return f"openai: run {n + 1} of {runs} hung as its loop ended"
            if (open_ := loopback_connections(port)) > 0:
                return f"openai: run {n + 1} left {open_} connection(s) open"
    return f"openai: {runs} runs, no hang, no connection left open"


CHECKS: dict[str, Callable[[int], str]] = {
    "postgres": check_postgres,
    "redis": check_redis,
    "openai": check_openai,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--kind", choices=sorted(CHECKS), action="append")
    parser.add_argument("--concurrent", type=int, default=3, help="PostgreSQL reads at once per loop")
    args = parser.parse_args()
    failed = False
    for kind in args.kind or sorted(CHECKS):
        started = time.perf_counter()
        said = (
            check_postgres(args.runs, concurrent=args.concurrent)
            if kind == "postgres"
            else CHECKS[kind](args.runs)
        )
        failed = failed or "hung" in said or "left" in said
        print(f"{said} ({time.perf_counter() - started:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
