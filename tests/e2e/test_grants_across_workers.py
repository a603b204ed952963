"""docs/approvals.md, "Grants", over two ``dcaf-like serve`` worker processes sharing a store: a grant
bob makes on one worker approves alice's matching calls on either, never a denied or an irreversible
one nor another requester's; once revoked (on either worker), no call is approved by it on any.
(Its expiry by the agent's clock is tested where the clock can be moved: tests/e2e/test_grants_http.py.)"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import user
from _server import dcaf_like_serve, store_url_of

KEYS = {"alice": "chat+read", "carol": "chat", "bob": "approve+admin", "ops": "admin"}


def secret(name: str) -> str:
    return f"{name}-key-0123456789abcdef"


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgres"])
def test_a_grant_made_on_one_worker_approves_on_every_worker_until_revoked(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    with socket.socket() as probe:  # uvicorn's workers cannot share port 0
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    ledger = tmp_path / "ledger.log"
    keys = ",".join(f"{name}:{scopes}={secret(name)}" for name, scopes in KEYS.items())
    env = {**os.environ, "DCAF_TEST_LEDGER": str(ledger), "DCAF_API_KEYS": keys}
    env.pop("DCAF_STORE", None)
    store = store_url_of(kind, request, tmp_path)
    options = ["--factory", "--port", port, "--workers", "2", "--store", store]
    with dcaf_like_serve("tests/e2e/grants_agent.py:make_agent", *options, env=env) as served:

        def call(method: str, path: str, name: str, body: Any = None) -> httpx.Response:
            # a connection per request, so the kernel spreads them over both workers
            return httpx.request(
                method, f"{served.url}{path}", json=body, headers={"X-API-Key": secret(name)}, timeout=30
            )

        def ask(text: str, name: str = "alice") -> dict[str, Any]:
            response = call("POST", "/api/chat", name, {"messages": [user(text)]})
            assert response.status_code == 200, response.text
            data: dict[str, Any] = response.json()["data"]
            return data

        body = {
            "tool": "restart_pod",
            "requester": "alice",
            "arguments": {"namespace": "dev"},
            "duration": 600,
        }
        made = call("POST", "/api/grants", "bob", body)
        assert made.status_code == 201, made.text
        grant = made.json()
        for n in range(6):  # both workers, most likely several times each
            data = ask(f"restart web-{n} dev")
            assert data["tool_calls"] == [], data
            assert data["executed_tool_calls"][0]["grant"]["id"] == grant["id"]

        assert [c["name"] for c in ask("restart web-9 frozen")["rejected_tool_calls"]] == ["restart_pod"]
        assert [c["name"] for c in ask("delete web-9 dev")["tool_calls"]] == ["delete_pod"]
        assert [c["name"] for c in ask("restart web-9 dev", name="carol")["tool_calls"]] == ["restart_pod"]

        revoked = call("DELETE", f"/api/grants/{grant['id']}", "bob")
        assert revoked.status_code == 200, revoked.text
        for n in range(6):
            [waiting] = ask(f"restart web-{n} dev")["tool_calls"]
            assert "grant" not in waiting

        records = call("GET", "/api/audit", "ops").json()["records"]
        assert sum(r["decider"] == "grant" for r in records) == 6
        assert [r["outcome"] for r in records if r["tool_name"] == "restart_pod" and not r["call_id"]] == [
            "revoked",
            "granted",
        ]
    assert sorted(ledger.read_text().split("\n")[:-1]) == sorted(f"restart dev/web-{n}" for n in range(6))
