"""The audit trail over real server processes (ADR 34): ``dcaf-like serve --workers 2`` on one store,
decisions made through both workers at once (each proposal approved by ten simultaneous requests: one
approval and nine refusals, each recorded unless it lost the race to save), the trail exported as
JSON Lines, then ``dcaf-like audit verify`` on the stopped server's store: one chain, every link and
digest intact."""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user
from _server import COMMAND, ROOT, dcaf_like_serve, store_url_of

from dcaf_like import Agent
from dcaf_like.testing import FakeRuntime

SECRET = "the e2e audit key: not a real one"


@pytest.fixture(params=["sqlite", "postgres", "redis", "dynamodb"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_of(request.param, request, tmp_path)


def test_decisions_through_two_workers_keep_one_chain_that_verifies_signed(
    store_url: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "audit.key"
    key_file.write_text(SECRET)
    key_file.chmod(0o600)
    port = "0"  # the supervisor binds one and its workers listen on it
    env = {k: v for k, v in os.environ.items() if k not in ("DCAF_STORE", "DCAF_AUDIT_KEY")}
    env["DCAF_TEST_LEDGER"] = str(tmp_path / "ledger.log")
    options = [
        "--factory",
        "--port",
        port,
        "--workers",
        "2",
        "--store",
        store_url,
        "--audit-key-file",
        str(key_file),
    ]
    with dcaf_like_serve("tests/e2e/rules_agent.py:make_agent", *options, env=env) as served:
        for n in range(4):
            proposed = httpx.post(
                f"{served.url}/api/chat", json={"messages": [user(f"delete pod web-{n}")]}, timeout=30
            )
            assert proposed.status_code == 200, proposed.text
            (pending,) = proposed.json()["data"]["tool_calls"]
            decision = {
                "messages": [
                    user(
                        conversation_id=proposed.json()["data"]["conversation_id"],
                        tool_calls=[approve(pending)],
                    )
                ]
            }

            def send(_: int, decision: dict[str, object] = decision) -> int:
                with httpx.Client(
                    base_url=served.url, timeout=30
                ) as client:  # a connection each: both workers
                    return client.post("/api/chat", json=decision).status_code

            with ThreadPoolExecutor(max_workers=10) as pool:
                statuses = sorted(pool.map(send, range(10)))
            assert statuses == [200] + [409] * 9
        exported = httpx.get(f"{served.url}/api/audit/export", timeout=30)

    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    assert SECRET not in exported.text
    lines = [json.loads(line) for line in exported.text.splitlines()]
    records = [line for line in lines if line["type"] == "record"]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    # Each approval recorded; of the nine refused, those refused as already decided (a request that
    # lost the race to save is a conflict, not a decision): how many depends on the race.
    assert [r["outcome"] for r in records].count("approved") == 4
    assert {r["outcome"] for r in records} == {"approved", "refused"}
    assert lines[-1] == {"type": "head", "seq": len(records), "hash": records[-1]["hash"]}

    verified = subprocess.run(
        [COMMAND, "audit", "verify", "--store", store_url, "--namespace", "ops", "--key-file", str(key_file)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"intact: {len(records)} records chained" in verified.stdout
    assert re.search(r"\d+ digests? signed", verified.stdout)  # at least the one signed at the stop
    assert SECRET not in verified.stdout + verified.stderr + served.log


ALICE, OPS = "alice-key-0123456789", "ops-key-0123456789"


def test_the_export_is_for_admin_keys_only(start_server: Any, cluster: Any) -> None:
    agent = Agent(tools=cluster.tools(), runtime=FakeRuntime(["hi"]))
    server = start_server(agent, api_keys={ALICE: "alice:chat+read+approve", OPS: "ops:admin"})
    server.post("/api/chat", headers={"Authorization": f"Bearer {ALICE}"}, json={"messages": [user("hi")]})

    refused = server.get("/api/audit/export", headers={"Authorization": f"Bearer {ALICE}"})
    exported = server.get("/api/audit/export", headers={"Authorization": f"Bearer {OPS}"})

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "missing_scope"
    assert exported.status_code == 200
    assert [json.loads(line) for line in exported.text.splitlines()] == [
        {"type": "head", "seq": 0, "hash": ""}
    ]


def test_an_ed25519_key_signs_and_its_public_half_alone_verifies(tmp_path: Path) -> None:
    """docs/operations.md, "Proving the trail": the server signs with the private key, `audit verify`
    checks with the public key, and a server given only the public key refuses to start."""
    private = tmp_path / "audit.pem"
    made = subprocess.run(
        [COMMAND, "audit", "keygen", str(private)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    public = tmp_path / "audit.pem.pub"
    store_url = f"sqlite:///{tmp_path / 'agent.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("DCAF_STORE", "DCAF_AUDIT_KEY")}
    env["DCAF_TEST_LEDGER"] = str(tmp_path / "ledger.log")
    target = "tests/e2e/rules_agent.py:make_agent"

    refused = subprocess.run(
        [COMMAND, "serve", target, "--factory", "--store", store_url, "--audit-key-file", str(public)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "public key" in refused.stderr

    options = ["--factory", "--store", store_url, "--audit-key-file", str(private)]
    with dcaf_like_serve(target, *options, env=env) as served:
        proposed = httpx.post(
            f"{served.url}/api/chat", json={"messages": [user("delete pod web-1")]}, timeout=30
        )
        assert proposed.status_code == 200, proposed.text
        (pending,) = proposed.json()["data"]["tool_calls"]
        conversation_id = proposed.json()["data"]["conversation_id"]
        decided = httpx.post(
            f"{served.url}/api/chat",
            json={"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]},
            timeout=30,
        )
        assert decided.status_code == 200, decided.text

    verified = subprocess.run(
        [COMMAND, "audit", "verify", "--store", store_url, "--namespace", "ops", "--key-file", str(public)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert re.search(r"intact: \d+ records? chained, \d+ digests? signed", verified.stdout)
    assert private.read_text() not in served.log
