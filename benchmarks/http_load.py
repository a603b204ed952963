"""HTTP throughput and latency of `/api/chat`, and how fast a streamed delta reaches the client.

Each server runs alone in its own process (one uvicorn worker, unless the row says `--workers 2`); the
load comes from this process over keep-alive connections, so the server and the load each have a core
of a 2-core machine.

.venv/bin/python benchmarks/http_load.py            # prints the tables
.venv/bin/python benchmarks/http_load.py --quick    # a fraction of a second per server
.venv/bin/python benchmarks/http_load.py --only bare,redis --rounds 3   # those servers, alternated

With ``--only``, the servers named run one after the other, ``--rounds`` times over, and each row
keeps its median round's figures (by requests per second): a slow spell of a shared machine then
falls on every server alike, and the ratios hold.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request  # at module level: FastAPI resolves the endpoint's annotations here

CONCURRENCY = 8
REDIS_URL = os.environ.get("DCAF_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("DCAF_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
DELTAS_PER_TURN = 50

JSON = {"Content-Type": "application/json"}
TURN = json.dumps({"messages": [{"role": "user", "content": "which pods run?"}]}).encode()


def list_pods(namespace: str = "default") -> str:
    """List the pods of a namespace."""
    return '{"web-1": "Running"}'


# -- the servers (run with --serve KIND) ---------------------------------------------------------------


def instant_agent(store: str | None, *, tool_turn: bool = True) -> Any:
    """The benchmark's agent, answering at once: with `tool_turn`, one auto-approved tool call, its
    result, then the answer; otherwise the answer alone."""
    from dcaf_like import Agent, ModelResponse, tool
    from dcaf_like.testing import FakeRuntime
    from dcaf_like.testing import tool_call as call

    class Instant(FakeRuntime):
        def invoke(self, request: Any) -> Any:
            if not tool_turn or any(getattr(m, "call_id", None) for m in request.messages):
                return ModelResponse(text="web-1 is running.")
            return ModelResponse(tool_calls=(call("list_pods", namespace="default"),), stop_reason="tool_use")

        async def ainvoke(self, request: Any) -> Any:  # as the SDK runtimes do: no thread per model call
            return self.invoke(request)

    agent = Agent(tools=[tool(requires_approval=False)(list_pods)], runtime=Instant())
    return agent if store is None else agent.configured(repository=store)


def answering_agent() -> Any:
    """The answer-only agent, for `dcaf-like serve --factory` (several workers: the CLI gives the store)."""
    return instant_agent(None, tool_turn=False)


def ticking_agent() -> Any:
    """An agent whose model streams deltas carrying the monotonic clock at the moment it yields them."""
    from dcaf_like import Agent, AgentRuntime, ModelCompleted, ModelResponse, TextDelta

    class Ticking(AgentRuntime):
        name = "ticking"

        def invoke(self, request: Any) -> ModelResponse:
            return ModelResponse(text="")

        async def astream(self, request: Any) -> AsyncIterator[Any]:
            parts = []
            for _ in range(DELTAS_PER_TURN):
                await asyncio.sleep(0.002)
                part = f"{time.monotonic_ns()} "
                parts.append(part)
                yield TextDelta(part)
            yield ModelCompleted(ModelResponse(text="".join(parts)))

    return Agent(tools=[], runtime=Ticking())


def bare_app(answer: dict[str, Any]) -> Any:
    """The floor: FastAPI parsing the same body and returning the same JSON, doing nothing else."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/api/chat")
    async def chat(request: Request) -> JSONResponse:
        await request.json()
        return JSONResponse(answer)

    return app


def serve(kind: str, port: int, redis_prefix: str) -> None:
    import uvicorn

    from dcaf_like import create_app
    from dcaf_like.server.serving import settle_heap

    if kind == "bare":
        app = bare_app(json.loads(os.environ["BENCH_ANSWER"]))
    elif kind == "memory":
        app = create_app(instant_agent(None))
    elif kind == "text":
        app = create_app(instant_agent(None, tool_turn=False))
    elif kind == "sqlite":
        app = create_app(instant_agent(f"sqlite:///{os.environ['BENCH_DIR']}/bench.sqlite3", tool_turn=False))
    elif kind == "redis":
        app = create_app(instant_agent(f"{REDIS_URL}?prefix={redis_prefix}", tool_turn=False))
    elif kind == "postgres":
        separator = "&" if "?" in POSTGRES_URL else "?"
        url = f"{POSTGRES_URL}{separator}table={os.environ['BENCH_TABLE']}"
        app = create_app(instant_agent(url, tool_turn=False))
    elif kind == "stream":
        app = create_app(ticking_agent())
    else:
        raise SystemExit(f"unknown server {kind!r}")
    settle_heap()  # as serve() and dcaf-like serve do, for every server here (the bare one too)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


