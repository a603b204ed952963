"""`dcaf-like worker` over real processes (docs/runs.md, "Tools on a job engine"): a Celery worker in a
child process, the real Redis broker (127.0.0.1:6379, database 9), the API side in this process on
the same SQLite store, one scripted OpenAI-compatible model for both. A job runs on the worker, its
result is recorded and the worker goes on with the run (the model reads the result once); a worker
killed with -9 mid-task leaves its call interrupted (at once on this machine), and a worker started
after it never runs it again. Over served agents: a job runs on while both API workers restart (two
Celery workers beside them), twenty approvals at once enqueue one job, Stop stops a running job, and a
broker message replayed or forged by hand runs nothing."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user
from _server import dcaf_like_serve

from dcaf_like import Agent, ToolDecision
from dcaf_like.domain import ToolCallStatus
from dcaf_like.testing import OpenAICompatibleServer

pytest.importorskip("celery", reason="the celery extra is not installed: pip install -e '.[celery]'")

BROKER = os.environ.get("DCAF_TEST_BROKER_URL", "redis://127.0.0.1:6379/9")
TARGET = "tests/e2e/background_agent.py:make_agent"
LEASE = 600.0  # far longer than the test: a settlement before it is the dead worker's, not the lease's


def wait_for(condition: Callable[[], Any], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # a bounded wait for an event, not a measure of time
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


@pytest.fixture
def model() -> Iterator[OpenAICompatibleServer]:
    """The model of the API side and of the worker alike: one script, whoever asks."""
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture
def setting(tmp_path: Path, redis_url: str, model: OpenAICompatibleServer) -> dict[str, str]:
    """The broker is the Redis server the suite's `redis_url` found running (another database)."""
    (tmp_path / "ledger.log").touch()
    return {
        "DCAF_TEST_OPENAI_URL": model.base_url,
        "DCAF_TEST_BROKER_URL": BROKER,
        "DCAF_TEST_QUEUE": f"dcaf-e2e-{uuid.uuid4().hex}",
        "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
        "DCAF_TEST_RELEASE": str(tmp_path / "release"),
        "DCAF_TEST_LEASE": str(LEASE),
        "STORE": f"sqlite:///{tmp_path / 'conversations.sqlite3'}",
    }


