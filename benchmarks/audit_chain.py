"""What the audit chain costs a decision's record (ADR 34; docs/operations.md, "Proving the trail"):
the median time of ``record_decisions`` of one refused decision, appended one after another through
one repository, on SQLite, PostgreSQL and Redis (the servers the tests use). Run it on this code and
on a checkout from before the chain (``PYTHONPATH=<that checkout>``) to compare.

    python benchmarks/audit_chain.py --records 500
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from dcaf_like.domain import DecisionRecord
from dcaf_like.stores import open_store

POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS = "redis://127.0.0.1:6379/15"


def median_us(store: Any, records: int) -> float:
    times = []
    for n in range(records):
        record = DecisionRecord.refused(f"c{n}", "no scope", by="bench", entrance="http", at=float(n))
        start = time.perf_counter()
        store.record_decisions([record])
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500)
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as folder:
        urls = {
            "sqlite": f"sqlite:///{Path(folder) / 'bench.db'}",
            "postgres": f"{POSTGRES}?table=bench_{tag}",
            "redis": f"{REDIS}?prefix=bench-{tag}:",
        }
        for name, url in urls.items():
            store = open_store(url, namespace="bench")
            median_us(store, 20)  # warm: the schema, the scripts, the chain's head
            print(f"{name:9} {median_us(store, args.records):8.0f} us per record")
            getattr(store, "close", lambda: None)()
    forget(tag)


def forget(tag: str) -> None:
    """Drop what the bench wrote: its PostgreSQL tables, its Redis keys."""
    import psycopg
    import redis

    with psycopg.connect(POSTGRES, autocommit=True) as db:
        tables = db.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"bench_{tag}%",))
        for (table,) in tables.fetchall():
            db.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
        db.execute(f"DROP FUNCTION IF EXISTS bench_{tag}_decisions_refuse() CASCADE")
    client = redis.Redis.from_url(REDIS)
    keys = list(client.scan_iter(match=f"bench-{tag}:*"))
    if keys:
        client.delete(*keys)
    client.close()


if __name__ == "__main__":
    main()
