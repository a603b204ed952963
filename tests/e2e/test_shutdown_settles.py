"""SIGTERM to ``dcaf-like serve --workers 2`` while a long tool runs (issue 35; docs/deployment.md,
"Restarts and deploys"; docs/runs.md, "A client that goes away"): past the grace period the call is
settled as interrupted in the turn's last save, at once, not left approved under a live lease; the
stream that followed the run ends with an ``error`` event (``shutting_down``), so its client can tell a
cut stream from a finished one."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import user
from _server import dcaf_like_serve, store_url_of, until

from dcaf_like.stores import open_store
from dcaf_like.testing import OpenAICompatibleServer

AGENT = "tests/e2e/long_tool_agent.py:make_agent"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_of(request.param, request, tmp_path)


@pytest.mark.parametrize("kind", ["async", "def"])
def test_sigterm_past_the_grace_settles_the_running_call_and_ends_the_stream_with_an_error(
    store_url: str, tmp_path: Path, kind: str
) -> None:
    conversation_id = f"conv_{uuid.uuid4().hex[:24]}"
    ledger = tmp_path / "ledger.log"
    options = ["--factory", "--port", "0", "--workers", "2", "--shutdown-grace", "1"]
    with OpenAICompatibleServer() as model:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(ledger),
            "DCAF_TEST_OPENAI_URL": model.base_url,
        }
        tool_name = "snapshot_volume" if kind == "async" else "snapshot_volume_blocking"
        model.call([(tool_name, {"volume": "vol-1"})])
        with dcaf_like_serve(AGENT, *options, "--store", store_url, env=env) as served:
            events: list[dict[str, Any]] = []

            def follow() -> None:
                body = {"messages": [user("snapshot vol-1", conversation_id=conversation_id)]}
                with httpx.stream("POST", f"{served.url}/api/chat-stream", json=body, timeout=60) as stream:
                    events.extend(json.loads(line) for line in stream.iter_lines() if line)

            following = threading.Thread(target=follow, daemon=True)
            following.start()
            until(lambda: ledger.exists() and "started" in ledger.read_text(), "the tool started")

            served.process.send_signal(signal.SIGTERM)
            served.process.wait(timeout=30)  # the tool takes 60 s: the grace period (1 s) ends it
            following.join(timeout=30)

    store = open_store(store_url, namespace="ops")  # the agent's name
    conversation = store.get(conversation_id)
    store.close()
    assert conversation is not None
    (call,) = conversation.tool_calls.values()
    assert call.status.value == "interrupted", (call.status, call.error)
    assert "the worker running this call stopped it" in (call.error or "")
    assert events, "the stream sent nothing"
    assert events[-1]["type"] == "error", events[-1]
    assert events[-1]["error"]["code"] == "shutting_down"


def test_sigterm_past_the_grace_answers_a_waiting_chat_request_503_shutting_down(
    store_url: str, tmp_path: Path
) -> None:
    """docs/deployment.md, "Restarts and deploys": a client of ``POST /api/chat`` whose turn the
    shutdown stopped is told so (``503 shutting_down``, try again), not answered ``500`` as if the
    server had failed; the call is settled as interrupted all the same."""
    conversation_id = f"conv_{uuid.uuid4().hex[:24]}"
    ledger = tmp_path / "ledger.log"
    options = ["--factory", "--port", "0", "--workers", "2", "--shutdown-grace", "1"]
    with OpenAICompatibleServer() as model:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(ledger),
            "DCAF_TEST_OPENAI_URL": model.base_url,
        }
        model.call([("snapshot_volume", {"volume": "vol-1"})])
        with dcaf_like_serve(AGENT, *options, "--store", store_url, env=env) as served:
            answers: list[httpx.Response] = []

            def ask() -> None:
                body = {"messages": [user("snapshot vol-1", conversation_id=conversation_id)]}
                answers.append(httpx.post(f"{served.url}/api/chat", json=body, timeout=60))

            asking = threading.Thread(target=ask, daemon=True)
            asking.start()
            until(lambda: ledger.exists() and "started" in ledger.read_text(), "the tool started")

            served.process.send_signal(signal.SIGTERM)
            served.process.wait(timeout=30)  # the tool takes 60 s: the grace period (1 s) ends it
            asking.join(timeout=30)

    [answer] = answers
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "shutting_down"
    store = open_store(store_url, namespace="ops")
    conversation = store.get(conversation_id)
    store.close()
    assert conversation is not None
    (call,) = conversation.tool_calls.values()
    assert call.status.value == "interrupted", (call.status, call.error)
