"""Approvals by teams over two ``dcaf-like serve`` worker processes sharing a store (PostgreSQL, Redis):
a delete_pod in prod needing two SREs runs once after alice and one more SRE approve, though twenty
SREs send the final approval at once; the others are told the call was decided, and every counted
approval and refusal is in ``GET /api/audit``."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user
from _server import dcaf_like_serve

SREs = [f"sre-{n}" for n in range(20)]
KEYS = {
    "carol": "chat+approve+read",
    "alice": "approve",
    "ops": "admin",
    **dict.fromkeys(SREs, "approve+approve:sre"),
}


def secret(name: str) -> str:
    return f"{name}-key-0123456789abcdef"


@pytest.fixture(params=["postgres", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        return f"{url}?table={request.getfixturevalue('postgres_table')}"
    url = request.getfixturevalue("redis_url")
    return f"{url}?prefix={request.getfixturevalue('redis_prefix')}"


def test_twenty_final_approvals_at_once_run_the_call_once(tmp_path: Path, store_url: str) -> None:
    port = "0"  # the supervisor binds one and its workers listen on it
    ledger = tmp_path / "ledger.log"
    keys = ",".join(f"{name}:{scopes}={secret(name)}" for name, scopes in KEYS.items())
    env = {**os.environ, "DCAF_TEST_LEDGER": str(ledger), "DCAF_API_KEYS": keys}
    env.pop("DCAF_STORE", None)
    options = ["--factory", "--port", port, "--workers", "2", "--store", store_url]
    with dcaf_like_serve("tests/e2e/teams_agent.py:make_agent", *options, env=env) as served:

        def post(name: str, body: dict[str, Any]) -> httpx.Response:
            # a connection per request, so the kernel spreads them over both workers
            return httpx.post(
                f"{served.url}/api/chat", json=body, headers={"X-API-Key": secret(name)}, timeout=30
            )

        proposed = post("carol", {"messages": [user("delete pod web-1")]})
        assert proposed.status_code == 200, proposed.text
        (pending,) = proposed.json()["data"]["tool_calls"]
        conversation_id = proposed.json()["data"]["conversation_id"]
        decision = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}
        assert post("carol", decision).json()["error"]["code"] == "not_an_approver"
        first = post("alice", decision)
        assert first.status_code == 200, first.text
        assert first.json()["data"]["tool_calls"][0]["approvals"]["needed"][0]["count"] == 1

        start = threading.Barrier(len(SREs))
        answers: dict[str, tuple[int, str]] = {}

        def final(name: str) -> None:
            start.wait()
            for _ in range(len(SREs)):  # a lost race is tried again, as a client would
                response = post(name, decision)
                code = "ran" if response.status_code == 200 else response.json()["error"]["code"]
                if code != "concurrent_update":
                    break
            answers[name] = (response.status_code, code)

        threads = [threading.Thread(target=final, args=(name,)) for name in SREs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        trail = httpx.get(
            f"{served.url}/api/audit",
            params={"conversation_id": conversation_id},
            headers={"X-API-Key": secret("ops")},
            timeout=30,
        ).json()["records"]

    ran = [name for name, (_, code) in answers.items() if code == "ran"]
    assert len(ran) == 1
    assert sorted(code for _, code in answers.values() if code != "ran") == ["tool_call_already_decided"] * 19
    assert ledger.read_text().split() == ["web-1"]
    outcomes = sorted((r["outcome"], r["decided_by"]) for r in trail)
    assert outcomes == sorted(
        [("refused", "carol"), ("counted", "alice"), ("approved", ran[0])]
        + [("refused", name) for name in SREs if name != ran[0]]
    )
