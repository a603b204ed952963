"""Runs in flight: how many turns one server keeps waiting on a slow model, and what each one costs.

    .venv/bin/python benchmarks/in_flight.py                          # 500, 1000, 2000 turns, model 10 s
    .venv/bin/python benchmarks/in_flight.py --delay 2 --turns 200,1000
    .venv/bin/python benchmarks/in_flight.py --quick                  # 20 turns, model 0.5 s: checks it runs

The server is `create_app` of an agent on ``OpenAIRuntime`` in memory, under uvicorn in a process of
its own (one worker); its model is the asyncio stub of benchmarks/openai_stub.py, another process,
which answers every request after ``--delay`` seconds (so the stub is not the limit). This process
sends N ``/api/chat`` turns at once, each on a connection of its own, and reads each answer's time:
what the server adds over the model's delay (p50, p99, worst), and the server's resident memory while
they wait, over its memory before (``/proc/PID/status`` VmRSS, sampled while the turns are in
flight), per turn in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import openai_stub
from http_load import TURN, _wait_until_up, exchange, request_bytes


def serve(port: int, base_url: str) -> None:
    import uvicorn

    from dcaf_like import Agent, create_app
    from dcaf_like.runtimes.openai_chat import OpenAIRuntime
    from dcaf_like.server.serving import settle_heap

    agent = Agent(runtime=OpenAIRuntime("stub-model", base_url=base_url, max_retries=0, timeout=600))
    app = create_app(agent)
    settle_heap()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=4096)


@contextlib.contextmanager
def running(base_url: str) -> Iterator[tuple[int, int]]:
    """The server's port and process id."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port), base_url])
    try:
        _wait_until_up(port, process)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(timeout=20)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def _turn(port: int, request: bytes, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        start = time.perf_counter()
        body = await exchange(reader, writer, request)
        latencies.append(time.perf_counter() - start)
        if b"web-1 is running." not in body:
            raise RuntimeError(f"unexpected answer: {body[:200]!r}")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _load(port: int, pid: int, turns: int) -> tuple[list[float], int]:
    request = request_bytes(port, "/api/chat", TURN)
    latencies: list[float] = []
    tasks = [asyncio.ensure_future(_turn(port, request, latencies)) for _ in range(turns)]
    peak = 0
    while not all(t.done() for t in tasks):
        peak = max(peak, rss_kib(pid))
        await asyncio.sleep(0.1)
    for task in tasks:
        task.result()  # a failed turn fails the benchmark
    return latencies, peak


def measure(turns: int, delay: float) -> dict[str, float]:
    with openai_stub.started(delay) as base_url, running(base_url) as (port, pid):
        asyncio.run(_load(port, pid, 5))  # warm-up: imports, connections, first allocations
        idle = rss_kib(pid)
        started = time.perf_counter()
        latencies, peak = asyncio.run(_load(port, pid, turns))
        elapsed = time.perf_counter() - started
    added = sorted(latency - delay for latency in latencies)
    return {
        "turns": turns,
        "p50_ms": statistics.median(added) * 1000,
        "p99_ms": added[min(len(added) - 1, int(len(added) * 0.99))] * 1000,
        "worst_ms": added[-1] * 1000,
        "all_answered_s": elapsed,
        "kib_per_turn": (peak - idle) / turns,
        "idle_mib": idle / 1024,
    }


def report(turn_counts: list[int], delay: float) -> dict[str, Any]:
    return {"delay": delay, "rows": [measure(n, delay) for n in turn_counts]}


def markdown(results: dict[str, Any]) -> str:
    delay = results["delay"]
    lines = [
        f"| Runs in flight: N `/api/chat` turns at once, model answers after {delay:g} s | added p50 ms "
        "| added p99 ms | worst ms | all answered in s | KiB of RSS per turn in flight |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['turns']} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['worst_ms']:.0f} "
            f"| {r['all_answered_s']:.1f} | {r['kib_per_turn']:.1f} |"
        )
    idle = results["rows"][0]["idle_mib"]
    lines.append(
        f"\nOne uvicorn worker, `OpenAIRuntime` in memory, idle RSS {idle:.0f} MiB. "
        "Command: `.venv/bin/python benchmarks/in_flight.py`."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="20 turns, model 0.5 s: checks that it runs")
    parser.add_argument("--delay", type=float, default=10.0, help="seconds the model takes to answer")
    parser.add_argument("--turns", default="500,1000,2000", help="turns in flight, comma-separated")
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "BASE_URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(int(args.serve[0]), args.serve[1])
        return
    counts, delay = ([20], 0.5) if args.quick else ([int(n) for n in args.turns.split(",")], args.delay)
    print(markdown(report(counts, delay)))


if __name__ == "__main__":
    main()
