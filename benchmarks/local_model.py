"""Time per turn of the local model (LocalRuntime, llama.cpp) on this machine.

    .venv/bin/python benchmarks/local_model.py [--runs 5] [--markdown]

Each turn runs through an Agent with the example operations tools (no HTTP): the model's prompt
processing and generation dominate. Prints the load time and the median and worst of each turn, and
which instruction sets the installed llama.cpp build uses (portable unless built with LLAMA_NATIVE=1).
`make bench` runs it in a child process (so a native crash is reported, not fatal), and runs it again
with the Python named by DCAF_BENCH_NATIVE_PYTHON, a virtualenv holding a native build, when set.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from k8s_agent import Cluster, build_agent

from dcaf_like.runtimes.local import LocalRuntime
from dcaf_like.runtimes.local_build import installed_build


def measure(runs: int) -> tuple[float, dict[str, list[float]]]:
    start = time.perf_counter()
    runtime = LocalRuntime().load()
    load = time.perf_counter() - start
    timings: dict[str, list[float]] = {
        "propose delete_pod": [],
        "answer after approval": [],
        "read-only question": [],
    }
    for _ in range(runs):
        agent = build_agent(runtime, Cluster())
        t = time.perf_counter()
        proposed = agent.run("delete the pod web-1 in namespace prod")
        timings["propose delete_pod"].append(time.perf_counter() - t)
        if proposed.pending_tool_calls:
            t = time.perf_counter()
            agent.approve(proposed.conversation_id, proposed.pending_tool_calls[0].id)
            timings["answer after approval"].append(time.perf_counter() - t)
        t = time.perf_counter()
        build_agent(runtime, Cluster()).run("which pods are running in namespace prod?")
        timings["read-only question"].append(time.perf_counter() - t)
    return load, timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="one table row per turn kind")
    args = parser.parse_args()
    build = installed_build()
    kind = "portable" if not build.non_portable else "native"
    load, timings = measure(args.runs)
    if args.markdown:
        for name, values in timings.items():
            median, worst = statistics.median(values), max(values)
            print(
                f"| {kind} ({build.describe()}) | {name} | {median:.2f} s | {worst:.2f} s | {len(values)} |"
            )
        return
    print(f"llama.cpp build: {kind}: {build.describe()}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"model load: {load:.2f} s")
    for name, values in timings.items():
        median, worst = statistics.median(values), max(values)
        print(f"{name:24} median {median:.2f} s, worst {worst:.2f} s ({len(values)} runs)")


if __name__ == "__main__":
    main()
