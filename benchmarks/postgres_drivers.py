"""psycopg 3 (+ psycopg-pool) against asyncpg, on the PostgreSQL store's workload (ADR 14).

    .venv/bin/python benchmarks/postgres_drivers.py [--dsn postgresql://postgres@127.0.0.1:5432/postgres]

A turn is one load (SELECT body), one compare-and-set save (UPDATE ... WHERE version = $n) and, every
tenth turn, a list (the 100 most recent ids), through each driver's asyncio pool; one task at a time,
then 16 at once on 16 conversations. Bodies of 1.5 KiB and 137 KiB (10 and 1,000 messages). asyncpg
is not a dependency of dcaf_like: install it beside to compare (`pip install asyncpg`).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

TABLE = "bench_drivers_" + uuid.uuid4().hex[:8]
CREATE = f"""CREATE TABLE {TABLE} (namespace text NOT NULL, id text NOT NULL, version bigint NOT NULL,
updated_at double precision NOT NULL, body text NOT NULL, PRIMARY KEY (namespace, id))"""
LOAD = f"SELECT body FROM {TABLE} WHERE namespace = $1 AND id = $2"
SAVE = (
    f"UPDATE {TABLE} SET version = $1, updated_at = $2, body = $3 "
    "WHERE namespace = $4 AND id = $5 AND version = $6"
)
LIST = f"SELECT id FROM {TABLE} WHERE namespace = $1 ORDER BY updated_at DESC LIMIT 100"

Turn = Callable[[str, int, str], Awaitable[None]]


def psycopg_sql(sql: str) -> str:
    for n in range(6, 0, -1):
        sql = sql.replace(f"${n}", "%s")
    return sql


async def with_psycopg(dsn: str, size: int) -> tuple[Turn, Callable[[], Awaitable[None]], Any]:
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(dsn, min_size=size, max_size=size, open=False, kwargs={"autocommit": True})
    await pool.open(wait=True)
    load, save, listing = psycopg_sql(LOAD), psycopg_sql(SAVE), psycopg_sql(LIST)

    async def turn(cid: str, version: int, body: str) -> None:
        async with pool.connection() as db:
            row = await (await db.execute(load, ("bench", cid))).fetchone()
            assert row is not None
        async with pool.connection() as db:
            done = await db.execute(save, (version + 1, time.time(), body, "bench", cid, version))
            assert done.rowcount == 1

    async def list_ids() -> None:
        async with pool.connection() as db:
            await (await db.execute(listing, ("bench",))).fetchall()

    return turn, list_ids, pool


async def with_asyncpg(dsn: str, size: int) -> tuple[Turn, Callable[[], Awaitable[None]], Any]:
    import asyncpg  # type: ignore[import-not-found,unused-ignore]

    pool = await asyncpg.create_pool(dsn, min_size=size, max_size=size)

    async def turn(cid: str, version: int, body: str) -> None:
        async with pool.acquire() as db:
            assert await db.fetchval(LOAD, "bench", cid) is not None
        async with pool.acquire() as db:
            done = await db.execute(SAVE, version + 1, time.time(), body, "bench", cid, version)
            assert done == "UPDATE 1"

    async def list_ids() -> None:
        async with pool.acquire() as db:
            await db.fetch(LIST, "bench")

    return turn, list_ids, pool


async def measure(name: str, dsn: str, body: str, tasks: int, turns: int) -> float:
    """Turns per second."""
    opener = with_psycopg if name == "psycopg" else with_asyncpg
    turn, list_ids, pool = await opener(dsn, min(tasks, 16))
    ids = [f"{name}-{tasks}-{len(body)}-{n}" for n in range(tasks)]
    from psycopg import AsyncConnection

    async with await AsyncConnection.connect(dsn, autocommit=True) as db:
        for cid in ids:
            await db.execute(
                psycopg_sql(f"INSERT INTO {TABLE} VALUES ($1, $2, $3, $4, $5)"),
                ("bench", cid, 0, time.time(), body),
            )

    async def worker(cid: str) -> None:
        for version in range(turns):
            await turn(cid, version, body)
            if version % 10 == 0:
                await list_ids()

    started = time.perf_counter()
    await asyncio.gather(*(worker(cid) for cid in ids))
    elapsed = time.perf_counter() - started
    await pool.close()
    return tasks * turns / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    from psycopg import AsyncConnection

    async with await AsyncConnection.connect(args.dsn, autocommit=True) as db:
        await db.execute(CREATE)
    drivers = ["psycopg"]
    try:
        import asyncpg  # type: ignore[import-not-found,unused-ignore]  # noqa: F401

        drivers.append("asyncpg")
    except ImportError:
        print("asyncpg is not installed: measuring psycopg only")
    try:
        print(f"{'driver':8} {'body KiB':>8} {'tasks':>5} {'turns/s':>8} {'ms/turn':>8}")
        for kib in (1.5, 137):
            body = "x" * int(kib * 1024)
            for tasks in (1, 16):
                for name in drivers:
                    turns = args.turns if kib < 100 else args.turns // 4
                    rate = await measure(name, args.dsn, body, tasks, max(1, turns // max(1, tasks // 4)))
                    print(f"{name:8} {kib:>8} {tasks:>5} {rate:>8.0f} {1000 * tasks / rate:>8.2f}")
    finally:
        async with await AsyncConnection.connect(args.dsn, autocommit=True) as db:
            await db.execute(f"DROP TABLE {TABLE}")


if __name__ == "__main__":
    asyncio.run(main())