@dataclass
class Server:
    port: int
    process: subprocess.Popen[bytes]


@contextlib.contextmanager
def running(kind: str, **env: str) -> Iterator[Server]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    prefix = env.pop("prefix", "")
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--port", str(port), "--redis-prefix", prefix],
        env={**os.environ, **env},
    )
    try:
        _wait_until_up(port, process)
        yield Server(port, process)
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def running_workers(workers: int, directory: str) -> Iterator[Server]:
    """`dcaf-like serve --workers N` as a user runs it, sharing one SQLite file."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable, "-m", "dcaf_like.cli", "serve", f"{__file__}:answering_agent", "--factory",
        "--workers", str(workers), "--port", str(port), "--store", f"sqlite:///{directory}/workers.sqlite3",
        "--no-ui", "--log-level", "warning",
    ]  # fmt: skip
    process = subprocess.Popen(command, env={k: v for k, v in os.environ.items() if k != "DCAF_STORE"})
    try:
        _wait_until_up(port, process)
        yield Server(port, process)
    finally:
        process.terminate()
        process.wait(timeout=20)


def _wait_until_up(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the benchmark server exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError("the benchmark server did not start in 30 s")


# -- the load ------------------------------------------------------------------------------------------


def request_bytes(port: int, path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bytes:
    """Send `request` on a keep-alive connection and read the whole answer's body (a 200 with a
    Content-Length, as every server measured here gives)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"the server answered {head.splitlines()[0]!r}")
    fields = dict(line.split(b":", 1) for line in head.lower().split(b"\r\n")[1:] if b":" in line)
    if b"content-length" not in fields:
        raise RuntimeError("the benchmark reads answers with a Content-Length only")
    return await reader.readexactly(int(fields[b"content-length"]))


async def _one_connection(
    port: int, next_request: Callable[[], bytes], until: float, latencies: list[float]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            request = next_request()
            start = time.perf_counter()
            await exchange(reader, writer, request)
            latencies.append(time.perf_counter() - start)
    finally:
        writer.close()
        await writer.wait_closed()


async def load(port: int, seconds: float, warmup: float) -> dict[str, float]:
    """Requests per second and latency percentiles with CONCURRENCY keep-alive connections."""
    request = request_bytes(port, "/api/chat", TURN)
    return await load_with(port, lambda: request, seconds, warmup)


async def load_with(
    port: int, next_request: Callable[[], bytes], seconds: float, warmup: float
) -> dict[str, float]:
    """:func:`load` with each request's bytes from `next_request` (a new session id each, say)."""
    await asyncio.gather(
        *(_one_connection(port, next_request, time.perf_counter() + warmup, []) for _ in range(CONCURRENCY))
    )
    latencies: list[float] = []
    start = time.perf_counter()
    await asyncio.gather(
        *(_one_connection(port, next_request, start + seconds, latencies) for _ in range(CONCURRENCY))
    )
    elapsed = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100)
    return {"rps": len(latencies) / elapsed, "p50": cuts[49] * 1000, "p99": cuts[98] * 1000}


def one_answer(port: int) -> dict[str, Any]:
    import httpx

    answer = httpx.post(f"http://127.0.0.1:{port}/api/chat", content=TURN, headers=JSON, timeout=10)
    return dict(answer.raise_for_status().json())


