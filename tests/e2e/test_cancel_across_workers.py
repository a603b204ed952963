"""A cancel sent to one worker stops a turn running on another: two ``dcaf-like serve`` processes on
one store (SQLite, Redis, PostgreSQL), the turn on worker A waiting for a slow model or running a long
tool, the cancel posted to worker B (docs/runs.md, "Cancel" and "Stopping a running tool"; issue 35).

Two processes, so the test chooses which one gets the cancel. ``dcaf-like serve --workers 2`` runs the
same code in two children of one supervisor, and the kernel picks the worker of each connection: the
``--workers 2`` variants send the cancel on a connection of its own and show the tool stops whichever
worker took it. How soon (under a second for an ``async def`` tool) is measured by
``benchmarks/cancel_latency.py``, not asserted here: a test waits for events, never for a clock."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import user
from _server import Served, dcaf_like_serve, store_url_of, until

from dcaf_like.testing import OpenAICompatibleServer


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_of(request.param, request, tmp_path)


@contextmanager
def two_workers(
    target: str, store_url: str, env: dict[str, str], workers: int
) -> Iterator[tuple[Served, Served]]:
    """Worker A and worker B: two ``dcaf-like serve`` processes, or (`workers` == 2) one ``dcaf-like
    serve --workers 2`` whose workers each connection reaches as the kernel chooses."""
    if workers == 2:
        options = ("--factory", "--port", "0", "--workers", "2", "--store", store_url)
        with dcaf_like_serve(target, *options, env=env) as served:
            yield served, served
        return
    serve = (target, "--factory", "--port", "0", "--store", store_url)
    with dcaf_like_serve(*serve, env=env) as worker_a, dcaf_like_serve(*serve, env=env) as worker_b:
        yield worker_a, worker_b


def cancel_from_b(
    target: str, store_url: str, tmp_path: Path, script: Callable[[OpenAICompatibleServer], None],
    started: Callable[[OpenAICompatibleServer], bool], then: dict[str, Any] | None = None,
    stream: bool = False, workers: int = 1,
) -> dict[str, Any]:  # fmt: skip
    """Worker A runs a turn (the model scripted by `script`; streamed if `stream`, its NDJSON lines
    in "lines"); once `started`, worker B is asked to cancel it; then (optionally) `then` is sent to
    worker B. What each answered, and the conversation. `workers`: see :func:`two_workers`."""
    conversation_id = f"conv_{uuid.uuid4().hex[:24]}"  # chosen by the client, so it can cancel the first turn
    seen: dict[str, Any] = {"conversation_id": conversation_id}
    with OpenAICompatibleServer() as model:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
            "DCAF_TEST_OPENAI_URL": model.base_url,
            "DCAF_TEST_LEASE": "60",
        }
        script(model)
        with two_workers(target, store_url, env, workers) as (worker_a, worker_b):

            def ask(worker: Served, text: str) -> httpx.Response:
                turn = {"messages": [user(text, conversation_id=conversation_id)]}
                return httpx.post(f"{worker.url}/api/chat", json=turn, timeout=50)

            def ask_streamed(worker: Served, text: str) -> None:
                turn = {"messages": [user(text, conversation_id=conversation_id)]}
                with httpx.stream("POST", f"{worker.url}/api/chat-stream", json=turn, timeout=50) as answer:
                    seen["lines"] = [json.loads(line) for line in answer.iter_lines() if line]

            def go() -> None:
                if stream:
                    ask_streamed(worker_a, "go")
                else:
                    seen["response"] = ask(worker_a, "go")

            asking = threading.Thread(target=go, daemon=True)
            asking.start()
            until(lambda: started(model), "worker A's turn started")
            seen["cancel"] = httpx.post(
                f"{worker_b.url}/api/conversations/{conversation_id}/cancel", timeout=10
            )
            asking.join(timeout=50)  # the model or the tool would take longer: an answer before is its cancel
            if then is not None:
                seen["then"] = ask(worker_b, then["text"])
            seen["stored"] = httpx.get(
                f"{worker_b.url}/api/conversations/{conversation_id}", timeout=10
            ).json()
    return seen


def test_a_cancel_sent_to_worker_b_stops_a_turn_running_on_worker_a(store_url: str, tmp_path: Path) -> None:
    def script(model: OpenAICompatibleServer) -> None:
        model.reply("an answer nobody waits for", delay=30)
        model.reply("Summary: the incident is over.")

    seen = cancel_from_b(
        "tests/e2e/slow_agent.py:make_agent", store_url, tmp_path, script,
        started=lambda model: bool(model.requests), then={"text": "try again"},
    )  # fmt: skip

    assert seen["cancel"].status_code == 202
    assert seen["cancel"].json() == {"conversation_id": seen["conversation_id"], "cancel_requested": True}
    response = seen["response"]
    assert response.status_code == 200, response.text
    assert response.json()["meta"]["stop_reason"] == "cancelled"
    assert response.json()["content"] == ""
    assert seen["then"].status_code == 200, seen["then"].text
    assert seen["then"].json()["content"] == "Summary: the incident is over."


@pytest.mark.parametrize("workers", [1, 2])
def test_a_cancel_sent_to_worker_b_stops_an_async_tool_running_on_worker_a(
    store_url: str, tmp_path: Path, workers: int
) -> None:
    """docs/runs.md, "Stopping a running tool": the tool is cancelled, not waited for."""
    ledger = tmp_path / "ledger.log"
    seen = cancel_from_b(
        "tests/e2e/long_tool_agent.py:make_agent", store_url, tmp_path,
        lambda model: model.call([("snapshot_volume", {"volume": "vol-1"})]),
        started=lambda model: ledger.exists() and "started" in ledger.read_text(), workers=workers,
    )  # fmt: skip

    assert seen["cancel"].status_code == 202
    response = seen["response"]
    assert response.status_code == 200, response.text
    assert response.json()["meta"]["stop_reason"] == "cancelled"
    (call,) = seen["stored"]["tool_calls"]
    assert (call["status"], call["error"]) == (
        "failed",
        "stopped: the run was cancelled while the tool ran; it may have done part of its work",
    )
    assert ledger.read_text() == "started vol-1\n"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_cancel_sent_to_worker_b_stops_a_def_tool_on_worker_a_at_its_next_check(
    store_url: str, tmp_path: Path, workers: int
) -> None:
    """docs/runs.md, "Stopping a running tool": a plain `def` tool that calls
    `context.check_cancelled()` between its steps stops at the next one, and its call is settled as
    stopped (a `def` tool that never looks would have run on and been recorded as executed)."""
    ledger = tmp_path / "ledger.log"
    seen = cancel_from_b(
        "tests/e2e/long_tool_agent.py:make_agent", store_url, tmp_path,
        lambda model: model.call([("copy_volume_in_steps", {"volume": "vol-1"})]),
        started=lambda model: ledger.exists() and "copied block 0" in ledger.read_text(), workers=workers,
    )  # fmt: skip

    assert seen["cancel"].status_code == 202
    response = seen["response"]
    assert response.status_code == 200, response.text
    assert response.json()["meta"]["stop_reason"] == "cancelled"
    (call,) = seen["stored"]["tool_calls"]
    assert (call["status"], call["error"]) == (
        "failed",
        "stopped: the run was cancelled while the tool ran; it may have done part of its work",
    )
    lines = ledger.read_text().splitlines()
    assert lines[0] == "started vol-1"
    assert "finished vol-1" not in lines  # stopped at a check, 600 blocks short of its end


def test_a_stream_on_worker_a_acknowledges_a_cancel_sent_to_worker_b_then_settles_the_call(
    store_url: str, tmp_path: Path
) -> None:
    """docs/runs.md, "Cancel": the stream says `cancel_requested` at once, then the settled call,
    then `done`."""
    ledger = tmp_path / "ledger.log"
    seen = cancel_from_b(
        "tests/e2e/long_tool_agent.py:make_agent", store_url, tmp_path,
        lambda model: model.call([("snapshot_volume", {"volume": "vol-1"})]),
        started=lambda model: ledger.exists() and "started" in ledger.read_text(), stream=True,
    )  # fmt: skip

    assert seen["cancel"].status_code == 202
    kinds = [line["type"] for line in seen["lines"] if line["type"] in LIFECYCLE]
    assert kinds == [
        "run_started",
        "tool_call_proposed",
        "tool_started",
        "cancel_requested",
        "tool_finished",
        "done",
    ]
    acknowledged = next(line for line in seen["lines"] if line["type"] == "cancel_requested")
    assert acknowledged["conversation_id"] == seen["conversation_id"]
    finished = next(line for line in seen["lines"] if line["type"] == "tool_finished")
    assert finished["tool_call"]["status"] == "failed"
    assert seen["lines"][-1]["type"] == "done"
    assert ledger.read_text() == "started vol-1\n"


#: The typed lifecycle events (the seed's events come beside them).
LIFECYCLE = {"run_started", "tool_call_proposed", "tool_started", "cancel_requested", "tool_finished", "done"}
