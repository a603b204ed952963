"""`dcaf-like serve --a2a --mcp`, in one process and across workers: the flags reach every worker."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("a2a", reason="the a2a extra is not installed")
pytest.importorskip("mcp", reason="the mcp extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_with_a2a_and_mcp_publishes_the_card_and_answers_mcp(tmp_path, workers):
    program = str(Path(sys.executable).parent / "dcaf-like")
    command = [program, "serve", "tests/e2e/process_agent.py:make_agent"]
    options = ["--factory", "--port", "0", "--a2a", "--mcp", "--workers", str(workers)]
    store = ["--store", f"sqlite:///{tmp_path / 'c.db'}"]
    env = {**os.environ, "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log")}
    if workers > 1:  # uvicorn's workers cannot share port 0: pick one
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            options[2] = str(probe.getsockname()[1])
    process = subprocess.Popen(
        [*command, *options, *store], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        port = int(options[2]) if workers > 1 else None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            if match := re.search(r"running on http://127\.0\.0\.1:(\d+)", process.stderr.readline()):
                port = int(match.group(1))
        assert port is not None, "the server never said where it listens"
        while time.monotonic() < deadline:  # every worker up: each answers its share of connections
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        base = f"http://127.0.0.1:{port}"

        card = httpx.get(f"{base}/.well-known/agent-card.json", timeout=10).json()
        mcp = httpx.post(
            f"{base}/mcp",
            json=INITIALIZE,
            headers={"Accept": "application/json, text/event-stream"},
            timeout=10,
        )

        assert card["name"] == "ops"
        assert {skill["name"] for skill in card["skills"]} >= {"delete_pod", "rotate_password"}
        assert mcp.status_code == 200, mcp.text
        assert mcp.json()["result"]["serverInfo"]
    finally:
        process.terminate()
        process.communicate(timeout=15)
