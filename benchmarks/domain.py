"""The domain's hot paths, each beside the plain code it stands for.

    .venv/bin/python benchmarks/domain.py            # prints a Markdown table
    .venv/bin/python benchmarks/domain.py --quick    # a few iterations: checks that it runs

A fast path in the domain lives in a module of its own, with a test that pins its output to the plain
version's (docs/architecture.md, "Performance budget"). This shows what each one buys: microseconds
per call of the fast path and of the plain one, the best of several rounds, on the arguments of a
typical tool call. The last row is what the domain's part of one gated call costs in all.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from dcaf_like.domain import Conversation, ToolInput
from dcaf_like.domain._canonical_json import canonical_json, plain_canonical_json

ROUNDS = 5
FLAT = {"name": "web-1", "namespace": "prod", "replicas": 3, "force": False}
NESTED = {"name": "web-1", "selector": {"app": "web", "tier": ["frontend", "edge"]}, "grace_seconds": 30}


def microseconds(run: Callable[[], Any], iterations: int) -> float:
    """The best of ROUNDS rounds of `iterations` calls, per call."""
    for _ in range(max(3, iterations // 10)):
        run()
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(iterations):
            run()
        best = min(best, time.perf_counter() - start)
    return best / iterations * 1e6


def call_lifecycle() -> None:
    """The domain's part of one gated call: a turn's messages, the proposal, its approval, its result."""
    conversation = Conversation.start(at=0.0)
    conversation.add_user_message("delete web-1 in prod", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call("delete_pod", ToolInput.of(FLAT), requires_approval=True, at=0.0)
    conversation.approve_tool_call(call.id.value, by="ops", at=0.0)
    conversation.record_tool_result(call.id.value, "deleted", at=0.0)


def report(quick: bool) -> list[tuple[str, str, float, float | None]]:
    """Rows of (what, plain code, fast µs, plain µs)."""
    n = 50 if quick else 20_000
    stored = ToolInput.of(FLAT).canonical_json
    kept = ToolInput(stored)
    kept.as_dict()
    return [
        (
            "canonical JSON of 4 flat arguments (`_canonical_json.canonical_json`)",
            "`json.dumps(sort_keys=True, ...)`",
            microseconds(lambda: canonical_json(FLAT), n),
            microseconds(lambda: plain_canonical_json(FLAT), n),
        ),
        (
            "canonical JSON of nested arguments",
            "`json.dumps(sort_keys=True, ...)`",
            microseconds(lambda: canonical_json(NESTED), n),
            microseconds(lambda: plain_canonical_json(NESTED), n),
        ),
        (
            "a stored input's arguments, read again (`ToolInput.as_dict`, parsed form kept)",
            "`json.loads(canonical_json)`",
            microseconds(kept.as_dict, n),
            microseconds(lambda: json.loads(stored), n),
        ),
        (
            "one gated call in a `Conversation`: propose, approve, record its result",
            "",
            microseconds(call_lifecycle, n // 4),
            None,
        ),
    ]


def markdown(rows: list[tuple[str, str, float, float | None]]) -> str:
    lines = ["| Domain hot path | µs | plain code | µs |", "|---|---|---|---|"]
    for what, plain, fast, slow in rows:
        lines.append(f"| {what} | {fast:.2f} | {plain} | {'' if slow is None else f'{slow:.2f}'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a few iterations: checks that it runs")
    print(markdown(report(parser.parse_args().quick)))


if __name__ == "__main__":
    main()
