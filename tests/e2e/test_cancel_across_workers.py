"""A cancel sent to one worker stops a turn running on another: two ``dcaf-like serve`` processes on
one store, the turn waiting for a slow model on worker A, the cancel posted to worker B."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import user
from _server import dcaf_like_serve

from dcaf_like.testing import OpenAICompatibleServer

TARGET = "tests/e2e/slow_agent.py:make_agent"


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'conversations.sqlite3'}"
    url = request.getfixturevalue("redis_url")
    prefix = request.getfixturevalue("redis_prefix")
    return f"{url}?prefix={prefix}"


def test_a_cancel_sent_to_worker_b_stops_a_turn_running_on_worker_a(store_url: str, tmp_path: Path) -> None:
    conversation_id = f"conv_{uuid.uuid4().hex[:24]}"  # chosen by the client, so it can cancel the first turn
    serve = (TARGET, "--factory", "--port", "0", "--store", store_url)
    with OpenAICompatibleServer() as model:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
            "DCAF_TEST_OPENAI_URL": model.base_url,
            "DCAF_TEST_LEASE": "60",
        }
        model.reply("an answer nobody waits for", delay=30)
        model.reply("Summary: the incident is over.")
        with dcaf_like_serve(*serve, env=env) as worker_a, dcaf_like_serve(*serve, env=env) as worker_b:
            outcome: dict[str, Any] = {}

            def ask_a() -> None:
                turn = {"messages": [user("summarize the incident", conversation_id=conversation_id)]}
                outcome["response"] = httpx.post(f"{worker_a.url}/api/chat", json=turn, timeout=25)

            asking = threading.Thread(target=ask_a, daemon=True)
            asking.start()
            deadline = time.monotonic() + 20
            while not model.requests:  # worker A waits for the model (a bounded wait, not a measure)
                if time.monotonic() > deadline:
                    pytest.fail("worker A never called the model")
                time.sleep(0.05)
            cancel = httpx.post(f"{worker_b.url}/api/conversations/{conversation_id}/cancel", timeout=10)
            asking.join(timeout=25)

            follow_up = httpx.post(
                f"{worker_b.url}/api/chat",
                json={"messages": [user("try again", conversation_id=conversation_id)]},
                timeout=10,
            )

    assert cancel.status_code == 202
    assert cancel.json() == {"conversation_id": conversation_id, "cancel_requested": True}
    response = outcome["response"]
    assert response.status_code == 200, response.text
    assert response.json()["meta"]["stop_reason"] == "cancelled"
    assert response.json()["content"] == ""
    assert follow_up.status_code == 200, follow_up.text
    assert follow_up.json()["content"] == "Summary: the incident is over."


def test_a_cancel_sent_to_worker_b_stops_an_async_tool_running_on_worker_a(
    store_url: str, tmp_path: Path
) -> None:
    """docs/runs.md, "Stopping a running tool": the tool is cancelled, not waited for."""
    conversation_id = f"conv_{uuid.uuid4().hex[:24]}"
    ledger = tmp_path / "ledger.log"
    serve = ("tests/e2e/long_tool_agent.py:make_agent", "--factory", "--port", "0", "--store", store_url)
    with OpenAICompatibleServer() as model:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(ledger),
            "DCAF_TEST_OPENAI_URL": model.base_url,
        }
        model.call([("snapshot_volume", {"volume": "vol-1"})])
        with dcaf_like_serve(*serve, env=env) as worker_a, dcaf_like_serve(*serve, env=env) as worker_b:
            outcome: dict[str, Any] = {}

            def ask_a() -> None:
                turn = {"messages": [user("snapshot vol-1", conversation_id=conversation_id)]}
                outcome["response"] = httpx.post(f"{worker_a.url}/api/chat", json=turn, timeout=50)

            asking = threading.Thread(target=ask_a, daemon=True)
            asking.start()
            deadline = time.monotonic() + 20
            while not (ledger.exists() and "started" in ledger.read_text()):  # a bounded wait, not a measure
                if time.monotonic() > deadline:
                    pytest.fail("worker A never started the tool")
                time.sleep(0.05)
            cancel = httpx.post(f"{worker_b.url}/api/conversations/{conversation_id}/cancel", timeout=10)
            asking.join(timeout=50)  # the tool would take 60 s: an answer before then is its cancel
            stored = httpx.get(f"{worker_b.url}/api/conversations/{conversation_id}", timeout=10).json()

    assert cancel.status_code == 202
    response = outcome["response"]
    assert response.status_code == 200, response.text
    assert response.json()["meta"]["stop_reason"] == "cancelled"
    (call,) = stored["tool_calls"]
    assert (call["status"], call["error"]) == (
        "failed",
        "stopped: the run was cancelled while the tool ran; it may have done part of its work",
    )
    assert ledger.read_text() == "started vol-1\n"
