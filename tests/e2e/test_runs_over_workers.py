"""The life of a run over ``dcaf-like serve --workers 2`` on PostgreSQL and SQLite (issue 35): a first
turn is readable and listed on every worker while it runs, and a call whose worker was killed is
settled by the next turn at once, by the surviving worker or by the one the supervisor started in its
place, not when its lease runs out (docs/runs.md, "Cancel" and "Claims and leases")."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user
from _server import Served, dcaf_like_serve, store_url_of, until

from dcaf_like.testing import OpenAICompatibleServer

LEASE = 600.0  # far longer than the test: a settlement before it is the dead worker's, not the lease's


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_of(request.param, request, tmp_path)


def environment(ledger: Path, model: OpenAICompatibleServer) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
        "DCAF_TEST_LEDGER": str(ledger),
        "DCAF_TEST_OPENAI_URL": model.base_url,
        "DCAF_TEST_LEASE": str(LEASE),
    }


def workers_of(served: Served) -> set[int]:
    """The PIDs of the live worker processes the ``serve`` process supervises now (not its
    multiprocessing resource tracker, nor a dead worker not yet reaped, whose command line is empty)."""
    assert served.process is not None
    pid = served.process.pid
    workers = set()
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError):
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.add(int(child))
    return workers


def answers_health(served: Served) -> bool:
    with contextlib.suppress(httpx.TransportError):
        return httpx.get(f"{served.url}/health", timeout=1).status_code == 200
    return False


def test_a_first_turn_is_readable_and_listed_on_every_worker_while_its_tool_runs(
    store_url: str, tmp_path: Path
) -> None:
    """docs/runs.md, "Cancel" (a conversation is saved as its first turn starts): another operator,
    or the page's list, sees the conversation at once, whichever worker they reach, not after the
    first lease renewal (a third of the lease: 20 s by default). A call the policy runs without a
    human is leased in memory when it starts ("Claims and leases"), so the read holds the user's message
    and the call shows from that renewal on; an approved call is saved by its claim before it runs."""
    conversation_id = f"conv_{uuid.uuid4().hex[:24]}"
    ledger = tmp_path / "ledger.log"
    with OpenAICompatibleServer() as model:
        model.call([("snapshot_volume", {"volume": "vol-1"})])
        options = ("--factory", "--port", "0", "--workers", "2", "--store", store_url)
        env = environment(ledger, model)
        with dcaf_like_serve("tests/e2e/long_tool_agent.py:make_agent", *options, env=env) as served:
            lines: list[dict[str, Any]] = []

            def follow() -> None:
                body = {"messages": [user("snapshot vol-1", conversation_id=conversation_id)]}
                with httpx.stream("POST", f"{served.url}/api/chat-stream", json=body, timeout=60) as stream:
                    lines.extend(json.loads(line) for line in stream.iter_lines() if line)

            following = threading.Thread(target=follow, daemon=True)
            following.start()
            until(lambda: ledger.exists() and "started" in ledger.read_text(), "the tool started")

            # Each request on a connection of its own: the kernel spreads them over both workers.
            reads = [
                httpx.get(f"{served.url}/api/conversations/{conversation_id}", timeout=10) for _ in range(6)
            ]
            lists = [httpx.get(f"{served.url}/api/conversations", timeout=10) for _ in range(6)]

            httpx.post(f"{served.url}/api/conversations/{conversation_id}/cancel", timeout=10)
            following.join(timeout=50)

    assert [read.status_code for read in reads] == [200] * 6, [read.text for read in reads]
    for read in reads:
        body = read.json()
        assert body["messages"][0]["content"] == "snapshot vol-1"
    for listed in lists:
        assert listed.status_code == 200, listed.text
        assert conversation_id in [summary["id"] for summary in listed.json()["conversations"]]
    assert lines[-1]["type"] == "done"  # the cancel ended the turn


@pytest.mark.parametrize("survivor", ["answers", "is restarted too"])
def test_after_kill_9_of_its_worker_the_next_turn_settles_the_call_before_its_lease_runs_out(
    store_url: str, tmp_path: Path, survivor: str
) -> None:
    """docs/runs.md, "Claims and leases": a worker on the same machine tells for certain that the
    holder exited, the worker the supervisor restarted in its place as well as the one that survived."""
    ledger = tmp_path / "ledger.log"
    ledger.touch()
    with OpenAICompatibleServer() as model:
        model.call([("restart_deployment", {"name": "web"})], text="I will restart web.")
        model.reply("I cannot tell whether web restarted: please check it before trying again.")
        options = ("--factory", "--port", "0", "--workers", "2", "--store", store_url)
        env = environment(ledger, model)
        with dcaf_like_serve("tests/e2e/slow_agent.py:make_agent", *options, env=env) as served:
            proposed = httpx.post(
                f"{served.url}/api/chat", json={"messages": [user("restart web")]}, timeout=10
            )
            data = proposed.json()["data"]
            conversation_id, [pending] = data["conversation_id"], data["tool_calls"]
            approval = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}

            def approve_and_wait() -> None:
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(f"{served.url}/api/chat", json=approval, timeout=30)

            approving = threading.Thread(target=approve_and_wait, daemon=True)
            approving.start()
            until(lambda: bool(ledger.read_text().strip()), "the tool started")
            running_on = int(ledger.read_text().split()[0])
            before = workers_of(served)
            assert running_on in before

            killed = {running_on}
            os.kill(running_on, signal.SIGKILL)  # nothing of the run is saved but its claim and lease
            until(lambda: len(workers_of(served) - before) == 1, "the supervisor restarted the worker")
            if survivor == "is restarted too":  # then only workers started after the call's can answer
                (other,) = before - killed
                killed.add(other)
                os.kill(other, signal.SIGKILL)
                until(lambda: not workers_of(served) & before, "the supervisor restarted the other worker")
            until(lambda: len(workers_of(served)) == 2, "both workers are started")
            until(lambda: answers_health(served), "a worker listens")
            approving.join(timeout=30)

            claimed = httpx.get(f"{served.url}/api/conversations/{conversation_id}", timeout=10).json()
            answer = httpx.post(
                f"{served.url}/api/chat",
                json={"messages": [user("did it restart?", conversation_id=conversation_id)]},
                timeout=20,
            )
            after = httpx.get(f"{served.url}/api/conversations/{conversation_id}", timeout=10).json()

    for pid in killed:  # docs/deployment.md, "One host": a worker that dies is logged at WARNING
        assert re.search(
            rf"WARNING: +worker process \[{pid}\] died \(exit code -9\); started \[\d+\] in its place",
            served.log,
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["content"].startswith("I cannot tell whether web restarted")
    [settled] = body["data"]["executed_tool_calls"]
    assert (settled["id"], settled["status"]) == (pending["id"], "interrupted")
    assert "may or may not have run" in settled["error"]
    [before_turn] = claimed["tool_calls"]
    assert before_turn["status"] == "approved"
    [interrupted] = after["tool_calls"]
    assert interrupted["status"] == "interrupted"
    assert interrupted["finished_at"] < before_turn["lease_expires_at"]  # settled before its lease ran out
    assert len(ledger.read_text().splitlines()) == 1  # started once, never again
