"""The peers on their own stores: our server against Agno's AgentOS and Google ADK's `api_server`, each
keeping its sessions in SQLite, then in PostgreSQL, the way each project documents.

    .venv/bin/python benchmarks/peer_stores.py            # prints the table
    .venv/bin/python benchmarks/peer_stores.py --quick    # a fraction of a second per server

The turn is benchmarks/peer_servers.py's (an instant model: one tool call, its result, the answer; a
new session each turn), one uvicorn worker per server, the load from this process over keep-alive
connections. What each server keeps its sessions in:

- dcaf_like: `create_app(agent.configured(repository=URL))`, `sqlite:///FILE` and
  `postgresql://...` (its own stores, dcaf_like.stores).
- Agno: the agent's `db=` `SqliteDb(db_file=FILE)` and `PostgresDb(db_url=...)` (agno.db).
- ADK: `get_fast_api_app(session_service_uri=...)` with `sqlite+aiosqlite:///FILE` and
  `postgresql+psycopg://...`: its `DatabaseSessionService` on SQLAlchemy.

Each server gets a SQLite file or a PostgreSQL database of its own (created, then dropped), on the same
PostgreSQL server (``DCAF_BENCH_POSTGRES_URL``, default the local one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("AGNO_TELEMETRY", "false")

import peer_servers  # noqa: E402  (from this folder, on the path above)

POSTGRES = os.environ.get("DCAF_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
KINDS = ("dcaf_like", "agno", "adk")
STORES = ("sqlite", "postgres")


def _server_url(database: str) -> str:
    """POSTGRES with its database replaced by `database`."""
    return POSTGRES.rsplit("/", 1)[0] + "/" + database


def store_url(kind: str, store: str, place: str) -> str:
    """What `kind` is given to keep its sessions in: `place` is a file (SQLite) or a database's name."""
    if store == "sqlite":
        return {"dcaf_like": "sqlite:///", "agno": "", "adk": "sqlite+aiosqlite:///"}[kind] + place
    url = _server_url(place)
    if kind == "dcaf_like":
        return url
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


# -- the servers (run with --serve KIND --url URL --port PORT) -------------------------------------------


def dcaf_app(url: str) -> Any:
    import http_load

    from dcaf_like import create_app

    return create_app(http_load.instant_agent(url))


def agno_app(url: str) -> Any:
    from agno.agent import Agent as AgnoAgent
    from agno.os import AgentOS
    from peers import InstantAgnoModel, list_pods

    if url.startswith("postgresql"):
        from agno.db.postgres import PostgresDb

        db: Any = PostgresDb(db_url=url)
    else:
        from agno.db.sqlite import SqliteDb

        db = SqliteDb(db_file=url)
    agent = AgnoAgent(
        id="ops", name="ops", model=InstantAgnoModel(id="instant"), tools=[list_pods], db=db, telemetry=False
    )
    return AgentOS(agents=[agent], telemetry=False).get_app()


def serve(kind: str, url: str, port: int) -> None:
    builders: dict[str, Callable[[str], Any]] = {
        "dcaf_like": lambda _: dcaf_app(url),
        "agno": lambda _: agno_app(url),
        "adk": lambda directory: peer_servers.adk_app(directory, session_service_uri=url),
    }
    peer_servers.serve_app(builders[kind], port)


@contextlib.contextmanager
def running(kind: str, url: str) -> Iterator[int]:
    command = [__file__, "--serve", kind, "--url", url, "--port"]
    with peer_servers.server_process(kind, lambda port: [*command, str(port)]) as (port, _):
        yield port


@contextlib.contextmanager
def place_for(store: str, directory: str) -> Iterator[str]:
    """A new SQLite file's path, or a new PostgreSQL database's name (dropped afterwards)."""
    if store == "sqlite":
        yield str(Path(directory) / f"{uuid.uuid4().hex[:8]}.sqlite3")
        return
    import psycopg

    name = f"bench_peer_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# -- the report -----------------------------------------------------------------------------------------


def measure(kind: str, store: str, seconds: float, warmup: float) -> dict[str, float] | str:
    with tempfile.TemporaryDirectory() as directory, place_for(store, directory) as place:
        try:
            with running(kind, store_url(kind, store, place)) as port:
                text = asyncio.run(peer_servers.one_answer(kind, port))
                if text != peer_servers.ANSWER:
                    raise RuntimeError(f"answered {text!r}, not {peer_servers.ANSWER!r}")
                return asyncio.run(peer_servers.load(kind, port, seconds, warmup))
        except (ImportError, RuntimeError) as exc:  # a peer not installed, or broken by a new release
            return f"not measured: {exc}"


def report(quick: bool) -> dict[str, Any]:
    seconds, warmup = (0.5, 0.2) if quick else (5.0, 1.0)
    return {store: {kind: measure(kind, store, seconds, warmup) for kind in KINDS} for store in STORES}


def markdown(results: dict[str, Any]) -> str:
    import http_load

    rows = [
        "| Servers on their own stores, one uvicorn worker each, instant model, tool call + answer, "
        f"new session per turn, {http_load.CONCURRENCY} keep-alive connections | store | requests/s "
        "| p50 ms | p99 ms | dcaf_like's requests/s ÷ this |",
        "|---|---|---|---|---|---|",
    ]
    for store, by_kind in results.items():
        ours = by_kind["dcaf_like"]
        for kind in KINDS:
            figures = by_kind[kind]
            name = peer_servers.ROWS[kind]
            if isinstance(figures, str):
                rows.append(f"| {name} | {store} | {figures} | | | |")
                continue
            ratio = f"{ours['rps'] / figures['rps']:.1f}x" if isinstance(ours, dict) else ""
            rows.append(
                f"| {name} | {store} | {figures['rps']:.0f} | {figures['p50']:.2f} | {figures['p99']:.2f} "
                f"| {ratio} |"
            )
    rows.append("\nCommand: `.venv/bin/python benchmarks/peer_stores.py`.")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve", choices=KINDS)
    parser.add_argument("--url")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.url, args.port)
        return
    print(markdown(report(args.quick)))


if __name__ == "__main__":
    main()
