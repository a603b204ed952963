"""Hooks on a real server process: a sync and an async hook, a veto, and a hook that raises."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from _helpdesk import approve, user
from _server import dcaf_like_serve


@pytest.fixture
def served(tmp_path):
    ledger = tmp_path / "ledger.log"
    ledger.touch()
    env = {**os.environ, "DCAF_TEST_LEDGER": str(ledger)}
    with (
        dcaf_like_serve("tests/e2e/hooks_agent.py:make_agent", "--factory", "--port", "0", env=env) as served,
        httpx.Client(base_url=served.url, timeout=10) as client,
    ):
        yield client, ledger


def propose_and_approve(client: httpx.Client, text: str) -> httpx.Response:
    proposed = client.post("/api/chat", json={"messages": [user(text)]}).json()
    pending = proposed["data"]["tool_calls"][0]
    conversation_id = proposed["data"]["conversation_id"]
    return client.post(
        "/api/chat", json={"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}
    )


def test_a_sync_hook_records_what_ran_and_an_async_hook_vetoes_an_approved_call(served):
    client, ledger = served

    ran = propose_and_approve(client, "delete pod web-1")
    vetoed = propose_and_approve(client, "delete pod api-1 in prod")

    assert ran.status_code == vetoed.status_code == 200, (ran.text, vetoed.text)
    assert ran.json()["data"]["executed_tool_calls"][0]["status"] == "executed"
    [refused] = vetoed.json()["data"]["executed_tool_calls"]
    assert refused["status"] == "failed"
    assert refused["error"] == "not run: refused by the hook 'freeze': prod is frozen this week"
    assert vetoed.json()["content"] == f"Done: Error: {refused['error']}"  # the model read the refusal
    assert ledger.read_text().splitlines() == [
        "ran delete_pod default/web-1",
        "audit delete_pod executed web-1",
    ]  # a vetoed call did not run: no after_tool for it


def test_a_hook_that_raises_fails_the_turn_closed_with_a_json_error_and_the_conversation_goes_on(served):
    client, ledger = served

    failed = propose_and_approve(client, "delete pod boom")

    assert failed.status_code == 500
    error = failed.json()["error"]
    assert error["code"] == "hook_failed"
    assert error["message"] == (
        "the hook 'tripwire' failed in before_tool (RuntimeError); the turn stopped, no tool ran after it"
    )
    assert "Traceback" not in failed.text
    assert "/srv/secret" not in failed.text
    conversation_id = error["conversation_id"]
    stored = client.get(f"/api/conversations/{conversation_id}").json()
    [call] = stored["tool_calls"]
    assert (call["status"], call["error"]) == ("failed", "not run: the hook 'tripwire' failed before it ran")
    assert "ran delete_pod" not in ledger.read_text()
    assert f"on_error HookFailed {conversation_id}" in ledger.read_text()

    goes_on = client.post("/api/chat", json={"messages": [user("hello", conversation_id=conversation_id)]})
    assert goes_on.status_code == 200, goes_on.text
    assert goes_on.json()["content"] == "Nothing to do."


def test_a_hook_that_raises_ends_a_stream_with_a_json_error_event(served):
    client, _ = served
    proposed = client.post("/api/chat", json={"messages": [user("delete pod boom")]}).json()
    pending = proposed["data"]["tool_calls"][0]
    body = {
        "messages": [user(conversation_id=proposed["data"]["conversation_id"], tool_calls=[approve(pending)])]
    }

    with client.stream("POST", "/api/chat-stream", json=body) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]

    assert [e["type"] for e in events][-1] == "error"
    assert (events[-1]["status"], events[-1]["error"]["code"]) == (500, "hook_failed")
    assert "/srv/secret" not in json.dumps(events)
    finished = [e for e in events if e["type"] == "tool_finished"]
    assert [e["tool_call"]["status"] for e in finished] == ["failed"]
