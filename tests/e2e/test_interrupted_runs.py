"""A server killed while an approved tool runs: the call is settled as interrupted by the next
worker, never run again, and the conversation goes on with a model that, like OpenAI, refuses a
transcript holding a tool call without a result. On the same machine the next worker knows the first
one exited, and settles the call at once rather than after its lease (docs/runs.md, "Claims and
leases")."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user
from _server import dcaf_like_serve

from dcaf_like.testing import OpenAICompatibleServer

TARGET = "tests/e2e/slow_agent.py:make_agent"
LEASE = 600.0  # far longer than the test: a settlement before it is the dead worker's, not the lease's


def wait_for(condition: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # a bounded wait for an event, not a measure of time
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


def test_a_call_whose_server_was_killed_is_settled_at_once_as_interrupted_and_the_next_turn_works(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.log"
    ledger.touch()
    store = f"sqlite:///{tmp_path / 'conversations.sqlite3'}"
    serve = (TARGET, "--factory", "--port", "0", "--store", store)
    with OpenAICompatibleServer() as model:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(ledger),
            "DCAF_TEST_OPENAI_URL": model.base_url,
            "DCAF_TEST_LEASE": str(LEASE),
        }
        model.call([("restart_deployment", {"name": "web"})], text="I will restart web.")
        with dcaf_like_serve(*serve, env=env) as first:
            proposed = httpx.post(
                f"{first.url}/api/chat", json={"messages": [user("restart web")]}, timeout=10
            )
            data = proposed.json()["data"]
            conversation_id, [pending] = data["conversation_id"], data["tool_calls"]
            approval = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}

            def approve_and_wait() -> None:
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(f"{first.url}/api/chat", json=approval, timeout=30)

            approving = threading.Thread(target=approve_and_wait, daemon=True)
            approving.start()
            wait_for(lambda: ledger.read_text().strip(), "the tool started")
            assert first.process is not None
            first.process.kill()  # SIGKILL: nothing of the run is saved but its claim and lease
            first.process.wait(timeout=15)
            approving.join(timeout=30)

        model.reply("I cannot tell whether web restarted: please check it before trying again.")
        with dcaf_like_serve(*serve, env=env) as second:
            stored = httpx.get(f"{second.url}/api/conversations/{conversation_id}", timeout=10).json()
            [claimed] = stored["tool_calls"]
            assert claimed["status"] == "approved"  # a read settles nothing: the next turn does

            answer = httpx.post(
                f"{second.url}/api/chat",
                json={"messages": [user("did it restart?", conversation_id=conversation_id)]},
                timeout=10,
            )
            replay = httpx.post(f"{second.url}/api/chat", json=approval, timeout=10)
            after = httpx.get(f"{second.url}/api/conversations/{conversation_id}", timeout=10).json()

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["content"].startswith("I cannot tell whether web restarted")
    [settled] = body["data"]["executed_tool_calls"]
    assert (settled["id"], settled["status"]) == (pending["id"], "interrupted")
    assert "may or may not have run" in settled["error"]
    tool_messages = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    [result] = tool_messages
    assert "Outcome unknown" in result["content"]
    assert "may or may not have run" in result["content"]
    assert replay.status_code == 409
    assert [c["status"] for c in after["tool_calls"]] == ["interrupted"]
    assert len(ledger.read_text().splitlines()) == 1  # started once, never again
    [interrupted] = after["tool_calls"]
    assert interrupted["finished_at"] < claimed["lease_expires_at"]  # settled before its lease ran out


def test_the_scripted_openai_server_refuses_a_tool_call_without_a_result() -> None:
    with OpenAICompatibleServer() as model:
        model.reply("never sent")
        messages = [
            {"role": "user", "content": "restart web"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "restart", "arguments": "{}"}}
            ]},
            {"role": "user", "content": "well?"},
        ]  # fmt: skip
        refused = httpx.post(
            f"{model.base_url}/chat/completions",
            json={"model": "test-model", "messages": messages},
            timeout=10,
        )
        answered = [*messages[:2], {"role": "tool", "tool_call_id": "call_1", "content": "ok"}, messages[2]]
        accepted = httpx.post(
            f"{model.base_url}/chat/completions",
            json={"model": "test-model", "messages": answered},
            timeout=10,
        )

    assert refused.status_code == 400
    assert "call_1" in refused.json()["error"]["message"]
    assert accepted.status_code == 200
