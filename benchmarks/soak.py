"""`make soak`: a bounded soak over real HTTP on loopback, and the exactly-once check of its approvals.

Sixteen clients mix new conversations, approvals, rejections, streamed turns, abandoned proposals and
duplicate approvals (the same approval sent twice at once) against `dcaf-like serve`: one worker on
SQLite, then two workers on Redis. Every run of the tool appends the pod's name (unique per proposal)
to a ledger file; at the end every approval answered 200 must appear there exactly once, and no
rejected, abandoned or refused call at all.

.venv/bin/python benchmarks/soak.py                  # 120 s per server: the figures of docs/benchmarks.md
.venv/bin/python benchmarks/soak.py --seconds 5      # a smoke run (the test suite runs one)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

CLIENTS = 16
WINDOWS = 6
REDIS_URL = os.environ.get("DCAF_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("DCAF_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
_DELETE = re.compile(r"delete pod (?P<name>[\w.-]+)")


# -- the served agent (`dcaf-like serve benchmarks/soak.py:make_agent --factory`) ----------------------


def make_agent() -> Any:
    """Proposes ``delete_pod`` for "delete pod NAME", answers anything else at once; each run of the
    tool appends NAME to the ledger named by ``SOAK_LEDGER`` (one write of one line: atomic)."""
    from dcaf_like import Agent, AgentRuntime, ModelRequest, ModelResponse, ModelToolCall, ToolResult, tool

    ledger = os.environ["SOAK_LEDGER"]

    class Rules(AgentRuntime):
        name = "rules"

        def invoke(self, request: ModelRequest) -> ModelResponse:
            last = request.messages[-1]
            if isinstance(last, ToolResult):
                return ModelResponse(text=f"Done: {last.content}")
            match = _DELETE.search(getattr(last, "text", ""))
            if match is None:
                return ModelResponse(text="web-1 is Running; web-2 is in CrashLoopBackOff.")
            call = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "delete_pod", {"name": match["name"]})
            return ModelResponse(text="", tool_calls=(call,), stop_reason="tool_use")

        async def ainvoke(self, request: ModelRequest) -> ModelResponse:
            return self.invoke(request)

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        descriptor = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, f"{name}\n".encode())
        finally:
            os.close(descriptor)
        return f'pod "{name}" deleted'

    return Agent(tools=[delete_pod], name="soak", runtime=Rules())


# -- the server -----------------------------------------------------------------------------------------


@dataclass
class Served:
    url: str
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving(store: str, workers: int, ledger: Path) -> Iterator[Served]:
    port = _free_port()
    command = [
        sys.executable, "-m", "dcaf_like.cli", "serve", f"{__file__}:make_agent", "--factory",
        "--port", str(port), "--workers", str(workers), "--store", store, "--no-ui", "--log-level", "warning",
    ]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != "DCAF_STORE"}
    process = subprocess.Popen(
        command, env={**environment, "SOAK_LEDGER": str(ledger)}, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if (
                    httpx.get(f"{url}/health", timeout=1).status_code == 200
                    and _workers_of(process) >= workers
                ):
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError("the server did not start in 60 s")
        yield Served(url, process)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _workers_of(process: subprocess.Popen[bytes]) -> int:
    """Processes serving: the server itself (one worker) or its children (several; the resource
    tracker of multiprocessing holds no socket but counts too, so `>=` is the test)."""
    return len(_children(process.pid)) or 1


def rss_kib(process: subprocess.Popen[bytes]) -> int:
    """Resident memory of the server and every process under it (workers), in KiB."""
    total = 0
    for pid in [process.pid, *_children(process.pid)]:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


# -- the load -------------------------------------------------------------------------------------------


@dataclass
class Tally:
    started: float
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (at, seconds, status)
    approved: list[str] = field(default_factory=list)  # pods whose approval was answered 200
    not_to_run: list[str] = field(default_factory=list)  # rejected, abandoned, or refused
    duplicates: Counter[int] = field(default_factory=Counter)  # statuses of the second of two approvals
    rss: list[tuple[int, int]] = field(default_factory=list)  # (requests so far, KiB)


def user(text: str = "", **data: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text, "data": data}]}


async def _post(client: httpx.AsyncClient, tally: Tally, body: dict[str, Any]) -> httpx.Response:
    start = time.perf_counter()
    response = await client.post("/api/chat", json=body)
    tally.samples.append((start - tally.started, time.perf_counter() - start, response.status_code))
    return response


async def _propose(client: httpx.AsyncClient, tally: Tally) -> tuple[str, dict[str, Any], str] | None:
    pod = f"web-{uuid.uuid4().hex[:12]}"
    response = await _post(client, tally, user(f"delete pod {pod}"))
    if response.status_code != 200:
        return None
    data = response.json()["data"]
    (pending,) = data["tool_calls"]
    return data["conversation_id"], pending, pod


def _decision(conversation_id: str, pending: dict[str, Any], execute: bool) -> dict[str, Any]:
    decided = {**pending, "execute": execute}
    if not execute:
        decided["rejection_reason"] = "not now"
    return user(conversation_id=conversation_id, tool_calls=[decided])


async def _approve(client: httpx.AsyncClient, tally: Tally, *, twice: bool = False) -> None:
    proposed = await _propose(client, tally)
    if proposed is None:
        return
    conversation_id, pending, pod = proposed
    body = _decision(conversation_id, pending, True)
    if not twice:
        answers = [await _post(client, tally, body)]
    else:
        answers = list(await asyncio.gather(_post(client, tally, body), _post(client, tally, body)))
        tally.duplicates.update(sorted(a.status_code for a in answers))
    if any(a.status_code == 200 for a in answers):
        tally.approved.append(pod)
    elif all(a.status_code == 409 for a in answers):
        tally.not_to_run.append(pod)  # refused: the tool must not have run


async def _reject(client: httpx.AsyncClient, tally: Tally) -> None:
    proposed = await _propose(client, tally)
    if proposed is not None:
        conversation_id, pending, pod = proposed
        if (await _post(client, tally, _decision(conversation_id, pending, False))).status_code == 200:
            tally.not_to_run.append(pod)


async def _abandon(client: httpx.AsyncClient, tally: Tally) -> None:
    proposed = await _propose(client, tally)
    if proposed is not None:
        tally.not_to_run.append(proposed[2])


async def _ask(client: httpx.AsyncClient, tally: Tally) -> None:
    await _post(client, tally, user("which pods run in prod?"))


async def _stream(client: httpx.AsyncClient, tally: Tally) -> None:
    start = time.perf_counter()
    async with client.stream("POST", "/api/chat-stream", json=user("which pods run in prod?")) as response:
        events = [json.loads(line) async for line in response.aiter_lines() if line]
    status = response.status_code if any(e.get("type") == "done" for e in events) else 599
    tally.samples.append((start - tally.started, time.perf_counter() - start, status))


MIX = [(_ask, 20), (_approve, 25), (_reject, 15), (_stream, 15), (_abandon, 10), ("twice", 15)]


async def _client(url: str, until: float, tally: Tally, seed: int) -> None:
    chooser = random.Random(seed)
    actions, weights = zip(*MIX, strict=True)
    # A connection idle for the server's keep-alive timeout (uvicorn's 5 s, httpx's expiry too) may be
    # closed by the server as the client sends on it: the client lets it go sooner.
    limits = httpx.Limits(keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        while time.perf_counter() < until:
            action = chooser.choices(actions, weights)[0]
            if action == "twice":
                await _approve(client, tally, twice=True)
            else:
                await action(client, tally)  # type: ignore[operator]


async def _sample_rss(process: subprocess.Popen[bytes], since: float, until: float, tally: Tally) -> None:
    await asyncio.sleep(max(0.0, since - time.perf_counter()))
    while time.perf_counter() < until:
        tally.rss.append((len(tally.samples), rss_kib(process)))
        await asyncio.sleep(1)
    tally.rss.append((len(tally.samples), rss_kib(process)))


async def soak(served: Served, seconds: float, warmup: float) -> Tally:
    """`warmup` seconds of load, then `seconds` measured (the ledger covers both)."""
    tally = Tally(started=time.perf_counter() + warmup)
    until = tally.started + seconds
    await asyncio.gather(
        _sample_rss(served.process, tally.started, until, tally),
        *(_client(served.url, until, tally, seed) for seed in range(CLIENTS)),
    )
    return tally


# -- the report -----------------------------------------------------------------------------------------


def integrity(tally: Tally, ledger: Path) -> dict[str, int]:
    ran = Counter(ledger.read_text().split()) if ledger.exists() else Counter()
    approved = set(tally.approved)
    return {
        "approved (200)": len(tally.approved),
        "approved ran exactly once": sum(1 for pod in tally.approved if ran[pod] == 1),
        "ran twice or more": sum(1 for n in ran.values() if n > 1),
        "rejected, abandoned or refused that ran": sum(1 for pod in tally.not_to_run if ran[pod]),
        "ran without an approval answered 200": sum(1 for pod in ran if pod not in approved),
    }


def _slope(points: list[tuple[int, int]]) -> float:
    """KiB per 1,000 requests, least squares."""
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return 0.0
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return 1000 * sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


def report(name: str, seconds: float, tally: Tally, ledger: Path) -> dict[str, Any]:
    width = seconds / WINDOWS
    windows = []
    for n in range(WINDOWS):
        inside = [s for s in tally.samples if n * width <= s[0] < (n + 1) * width]
        latencies = sorted(s[1] * 1000 for s in inside)
        cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
        windows.append({"rps": len(inside) / width, "p50": cuts[49], "p99": cuts[98]})
    half = len(tally.rss) // 2
    measured = [s for s in tally.samples if s[0] >= 0]
    return {
        "name": name,
        "requests": len(measured),
        "5xx": sum(1 for s in tally.samples if s[2] >= 500),  # the warm-up's included
        "statuses": dict(Counter(s[2] for s in tally.samples)),
        "windows": windows,
        "rss_mib": (tally.rss[0][1] / 1024, tally.rss[-1][1] / 1024) if tally.rss else (0.0, 0.0),
        "rss_slope": (_slope(tally.rss[: half + 1]), _slope(tally.rss[half:])),
        "duplicates": dict(tally.duplicates),
        "integrity": integrity(tally, ledger),
    }


def exact(figures: dict[str, Any]) -> bool:
    check = figures["integrity"]
    return (
        check["approved ran exactly once"] == check["approved (200)"]
        and check["ran twice or more"] == 0
        and check["rejected, abandoned or refused that ran"] == 0
        and check["ran without an approval answered 200"] == 0
    )


def markdown(results: list[dict[str, Any]], seconds: float) -> str:
    lines = [
        f"| {CLIENTS} clients, {seconds:g} s after a warm-up | window | requests/s | p50 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    for figures in results:
        for n, window in enumerate(figures["windows"], 1):
            lines.append(
                f"| {figures['name'] if n == 1 else ''} | {n} | {window['rps']:.0f} | {window['p50']:.1f} "
                f"| {window['p99']:.1f} |"
            )
    lines += ["", "| | requests | 5xx | RSS MiB start → end | RSS KiB per 1,000 requests, 1st → 2nd half "
              "| duplicate approvals (statuses) | approved (200) | ran exactly once | integrity |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for figures in results:
        check = figures["integrity"]
        start, end = figures["rss_mib"]
        first, second = figures["rss_slope"]
        duplicates = ", ".join(f"{code}: {n}" for code, n in sorted(figures["duplicates"].items()))
        lines.append(
            f"| {figures['name']} | {figures['requests']} | {figures['5xx']} | {start:.0f} → {end:.0f} "
            f"| {first:.0f} → {second:.0f} | {duplicates} | {check['approved (200)']} "
            f"| {check['approved ran exactly once']} | {'exact' if exact(figures) else f'BROKEN: {check}'} |"
        )
    return "\n".join(lines)


STORES = ("sqlite", "redis", "postgres")


def run(seconds: float, stores: tuple[str, ...] = STORES) -> list[dict[str, Any]]:
    import redis

    warmup = min(10.0, seconds / 10)
    results = []
    with tempfile.TemporaryDirectory() as directory:
        if "sqlite" in stores:
            ledger = Path(directory) / "sqlite.ledger"
            with serving(f"sqlite:///{directory}/soak.sqlite3", 1, ledger) as served:
                soaked = asyncio.run(soak(served, seconds, warmup))
                results.append(report("1 worker, SQLite", seconds, soaked, ledger))
        if "redis" in stores:
            prefix = f"soak-{uuid.uuid4().hex[:8]}:"
            ledger = Path(directory) / "redis.ledger"
            try:
                with serving(f"{REDIS_URL}?prefix={prefix}", 2, ledger) as served:
                    soaked = asyncio.run(soak(served, seconds, warmup))
                    results.append(report("2 workers, Redis", seconds, soaked, ledger))
            finally:
                client = redis.Redis.from_url(REDIS_URL)
                for key in client.scan_iter(f"{prefix}*", count=1000):
                    client.delete(key)
                client.close()
        if "postgres" in stores:
            results.append(soak_postgres(seconds, warmup, Path(directory) / "postgres.ledger"))
    return results


def soak_postgres(seconds: float, warmup: float, ledger: Path) -> dict[str, Any]:
    """2 workers sharing one PostgreSQL table of their own, dropped afterwards."""
    import psycopg

    table = f"soak_{uuid.uuid4().hex[:8]}"
    separator = "&" if "?" in POSTGRES_URL else "?"
    try:
        with serving(f"{POSTGRES_URL}{separator}table={table}", 2, ledger) as served:
            return report(
                "2 workers, PostgreSQL", seconds, asyncio.run(soak(served, seconds, warmup)), ledger
            )
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
            suffixes = ("", "_schema_version", "_decisions", "_cancels", "_messages", "_calls", "_waiting")
            suffixes += ("_grants", "_audit_heads", "_audit_digests")
            tables = [f"{table}{suffix}" for suffix in suffixes]
            db.execute(f"DROP TABLE IF EXISTS {', '.join(tables)} CASCADE")
            db.execute(f"DROP FUNCTION IF EXISTS {table}_decisions_refuse()")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120, help="of load per server (default 120)")
    parser.add_argument("--stores", default=",".join(STORES), help="which, in this order (default all)")
    args = parser.parse_args()
    stores = tuple(args.stores.split(","))
    if unknown := set(stores) - set(STORES):
        parser.error(f"unknown store {sorted(unknown)}; the soak knows {', '.join(STORES)}")
    started = time.perf_counter()
    results = run(args.seconds, stores)
    print(markdown(results, args.seconds))
    command = f".venv/bin/python benchmarks/soak.py --seconds {args.seconds:g} --stores {args.stores}"
    print(f"\nCommand: `{command}` ({time.perf_counter() - started:.0f} s).")
    if not all(exact(figures) and figures["5xx"] == 0 for figures in results):
        raise SystemExit("the soak found 5xx answers or a broken exactly-once check")


if __name__ == "__main__":
    main()
