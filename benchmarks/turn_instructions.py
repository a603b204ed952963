"""A turn against Agno's, counted in instructions (callgrind), which the machine's load does not move.

    .venv/bin/python benchmarks/turn_instructions.py            # seeds 0, 1, 2: about 15 minutes
    .venv/bin/python benchmarks/turn_instructions.py --quick    # one seed, a few turns: checks it runs

`make bench`'s turn against Agno's is timed (`benchmarks/peers.py`), and a loaded machine moves it
several-fold. This counts the instructions instead: each framework's turn of `benchmarks/peers.py` (a
new conversation, one auto-approved tool call, then text, with a model that answers at once) run under
``valgrind --tool=callgrind`` after a warm-up, once with `low` turns and once with `high`; the
difference over ``high - low`` turns is one turn's count, start-up and warm-up cancelled out. The hash
seed moves a count by a few percent (dict and set layouts), so each framework is counted under every
seed given and the mean reported. Needs valgrind (Debian's ``valgrind``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("dcaf_like", "agno")


def child(framework: str, warmup: int, turns: int) -> None:
    """Run `framework`'s turn `warmup` times, then `turns` times (what callgrind counts)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.peers import _agno_turn, _dcaf_turn

    run = _dcaf_turn() if framework == "dcaf_like" else _agno_turn()
    for _ in range(warmup + turns):
        run()


def instructions(framework: str, seed: int, warmup: int, turns: int, directory: str) -> int:
    """Every instruction a child process running `turns` turns (after `warmup`) executed."""
    out = Path(directory) / f"{framework}.{seed}.{turns}.out"
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    subprocess.run(
        [*valgrind, sys.executable, __file__, "--child", framework, str(warmup), str(turns)],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": str(seed), "AGNO_TELEMETRY": "false"},
        cwd=ROOT,
    )
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"callgrind wrote no summary in {out}")


def per_turn(framework: str, seed: int, warmup: int, low: int, high: int) -> float:
    """One turn's instructions: the two runs' difference over the turns between them."""
    with tempfile.TemporaryDirectory() as directory, ThreadPoolExecutor(2) as pool:
        few, many = pool.map(lambda n: instructions(framework, seed, warmup, n, directory), (low, high))
    return (many - few) / (high - low)


def report(seeds: list[int], warmup: int, low: int, high: int) -> dict[str, Any]:
    counts = {f: [per_turn(f, seed, warmup, low, high) for seed in seeds] for f in FRAMEWORKS}
    means = {f: statistics.mean(c) for f, c in counts.items()}
    return {"seeds": seeds, "counts": counts, "means": means, "ratio": means["agno"] / means["dcaf_like"]}


def markdown(results: dict[str, Any]) -> str:
    seeds = ", ".join(map(str, results["seeds"]))
    lines = [
        "### A turn, in instructions (callgrind)",
        "",
        "`.venv/bin/python benchmarks/turn_instructions.py`: instructions per turn, the mean over hash "
        f"seeds {seeds} (each seed's count in brackets).",
        "",
        "| framework | instructions per turn |",
        "|---|---|",
    ]
    for framework in FRAMEWORKS:
        each = ", ".join(f"{c / 1000:,.1f}k" for c in results["counts"][framework])
        lines.append(f"| {framework} | {results['means'][framework] / 1000:,.1f}k ({each}) |")
    lines += ["", f"Agno's ÷ dcaf_like's: {results['ratio']:.2f}x"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, a few turns: checks that it runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--child", nargs=3, metavar=("FRAMEWORK", "WARMUP", "TURNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        framework, warmup, turns = args.child
        child(framework, int(warmup), int(turns))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    if args.quick:
        results = report([0], warmup=2, low=1, high=3)
    else:
        results = report(args.seeds, warmup=30, low=20, high=120)
    print(markdown(results))


if __name__ == "__main__":
    main()
