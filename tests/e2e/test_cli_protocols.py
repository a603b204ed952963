"""`dcaf-like serve --a2a --mcp`, in one process and across workers: the flags reach every worker."""

from __future__ import annotations

import os

import httpx
import pytest
from _server import dcaf_like_serve

pytest.importorskip("a2a", reason="the a2a extra is not installed")
pytest.importorskip("mcp", reason="the mcp extra is not installed")

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
    options = ["--factory", "--port", "0", "--a2a", "--mcp", "--workers", str(workers)]
    store = ["--store", f"sqlite:///{tmp_path / 'c.db'}"]
    env = {**os.environ, "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log")}

    with dcaf_like_serve("tests/e2e/process_agent.py:make_agent", *options, *store, env=env) as served:
        card = httpx.get(f"{served.url}/.well-known/agent-card.json", timeout=10).json()
        mcp = httpx.post(
            f"{served.url}/mcp",
            json=INITIALIZE,
            headers={"Accept": "application/json, text/event-stream"},
            timeout=10,
        )

    assert card["name"] == "ops"
    assert {skill["name"] for skill in card["skills"]} >= {"delete_pod", "rotate_password"}
    assert mcp.status_code == 200, mcp.text
    assert mcp.json()["result"]["serverInfo"]