@contextlib.contextmanager
def worker(setting: dict[str, str], *options: str) -> Iterator[subprocess.Popen[bytes]]:
    """`dcaf-like worker` in a child process (with `options`), stopped (killed) on the way out."""
    env = {**{k: v for k, v in os.environ.items() if k != "DCAF_STORE"}, **setting}
    command = [
        sys.executable,
        "-m",
        "dcaf_like.cli",
        "worker",
        TARGET,
        "--factory",
        "--store",
        setting["STORE"],
        *options,
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def api_agent(setting: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Agent:
    """The API side: the same agent, in this process, on the worker's store."""
    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    sys.path.insert(0, "tests/e2e")
    try:
        from background_agent import make_agent
    finally:
        sys.path.remove("tests/e2e")
    return make_agent().configured(repository=setting["STORE"])


def approved_in(agent: Agent, text: str, conversation_id: str | None = None) -> tuple[str, str]:
    asked = agent.run(text, conversation_id=conversation_id)
    [pending] = asked.pending_tool_calls
    decided = agent.decide(asked.conversation_id, [ToolDecision(pending.id, True)])
    assert decided.stop_reason == "running_in_background"
    return asked.conversation_id, pending.id


def status(agent: Agent, conversation_id: str, call_id: str) -> ToolCallStatus:
    return agent.repository.get(conversation_id).tool_call(call_id).status


def last_answer(agent: Agent, conversation_id: str) -> str:
    last = agent.repository.get(conversation_id).messages[-1]
    return last.content.text if last.role.value == "assistant" else ""


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_a_job_runs_on_the_worker_and_the_worker_goes_on_with_the_run(
    setting: dict[str, str], monkeypatch: pytest.MonkeyPatch, model: OpenAICompatibleServer
) -> None:
    """Tools on a job engine: `dcaf-like worker` runs the job, then the turn its result is owed: the
    model reads the result once, and its answer is in the conversation without another message."""
    model.call([("drain_node", {"node": "n1"})])
    model.reply("n1 is drained.")
    agent = api_agent(setting, monkeypatch)
    Path(setting["DCAF_TEST_RELEASE"]).touch()
    with worker(setting) as process:
        conversation_id, call_id = approved_in(agent, "drain n1")
        wait_for(lambda: last_answer(agent, conversation_id) == "n1 is drained.", "the model's answer")
        ledger = Path(setting["DCAF_TEST_LEDGER"]).read_text().splitlines()
        assert ledger == [f"{process.pid} started n1", f"{process.pid} finished n1"]
    assert status(agent, conversation_id, call_id) is ToolCallStatus.EXECUTED
    assert [tool_results(request) for request in model.requests] == [[], ["n1 drained"]]


def test_a_worker_killed_mid_task_leaves_the_call_interrupted_and_never_run_again(
    setting: dict[str, str], monkeypatch: pytest.MonkeyPatch, model: OpenAICompatibleServer
) -> None:
    """Tools on a job engine: kill -9 of the worker running a job: the next turn settles the call as
    interrupted at once (this machine knows the worker is gone), and a worker started afterwards runs
    the jobs that come after it, never that one."""
    model.call([("drain_node", {"node": "n1"})])
    model.reply("n1 is drained.")
    model.call([("drain_node", {"node": "n2"})])
    model.reply("n2 is drained.")
    agent = api_agent(setting, monkeypatch)
    ledger = Path(setting["DCAF_TEST_LEDGER"])
    with worker(setting) as first:
        conversation_id, call_id = approved_in(agent, "drain n1")
        wait_for(lambda: "started n1" in ledger.read_text(), "the drain starting on the worker")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    settled = agent.decide(conversation_id, [])
    [interrupted] = settled.executed_tool_calls
    assert (interrupted.id, interrupted.status) == (call_id, "interrupted")
    assert settled.text == "n1 is drained."  # the run went on past it
    Path(setting["DCAF_TEST_RELEASE"]).touch()
    with worker(setting) as second:
        _, later = approved_in(agent, "drain n2", conversation_id)
        wait_for(lambda: last_answer(agent, conversation_id) == "n2 is drained.", "the next job's answer")
        assert status(agent, conversation_id, later) is ToolCallStatus.EXECUTED
        assert ledger.read_text().splitlines() == [
            f"{first.pid} started n1",
            f"{second.pid} started n2",
            f"{second.pid} finished n2",
        ]
    assert status(agent, conversation_id, call_id) is ToolCallStatus.INTERRUPTED


def free_port() -> str:
    with socket.socket() as probe:  # uvicorn's workers cannot share port 0
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def test_a_job_runs_on_while_both_api_workers_are_restarted(
    setting: dict[str, str], model: OpenAICompatibleServer
) -> None:
    """Tools on a job engine, the done-when's topology: two API workers (`serve --workers 2`) and two
    Celery workers on one store. An approval over HTTP enqueues the job; the API server, both its
    workers, is stopped and another started while the tool runs; the job ends on one Celery worker,
    which goes on with the run, and the new server shows the result and the model's answer."""
    ledger = Path(setting["DCAF_TEST_LEDGER"])
    env = {**{k: v for k, v in os.environ.items() if k != "DCAF_STORE"}, **setting}

    def serve() -> tuple[str, ...]:
        return (TARGET, "--factory", "--port", free_port(), "--workers", "2", "--store", setting["STORE"])

    model.call([("drain_node", {"node": "n1"})], text="I will drain n1.")
    model.reply("n1 is drained.")
    with worker(setting), worker(setting), dcaf_like_serve(*serve(), env=env) as first:
        proposed = httpx.post(f"{first.url}/api/chat", json={"messages": [user("drain n1")]}, timeout=30)
        data = proposed.json()["data"]
        conversation_id, [pending] = data["conversation_id"], data["tool_calls"]
        approval = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}
        approved = httpx.post(f"{first.url}/api/chat", json=approval, timeout=30).json()
        assert approved["meta"]["stop_reason"] == "running_in_background"
        wait_for(lambda: "started n1" in ledger.read_text(), "the drain starting on a worker")
        assert first.process is not None
        first.process.terminate()  # the server and both its workers
        first.process.wait(timeout=30)
        with dcaf_like_serve(*serve(), env=env) as second:
            Path(setting["DCAF_TEST_RELEASE"]).touch()

            def answered() -> dict[str, Any] | None:
                read = httpx.get(f"{second.url}/api/conversations/{conversation_id}", timeout=10).json()
                return read if read["messages"][-1]["content"] == "n1 is drained." else None

            wait_for(answered, "the model's answer after the job's result")
            read = answered()
    assert read is not None
    assert [c["status"] for c in read["tool_calls"]] == ["executed"]
    assert tool_results(model.requests[-1]) == ["n1 drained"]
    assert [line.split(" ", 1)[1] for line in ledger.read_text().splitlines()] == [
        "started n1",
        "finished n1",
    ]


def jobs_refused(port: int) -> float:
    """The worker's `dcaf_jobs_total{outcome="refused"}` (0 until its metrics answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    found = re.search(r'^dcaf_jobs_total\{outcome="refused"\} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_broker_message_replayed_or_forged_by_hand_runs_nothing(
    setting: dict[str, str], monkeypatch: pytest.MonkeyPatch, model: OpenAICompatibleServer
) -> None:
    """docs/runs.md, "Tools on a job engine": the claim in the store decides, not the broker. The
    message of a job that ran, sent again by hand, and a message naming a call nobody approved (with
    its true fingerprint) are both refused by the worker: the tool runs once, the waiting call waits."""
    from dcaf_like.jobs.celery import TASK, CeleryExecutor

    model.call([("drain_node", {"node": "n1"})])
    model.reply("n1 is drained.")
    model.call([("drain_node", {"node": "n2"})])
    agent = api_agent(setting, monkeypatch)
    ledger = Path(setting["DCAF_TEST_LEDGER"])
    Path(setting["DCAF_TEST_RELEASE"]).touch()
    port = int(free_port())  # the metrics server of the worker needs a port of its own
    with worker(setting, "--metrics-port", str(port)):
        conversation_id, ran = approved_in(agent, "drain n1")
        wait_for(lambda: last_answer(agent, conversation_id) == "n1 is drained.", "the model's answer")
        waiting = agent.run("drain n2", conversation_id=conversation_id).pending_tool_calls[0].id
        stored = agent.repository.get(conversation_id)
        sender = CeleryExecutor(setting["DCAF_TEST_BROKER_URL"], queue=setting["DCAF_TEST_QUEUE"])
        for call_id in (ran, waiting):
            job = {"conversation_id": conversation_id, "call_id": call_id}
            job["fingerprint"] = stored.tool_call(call_id).fingerprint
            sender.app.send_task(TASK, args=[job], queue=setting["DCAF_TEST_QUEUE"])

        wait_for(lambda: jobs_refused(port) >= 2, "the worker refusing both messages")
    assert [line.split(" ", 1)[1] for line in ledger.read_text().splitlines()] == [
        "started n1",
        "finished n1",
    ]
    assert status(agent, conversation_id, ran) is ToolCallStatus.EXECUTED
    assert status(agent, conversation_id, waiting) is ToolCallStatus.PENDING


def test_twenty_approvals_of_one_background_call_at_once_enqueue_one_job(
    setting: dict[str, str], model: OpenAICompatibleServer
) -> None:
    """docs/runs.md, "Tools on a job engine": twenty approvals of one call sent at once to an API
    server put one job on the broker (its queue is read before any worker takes it); one approval is
    answered `running_in_background`, the others that the call was decided; the job runs once."""
    import redis

    ledger = Path(setting["DCAF_TEST_LEDGER"])
    env = {**{k: v for k, v in os.environ.items() if k != "DCAF_STORE"}, **setting}
    serve = (TARGET, "--factory", "--port", "0", "--store", setting["STORE"])
    model.call([("drain_node", {"node": "n1"})], text="I will drain n1.")
    model.reply("n1 is drained.")
    broker = redis.Redis.from_url(setting["DCAF_TEST_BROKER_URL"])
    with dcaf_like_serve(*serve, env=env) as served:
        proposed = httpx.post(f"{served.url}/api/chat", json={"messages": [user("drain n1")]}, timeout=30)
        data = proposed.json()["data"]
        conversation_id, [pending] = data["conversation_id"], data["tool_calls"]
        approval = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}
        start = threading.Barrier(20)
        answers: list[httpx.Response] = []

        def send() -> None:
            start.wait()
            answers.append(httpx.post(f"{served.url}/api/chat", json=approval, timeout=60))

        senders = [threading.Thread(target=send) for _ in range(20)]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()

        queued = broker.llen(setting["DCAF_TEST_QUEUE"])
        taken = [
            a
            for a in answers
            if a.status_code == 200 and a.json()["meta"]["stop_reason"] == "running_in_background"
        ]
        refused = [a.json()["error"]["code"] for a in answers if a.status_code == 409]
        assert queued == 1, [a.text for a in answers]
        assert len(taken) == 1, [a.text for a in answers]
        assert len(refused) == 19, refused
        assert set(refused) <= {"tool_call_already_decided", "concurrent_update"}, refused
        Path(setting["DCAF_TEST_RELEASE"]).touch()
        with worker(setting):
            wait_for(lambda: "finished n1" in ledger.read_text(), "the one job")
    assert [line.split(" ", 1)[1] for line in ledger.read_text().splitlines()] == [
        "started n1",
        "finished n1",
    ]


def test_stop_from_the_page_stops_a_job_running_on_the_worker(
    setting: dict[str, str], model: OpenAICompatibleServer
) -> None:
    """docs/runs.md, "Tools on a job engine": the page's Stop (`POST /api/conversations/{id}/cancel`)
    reaches the job through the store at the worker's next lease renewal; the tool sees it and stops,
    and its call fails as stopped (a short lease here: a third of it between renewals)."""
    setting = {**setting, "DCAF_TEST_LEASE": "3"}
    ledger = Path(setting["DCAF_TEST_LEDGER"])
    env = {**{k: v for k, v in os.environ.items() if k != "DCAF_STORE"}, **setting}
    serve = (TARGET, "--factory", "--port", "0", "--store", setting["STORE"])
    model.call([("drain_node", {"node": "n1"})], text="I will drain n1.")
    model.reply("n1 was stopped.")
    with worker(setting), dcaf_like_serve(*serve, env=env) as served:
        proposed = httpx.post(f"{served.url}/api/chat", json={"messages": [user("drain n1")]}, timeout=30)
        data = proposed.json()["data"]
        conversation_id, [pending] = data["conversation_id"], data["tool_calls"]
        approval = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}
        assert httpx.post(f"{served.url}/api/chat", json=approval, timeout=30).status_code == 200
        wait_for(lambda: "started n1" in ledger.read_text(), "the drain starting on the worker")

        stop = httpx.post(f"{served.url}/api/conversations/{conversation_id}/cancel", timeout=30)
        assert stop.status_code in (200, 202), stop.text
        wait_for(lambda: "stopped n1" in ledger.read_text(), "the tool seeing the cancel")

        def settled() -> dict[str, Any] | None:
            read = httpx.get(f"{served.url}/api/conversations/{conversation_id}", timeout=10).json()
            [call] = read["tool_calls"]
            return call if call["status"] != "approved" else None

        wait_for(settled, "the call settled")
        call = settled()
    assert call is not None
    assert (call["status"], call["outcome"]) == ("failed", "error"), call  # it ran: not "cancelled"
    assert call["error"].startswith("stopped: the run was cancelled while the tool ran"), call
    assert [line.split(" ", 1)[1] for line in ledger.read_text().splitlines()] == ["started n1", "stopped n1"]