def redis_commands() -> dict[str, int]:
    """Calls so far of each command, those run by scripts included."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(figures["calls"]) for name, figures in stats.items()}


def drop_tables(table: str) -> None:
    """Drop the PostgreSQL tables of `table` (the benchmark's own, made by its first save)."""
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
        suffixes = ("", "_schema_version", "_decisions", "_cancels", "_messages", "_calls")
        db.execute(f"DROP TABLE IF EXISTS {', '.join(f'{table}{suffix}' for suffix in suffixes)} CASCADE")
        db.execute(f"DROP FUNCTION IF EXISTS {table}_decisions_refuse()")


def forget(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
    finally:
        client.close()


async def stream_delays(port: int, turns: int) -> list[float]:
    """Milliseconds from the model yielding each delta to this client parsing its NDJSON line."""
    import httpx

    delays: list[float] = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for _ in range(turns):
            async with client.stream("POST", "/api/chat-stream", content=TURN, headers=JSON) as response:
                async for line in response.aiter_lines():
                    event = json.loads(line)
                    if event["type"] == "text_delta":
                        delays.append((time.monotonic_ns() - int(event["text"])) / 1e6)
    return delays


# -- the report ----------------------------------------------------------------------------------------


ROWS = {
    "bare": "bare FastAPI endpoint, same JSON",
    "text": "dcaf_like: answer, in-memory store",
    "sqlite": "dcaf_like: answer, SQLite store",
    "sqlite 2 workers": "dcaf_like: answer, SQLite store, `dcaf-like serve --workers 2`",
    "redis": "dcaf_like: answer, Redis store",
    "postgres": "dcaf_like: answer, PostgreSQL store",
    "memory": "dcaf_like: tool call, result, answer, in-memory store",
}


#: Rounds of every server in `make bench`, one after the other: each keeps its median round, so a slow
#: spell of a shared machine falls on one round of every server rather than on one server.
ROUNDS = 3


def report(quick: bool) -> dict[str, Any]:
    results = compare(list(ROWS), 1 if quick else ROUNDS, quick)
    with running("stream") as server:
        delays = asyncio.run(stream_delays(server.port, 4 if quick else 40))
        cuts = statistics.quantiles(delays, n=100)
        results["stream"] = {"samples": len(delays), "p50": cuts[49], "p99": cuts[98], "max": max(delays)}
    return results


def compare(kinds: list[str], rounds: int, quick: bool) -> dict[str, Any]:
    """The servers of `kinds`, one after the other, `rounds` times over; each keeps its median round."""
    seconds, warmup = (0.5, 0.2) if quick else (5.0, 1.0)
    answer = the_answer()
    runs: dict[str, list[Any]] = {kind: [] for kind in kinds}
    results: dict[str, Any] = {"settings": {"connections": CONCURRENCY, "seconds": seconds, "rounds": rounds}}
    for _ in range(rounds):
        for kind in kinds:
            runs[kind].append(measure(kind, seconds, warmup, answer, results))
    for kind, figures in runs.items():
        measured = [f for f in figures if not isinstance(f, str)]
        results[kind] = (
            sorted(measured, key=lambda f: f["rps"])[len(measured) // 2] if measured else figures[0]
        )
        if rounds > 1:
            results[f"{kind} rounds"] = [round(f["rps"]) for f in measured]
    return results


def the_answer() -> dict[str, Any]:
    """The JSON an answer-only turn returns, for the bare endpoint to return too."""
    with running("text") as server:
        return one_answer(server.port)


def measure(
    kind: str, seconds: float, warmup: float, answer: dict[str, Any], results: dict[str, Any]
) -> dict[str, float] | str:
    """Requests per second and latency of the server `kind` (a key of ROWS); a sentence instead when
    its store is not there. Redis also puts its commands per turn in `results`."""
    import tempfile

    if kind == "bare":
        with running("bare", BENCH_ANSWER=json.dumps(answer)) as server:
            return asyncio.run(load(server.port, seconds, warmup))
    if kind == "sqlite 2 workers":
        with tempfile.TemporaryDirectory() as directory, running_workers(2, directory) as server:
            return asyncio.run(load(server.port, seconds, warmup))
    if kind == "redis":
        try:
            redis_commands()
        except Exception as exc:  # a machine without Redis still gets every other figure
            return f"not measured: no Redis at {REDIS_URL} ({type(exc).__name__})"
        return measure_redis(results, f"bench-{uuid.uuid4().hex[:8]}:", seconds, warmup)
    if kind == "postgres":
        return measure_postgres(seconds, warmup)
    with tempfile.TemporaryDirectory() as directory, running(kind, BENCH_DIR=directory) as server:
        return asyncio.run(load(server.port, seconds, warmup))


def measure_redis(results: dict[str, Any], prefix: str, seconds: float, warmup: float) -> dict[str, float]:
    try:
        with running("redis", prefix=prefix) as server:
            one_answer(server.port)  # connects and loads the script
            before = redis_commands()
            turns = 50
            for _ in range(turns):
                one_answer(server.port)
            after = redis_commands()
            per_turn = {name: (calls - before.get(name, 0)) / turns for name, calls in after.items()}
            results["redis per turn"] = {name: calls for name, calls in per_turn.items() if calls >= 0.5}
            return asyncio.run(load(server.port, seconds, warmup))
    finally:
        forget(prefix)


def measure_postgres(seconds: float, warmup: float) -> dict[str, float] | str:
    """On a table of its own (made by the server's first save), dropped afterwards."""
    table = f"bench_{uuid.uuid4().hex[:8]}"
    try:
        drop_tables(table)
    except Exception as exc:  # a machine without PostgreSQL still gets every other figure
        return f"not measured: no PostgreSQL at {POSTGRES_URL.rsplit('@', 1)[-1]} ({type(exc).__name__})"
    try:
        with running("postgres", BENCH_TABLE=table) as server:
            return asyncio.run(load(server.port, seconds, warmup))
    finally:
        drop_tables(table)


def markdown(results: dict[str, Any]) -> str:
    bare = results["bare"]["rps"]
    rows = [
        f"| HTTP `/api/chat`, one uvicorn worker unless said, {results['settings']['connections']} keep-alive"
        " connections | requests/s | p50 ms | p99 ms | vs bare endpoint |",
        "|---|---|---|---|---|",
    ]
    for kind, name in ROWS.items():
        if kind not in results:
            continue
        figures = results[kind]
        if isinstance(figures, str):
            rows.append(f"| {name} | {figures} | | | |")
            continue
        rows.append(
            f"| {name} | {figures['rps']:.0f} | {figures['p50']:.2f} | {figures['p99']:.2f} "
            f"| {figures['rps'] / bare:.0%} |"
        )
    rounds = [f"{ROWS[k]}: {results[f'{k} rounds']}" for k in ROWS if f"{k} rounds" in results]
    if rounds:
        each = "; ".join(rounds)
        rows += ["", f"Requests/s of each round (the table keeps each server's median): {each}."]
    if "redis per turn" in results:
        rows += ["", f"Redis per turn of a new conversation: {redis_per_turn(results['redis per turn'])}."]
    if "stream" in results:
        stream = results["stream"]
        rows += [
            "",
            "| Streaming: model yields a delta → client parses its NDJSON line | p50 ms | p99 ms | max ms |",
            "|---|---|---|---|",
            f"| {stream['samples']} deltas over `/api/chat-stream` | {stream['p50']:.2f} "
            f"| {stream['p99']:.2f} | {stream['max']:.2f} |",
        ]
    return "\n".join(rows)


def redis_per_turn(calls: dict[str, float]) -> str:
    scripted = sorted((name, n) for name, n in calls.items() if name not in ("evalsha", "info"))
    inside = ", ".join(f"{name} {n:g}" for name, n in scripted)
    return (
        f"{calls.get('evalsha', 0):g} round trips (EVALSHA: the read of its new id, which fails the turn "
        f"before the model is called if Redis cannot be used, and the compare-and-set save); the scripts "
        f"run {inside}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve")
    parser.add_argument("--port", type=int)
    parser.add_argument("--redis-prefix", default="")
    parser.add_argument("--only", help=f"comma-separated servers to compare, of: {', '.join(ROWS)}")
    parser.add_argument("--rounds", type=int, default=1, help="with --only: times over each server")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.redis_prefix)
        return
    if args.only:
        kinds = [kind.strip() for kind in args.only.split(",")]
        unknown = [kind for kind in kinds if kind not in ROWS]
        if unknown or "bare" not in kinds:
            parser.error(f"--only needs bare and names among {', '.join(ROWS)}; not {unknown or args.only}")
        print(markdown(compare(kinds, args.rounds, args.quick)))
        return
    print(markdown(report(args.quick)))


if __name__ == "__main__":
    main()
