"""How long a Stop takes to stop a running tool on another worker (issue 35; docs/runs.md, "Stopping a
running tool"): two ``dcaf-like serve`` processes on one store (SQLite unless ``--store URL``), an
``async def`` tool that would take a minute running on worker A, ``POST /api/conversations/{id}/cancel``
sent to worker B; the time from the cancel's answer to worker A's answer to the turn. Timing belongs
here, not in the tests.

    python benchmarks/cancel_latency.py --runs 10
    python benchmarks/cancel_latency.py --runs 10 --store "postgresql://postgres@127.0.0.1:5432/postgres?table=bench"
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from _server import dcaf_like_serve  # noqa: E402

from dcaf_like.testing import OpenAICompatibleServer  # noqa: E402


def measure(runs: int, store_url: str | None = None) -> list[float]:
    seconds: list[float] = []
    with tempfile.TemporaryDirectory() as folder, OpenAICompatibleServer() as model:
        ledger = Path(folder) / "ledger.log"
        store = store_url or f"sqlite:///{folder}/conversations.sqlite3"
        env = {**os.environ, "DCAF_TEST_LEDGER": str(ledger), "DCAF_TEST_OPENAI_URL": model.base_url}
        env.pop("DCAF_STORE", None)
        serve = ("tests/e2e/long_tool_agent.py:make_agent", "--factory", "--port", "0", "--store", store)
        with dcaf_like_serve(*serve, env=env) as worker_a, dcaf_like_serve(*serve, env=env) as worker_b:
            for _ in range(runs):
                conversation_id = f"conv_{uuid.uuid4().hex[:24]}"
                model.call([("snapshot_volume", {"volume": conversation_id})])
                answered: list[float] = []

                def turn(conversation_id: str = conversation_id, answered: list[float] = answered) -> None:
                    body = {"messages": [{"role": "user", "content": "snapshot",
                                          "data": {"conversation_id": conversation_id}}]}  # fmt: skip
                    httpx.post(f"{worker_a.url}/api/chat", json=body, timeout=90)
                    answered.append(time.perf_counter())

                running = threading.Thread(target=turn, daemon=True)
                running.start()
                while not (ledger.exists() and f"started {conversation_id}" in ledger.read_text()):
                    time.sleep(0.01)
                httpx.post(f"{worker_b.url}/api/conversations/{conversation_id}/cancel", timeout=10)
                asked = time.perf_counter()
                running.join(90)
                seconds.append(answered[0] - asked)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--store", help="a store URL both workers share (default: a fresh SQLite file)")
    args = parser.parse_args()
    seconds = measure(args.runs, args.store)
    print(
        f"cancel to stop, async tool on another worker: median {statistics.median(seconds):.3f} s, "
        f"max {max(seconds):.3f} s over {len(seconds)} runs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
