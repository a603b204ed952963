"""What a job engine costs and what it frees (issue 41; docs/runs.md, "Tools on a job engine").

    .venv/bin/python benchmarks/jobs.py            # 30 approvals; 16 tools of 2 s in flight
    .venv/bin/python benchmarks/jobs.py --quick    # 5 approvals; 4 tools of 0.2 s

Two tables, on one SQLite store, the broker a local Redis (database 13):

- **The approval that enqueues a job**: the median time of ``Agent.decide`` approving a call of a
  background tool (its job sent to the broker by ``CeleryExecutor``; no worker takes it), against the
  same approval of an in-process tool that returns at once: what an approval adds to hand the call
  over, rather than run it.
- **Tools in flight**: N calls of a tool that takes D seconds, approved at once from N threads (as N
  users' requests to an API server): how long an approval holds its request (the p50 and the
  slowest), and how long until every result is recorded. In process, each approval's request runs the
  tool and waits for it; on a job engine (two ``dcaf-like worker`` processes, ``--concurrency 4``
  each), the approval returns once the job is queued, the API tier holds nothing while the tools run,
  and the tool tier runs 8 at once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jobs_agent  # noqa: E402  (from this folder, on the path above)

from dcaf_like import Agent, ToolDecision  # noqa: E402
from dcaf_like.domain import ToolCallStatus  # noqa: E402

BROKER = os.environ.get("DCAF_BENCH_BROKER_URL", "redis://127.0.0.1:6379/13")


def proposed(agent: Agent, node: str) -> tuple[str, str]:
    asked = agent.run(f"drain {node}")
    [call] = asked.pending_tool_calls
    return asked.conversation_id, call.id


def approve(agent: Agent, conversation_id: str, call_id: str) -> float:
    started = time.perf_counter()
    agent.decide(conversation_id, [ToolDecision(call_id, True)])
    return time.perf_counter() - started


def approval_cost(store: str, approvals: int) -> tuple[float, float]:
    """(ms to approve a call in process, ms to approve one whose job goes to the broker)."""
    os.environ["DCAF_BENCH_TOOL_SECONDS"] = "0"
    figures = []
    for background in (False, True):
        agent = jobs_agent.make_agent(background=background).configured(repository=store)
        calls = [proposed(agent, f"n{n}") for n in range(approvals + 1)]
        approve(agent, *calls[0])  # warm: the broker's connection, the statements
        figures.append(statistics.median(approve(agent, *call) for call in calls[1:]) * 1000)
        agent.close()
    return figures[0], figures[1]


@contextmanager
def workers(store: str, count: int, env: dict[str, str]) -> Iterator[None]:
    """`count` `dcaf-like worker` processes on the store, killed on the way out."""
    command = [sys.executable, "-m", "dcaf_like.cli", "worker", f"{HERE / 'jobs_agent.py'}:make_agent"]
    processes = [
        subprocess.Popen(
            [*command, "--factory", "--store", store, "--concurrency", "4"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)


def at_once(run: Callable[[int], float], count: int) -> list[float]:
    """`run(n)` for n in range(count), each in a thread of its own, started together."""
    start = threading.Barrier(count)
    times: list[float] = [0.0] * count

    def one(n: int) -> None:
        start.wait()
        times[n] = run(n)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def in_flight(store: str, count: int, seconds: float, background: bool) -> dict[str, float]:
    """Approvals of `count` calls of a `seconds`-long tool at once: p50 and slowest approval (s), and
    seconds until every result was recorded."""
    os.environ["DCAF_BENCH_TOOL_SECONDS"] = repr(seconds)
    agent = jobs_agent.make_agent(background=background).configured(repository=store)
    warm = proposed(agent, "warm")
    approve(agent, *warm)
    recorded(agent, [warm], 60 + seconds)  # the workers are up and have run one job
    calls = [proposed(agent, f"n{n}") for n in range(count)]
    started = time.perf_counter()
    held = at_once(lambda n: approve(agent, *calls[n]), count)
    recorded(agent, calls, 60 + count * seconds)
    ended = time.perf_counter() - started
    agent.close()
    return {"p50": statistics.median(held), "slowest": max(held), "all done": ended}


def recorded(agent: Agent, calls: list[tuple[str, str]], seconds: float) -> None:
    """Wait (at most `seconds`) until every call's result is recorded in the store."""

    def executed(conversation_id: str, call_id: str) -> bool:
        stored = agent.repository.get(conversation_id)
        return stored is not None and stored.tool_call(call_id).status is ToolCallStatus.EXECUTED

    deadline = time.monotonic() + seconds
    while not all(executed(*call) for call in calls):  # a bounded wait for the records
        if time.monotonic() > deadline:
            raise SystemExit("the tools' results were not all recorded")
        time.sleep(0.02)


def report(quick: bool) -> dict[str, Any]:
    approvals, count, seconds = (5, 4, 0.2) if quick else (30, 16, 2.0)
    queue = f"dcaf-bench-{uuid.uuid4().hex[:8]}"
    os.environ.update({"DCAF_BENCH_BROKER_URL": BROKER, "DCAF_BENCH_QUEUE": queue})
    with tempfile.TemporaryDirectory() as folder:
        store = f"sqlite:///{Path(folder) / 'jobs.sqlite3'}"
        in_process, enqueued = approval_cost(store, approvals)
        inline = in_flight(store, count, seconds, background=False)
        env = {**os.environ, "DCAF_BENCH_TOOL_SECONDS": repr(seconds)}
        env.pop("DCAF_STORE", None)
        with workers(store, 2, env):
            engine = in_flight(store, count, seconds, background=True)
    return {
        "approvals": approvals,
        "count": count,
        "seconds": seconds,
        "in process": in_process,
        "enqueued": enqueued,
        "inline": inline,
        "engine": engine,
    }


def markdown(figures: dict[str, Any]) -> str:
    first = "\n".join(
        [
            "| Job engine: the approval | ms (median) |",
            "|---|---|",
            f"| approve a call of an in-process tool that returns at once | {figures['in process']:.2f} |",
            f"| approve a call of a background tool (its job sent to Redis) | {figures['enqueued']:.2f} |",
        ]
    )
    count, seconds = figures["count"], figures["seconds"]
    rows = []
    for name, key in (("in process", "inline"), ("2 Celery workers, 4 each", "engine")):
        held = figures[key]
        rows.append(f"| {name} | {held['p50']:.3f} | {held['slowest']:.3f} | {held['all done']:.2f} |")
    second = "\n".join(
        [
            f"| Tools in flight: {count} calls of a {seconds:g} s tool approved at once"
            " | approval held, p50 s | slowest approval, s | every result recorded, s |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    return f"{first}\n\n{second}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="5 approvals; 4 tools of 0.2 s")
    args = parser.parse_args()
    print(markdown(report(args.quick)))


if __name__ == "__main__":
    main()
