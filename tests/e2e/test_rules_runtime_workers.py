"""The test kit's RulesRuntime answers from the request alone, so one agent served by two worker
processes is driven through ten turns with approvals (issue 36): FakeRuntime's script, one per
process, answered the second request "Stopped." and the third with a 502."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from _helpdesk import approve, user
from _server import dcaf_like_serve


def test_ten_turns_with_approvals_over_two_workers(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.log"
    env = {**os.environ, "DCAF_TEST_LEDGER": str(ledger)}
    env.pop("DCAF_STORE", None)
    options = ["--factory", "--port", "0", "--workers", "2", "--store", f"sqlite:///{tmp_path / 'c.db'}"]
    answers = []
    target = "tests/e2e/rules_agent.py:make_agent"
    with (
        dcaf_like_serve(target, *options, env=env) as served,
        # a connection per request, so the kernel spreads them over both workers
        httpx.Client(
            base_url=served.url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0)
        ) as client,
    ):
        for n in range(10):
            proposed = client.post("/api/chat", json={"messages": [user(f"delete pod web-{n}")]})
            assert proposed.status_code == 200, proposed.text
            (pending,) = proposed.json()["data"]["tool_calls"]
            conversation_id = proposed.json()["data"]["conversation_id"]
            decision = user(conversation_id=conversation_id, tool_calls=[approve(pending)])
            done = client.post("/api/chat", json={"messages": [decision]})
            assert done.status_code == 200, done.text
            answers.append(done.json()["content"])

    assert answers == [f'Done: pod "web-{n}" deleted' for n in range(10)]
    assert ledger.read_text().split() == [f"web-{n}" for n in range(10)]
