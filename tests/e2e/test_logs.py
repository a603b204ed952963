"""JSON logs from a real server process: one object per line with the request's ids, and no secret."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import httpx
from _helpdesk import approve, user
from _server import dcaf_like_serve

ROOT = Path(__file__).resolve().parents[2]
COMMAND = str(Path(sys.executable).parent / "dcaf-like")
KEY = "ops-key-0123456789abcdef"
SECRETS = ("AKIAIOSFODNN7SECRET", "wJalrXUtnFEMI-secret-value", "tok-live-123456", KEY)


def test_json_logs_carry_ids_and_never_a_secret(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DCAF_STORE", "DCAF_LOG_FORMAT")},
        "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
        "DCAF_API_KEYS": f"olga={KEY}",
    }
    context = {
        "tenant": "acme",
        "aws_access_key_id": SECRETS[0],
        "aws_secret_access_key": SECRETS[1],
        "api_token": SECRETS[2],
    }
    serving = dcaf_like_serve(
        "tests/e2e/process_agent.py:make_agent", "--factory", "--port", "0",
        "--store", f"sqlite:///{tmp_path / 'c.db'}", "--log-format", "json", "--log-level", "debug", env=env,
    )  # fmt: skip
    with (
        serving as served,
        httpx.Client(base_url=served.url, headers={"X-API-Key": KEY}, timeout=10) as client,
    ):
        first = client.post(
            "/api/chat",
            headers={"X-Request-ID": "req-propose-1"},
            json={"messages": [user("delete pod web-1 in prod")], "platform_context": context},
        ).json()
        (pending,) = first["data"]["tool_calls"]
        conversation_id = first["data"]["conversation_id"]
        second = client.post(
            "/api/chat",
            headers={"X-Request-ID": "req-approve-2"},
            json={
                "messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])],
                "platform_context": context,
            },
        )
        rotate = client.post("/api/chat", json={"messages": [user("rotate the password of bob")]}).json()
        (masked,) = rotate["data"]["tool_calls"]
        rotated = client.post(
            "/api/chat",
            json={
                "messages": [
                    user(conversation_id=rotate["data"]["conversation_id"], tool_calls=[approve(masked)])
                ]
            },
        ).json()
        stored = client.get(f"/api/conversations/{rotate['data']['conversation_id']}").text
    log = served.log

    records = [json.loads(line) for line in log.splitlines() if line.strip()]
    access = {r["request_id"]: r for r in records if r.get("logger") == "dcaf_like.server" and "method" in r}
    assert access["req-propose-1"]["conversation_id"] == conversation_id
    propose = access["req-propose-1"]
    assert (propose["method"], propose["path"], propose["status"], propose["user"], propose["level"]) == (
        "POST", "/api/chat", 200, "olga", "INFO",
    )  # fmt: skip
    assert propose["duration_ms"] > 0
    assert access["req-approve-2"]["conversation_id"] == conversation_id
    for secret in SECRETS:
        assert secret not in log
        assert secret not in second.text
        assert secret not in json.dumps(first)

    # An argument marked secret: the tool got the password the model made up; nobody else saw it.
    assert masked["input"] == {"user": "bob", "new_password": "***"}
    assert rotated["data"]["executed_tool_calls"][0]["output"] == "password of bob changed"
    (password,) = re.findall(r"password bob (pw-\w+)", (tmp_path / "ledger.log").read_text())
    for seen in (log, json.dumps(rotate), json.dumps(rotated), stored):
        assert password not in seen
