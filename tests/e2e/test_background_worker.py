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
import json
import os
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
import redis
from _helpdesk import approve, user
from _server import dcaf_like_serve

from dcaf_like import Agent, ToolDecision
from dcaf_like.application.executors import ToolJob
from dcaf_like.application.tool_execution import STOPPED_BY_CANCEL
from dcaf_like.domain import ToolCallStatus
from dcaf_like.domain.tool_call import fingerprint
from dcaf_like.testing import OpenAICompatibleServer

pytest.importorskip("celery", reason="the celery extra is not installed: pip install -e '.[celery]'")
from dcaf_like.jobs.celery import TASK, CeleryExecutor

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
def worker(setting: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`dcaf-like worker` in a child process, stopped (killed) on the way out."""
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


def executor_of(agent: Agent) -> CeleryExecutor:
    assert isinstance(agent.executor, CeleryExecutor)
    return agent.executor


def outcome_of(agent: Agent, task_id: str) -> dict[str, str]:
    """What the worker's task returned for the message `task_id` (the result backend keeps it)."""
    result: dict[str, str] = executor_of(agent).app.AsyncResult(task_id).get(timeout=60)
    return result


@contextlib.contextmanager
def api_server(setting: dict[str, str], workers: int = 1) -> Iterator[Any]:
    """`dcaf-like serve` in a child process on the worker's store (`workers` processes sharing a port)."""
    env = {**{k: v for k, v in os.environ.items() if k != "DCAF_STORE"}, **setting}
    port = "0"
    if workers > 1:
        with socket.socket() as probe:  # uvicorn's workers cannot share port 0
            probe.bind(("127.0.0.1", 0))
            port = str(probe.getsockname()[1])
    options = ("--factory", "--port", port, "--workers", str(workers), "--store", setting["STORE"])
    with dcaf_like_serve(TARGET, *options, env=env) as server:
        yield server


def proposed_over_http(url: str, text: str) -> tuple[str, dict[str, Any]]:
    data = httpx.post(f"{url}/api/chat", json={"messages": [user(text)]}, timeout=30).json()["data"]
    [pending] = data["tool_calls"]
    return data["conversation_id"], pending


def approval(conversation_id: str, pending: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}


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


def test_a_job_runs_on_while_both_api_workers_are_restarted(
    setting: dict[str, str], model: OpenAICompatibleServer
) -> None:
    """Tools on a job engine, the done-when's topology: two API workers (`serve --workers 2`) and two
    Celery workers on one store. An approval over HTTP enqueues the job; the API server, both its
    workers, is stopped and another started while the tool runs; the new server shows the tool's
    progress report the worker saved on the call (docs/runs.md, "Tools on a job engine"); the job ends
    on one Celery worker, which goes on with the run, and the new server shows the result and the
    model's answer."""
    setting = {**setting, "DCAF_TEST_LEASE": "3"}  # renewed every second, with the drain's progress
    ledger = Path(setting["DCAF_TEST_LEDGER"])
    model.call([("drain_node", {"node": "n1"})], text="I will drain n1.")
    model.reply("n1 is drained.")
    with worker(setting), worker(setting), api_server(setting, workers=2) as first:
        conversation_id, pending = proposed_over_http(first.url, "drain n1")
        approved = httpx.post(
            f"{first.url}/api/chat", json=approval(conversation_id, pending), timeout=30
        ).json()
        assert approved["meta"]["stop_reason"] == "running_in_background"
        wait_for(lambda: "started n1" in ledger.read_text(), "the drain starting on the worker")
        assert first.process is not None
        first.process.terminate()  # the server and both its workers
        first.process.wait(timeout=30)
        with api_server(setting, workers=2) as second:

            def progress() -> Any:
                read = httpx.get(f"{second.url}/api/conversations/{conversation_id}", timeout=10).json()
                return read["tool_calls"][0]["progress"]

            wait_for(progress, "the drain's progress, read from the store")
            assert progress() == {"message": "evicting the pods of n1", "fraction": 0.5}
            Path(setting["DCAF_TEST_RELEASE"]).touch()

            def answered() -> dict[str, Any] | None:
                read = httpx.get(f"{second.url}/api/conversations/{conversation_id}", timeout=10).json()
                return read if read["messages"][-1]["content"] == "n1 is drained." else None

            wait_for(answered, "the model's answer after the job's result")
            read = answered()
    assert read is not None
    assert [(c["status"], c["progress"]) for c in read["tool_calls"]] == [("executed", None)]
    assert tool_results(model.requests[-1]) == ["n1 drained"]
    assert [line.split(" ", 1)[1] for line in ledger.read_text().splitlines()] == [
        "started n1",
        "finished n1",
    ]


def test_a_broker_message_replayed_by_hand_runs_nothing(
    setting: dict[str, str], monkeypatch: pytest.MonkeyPatch, model: OpenAICompatibleServer
) -> None:
    """Tools on a job engine, "at most once: the store decides": the message the approval put on the
    broker, copied off Redis before a worker took it and pushed again after its job ran, is taken by
    the worker and runs nothing; the tool ran once and the call is stored as it was."""
    model.call([("drain_node", {"node": "n1"})])
    model.reply("n1 is drained.")
    agent = api_agent(setting, monkeypatch)
    queue = setting["DCAF_TEST_QUEUE"]
    broker = redis.Redis.from_url(BROKER)
    Path(setting["DCAF_TEST_RELEASE"]).touch()
    conversation_id, call_id = approved_in(agent, "drain n1")
    [message] = broker.lrange(queue, 0, -1)  # no worker yet: the job waits on the broker
    task_id = json.loads(message)["headers"]["id"]
    with worker(setting) as process:
        wait_for(lambda: last_answer(agent, conversation_id) == "n1 is drained.", "the model's answer")
        assert outcome_of(agent, task_id)["outcome"] == "executed"
        before = agent.repository.get(conversation_id)
        executor_of(agent).app.AsyncResult(task_id).forget()  # so the replay's outcome is the one read
        broker.lpush(queue, message)
        replayed = outcome_of(agent, task_id)
    after = agent.repository.get(conversation_id)
    assert replayed["outcome"] == "refused"
    assert Path(setting["DCAF_TEST_LEDGER"]).read_text().splitlines() == [
        f"{process.pid} started n1",
        f"{process.pid} finished n1",
    ]
    as_stored = (after.version, repr(after.tool_call(call_id)))  # every field (a call is an entity)
    assert as_stored == (before.version, repr(before.tool_call(call_id)))
    assert len(model.requests) == 2  # nor was the model asked again


def test_a_forged_message_naming_a_call_never_approved_runs_nothing(
    setting: dict[str, str], monkeypatch: pytest.MonkeyPatch, model: OpenAICompatibleServer
) -> None:
    """Tools on a job engine, "at most once: the store decides": a message sent to the broker by hand
    that names a call the model proposed and nobody approved, with the fingerprint of its very
    arguments, runs nothing; the call still waits for its approval."""
    model.call([("drain_node", {"node": "n1"})])
    agent = api_agent(setting, monkeypatch)
    Path(setting["DCAF_TEST_RELEASE"]).touch()
    asked = agent.run("drain n1")
    [pending] = asked.pending_tool_calls
    stored = agent.repository.get(asked.conversation_id).tool_call(pending.id)
    forged = ToolJob(asked.conversation_id, pending.id, fingerprint(stored.name, stored.effective_input))
    executor = executor_of(agent)
    with worker(setting):
        sent = executor.app.send_task(TASK, args=[forged.to_dict()], queue=executor.queue)
        refused = outcome_of(agent, sent.id)
    assert refused["outcome"] == "refused"
    assert Path(setting["DCAF_TEST_LEDGER"]).read_text() == ""
    assert status(agent, asked.conversation_id, pending.id) is ToolCallStatus.PENDING


def test_twenty_concurrent_approvals_of_one_background_call_enqueue_one_job(
    setting: dict[str, str], model: OpenAICompatibleServer
) -> None:
    """Tools on a job engine: twenty approvals of one call over HTTP at once: one is taken and one job
    is on the broker (no worker yet), which runs once when a worker starts; the other nineteen are
    told the call was already decided, at once or, having lost the save to another approval (`409
    concurrent_update`, docs/approvals.md), when they try again."""
    model.call([("drain_node", {"node": "n1"})], text="I will drain n1.")
    model.reply("n1 is drained.")
    ledger = Path(setting["DCAF_TEST_LEDGER"])
    Path(setting["DCAF_TEST_RELEASE"]).touch()
    with api_server(setting) as server:
        conversation_id, pending = proposed_over_http(server.url, "drain n1")
        body = approval(conversation_id, pending)
        start = threading.Barrier(20)
        answers: list[httpx.Response] = []

        def approve_once() -> None:
            start.wait(timeout=30)
            for _ in range(20):  # a client retries what lost the race, as docs/protocol.md says
                answer = httpx.post(f"{server.url}/api/chat", json=body, timeout=60)
                if answer.status_code != 409 or answer.json()["error"]["code"] != "concurrent_update":
                    break
            answers.append(answer)

        approvers = [threading.Thread(target=approve_once) for _ in range(20)]
        for approver in approvers:
            approver.start()
        for approver in approvers:
            approver.join(timeout=90)
        enqueued = redis.Redis.from_url(BROKER).llen(setting["DCAF_TEST_QUEUE"])

        def answered() -> bool:
            read = httpx.get(f"{server.url}/api/conversations/{conversation_id}", timeout=10).json()
            return bool(read["messages"][-1]["content"] == "n1 is drained.")

        with worker(setting) as process:
            wait_for(answered, "the model's answer after the job's result")
        runs = ledger.read_text().splitlines()
    taken = [a.json() for a in answers if a.status_code == 200]
    told = [a.json()["error"]["code"] for a in answers if a.status_code != 200]
    assert [t["meta"]["stop_reason"] for t in taken] == ["running_in_background"]
    assert told == ["tool_call_already_decided"] * 19
    assert enqueued == 1
    assert runs == [f"{process.pid} started n1", f"{process.pid} finished n1"]


def test_a_stop_from_the_page_stops_the_job_on_the_worker(
    setting: dict[str, str], model: OpenAICompatibleServer
) -> None:
    """Tools on a job engine, "a cancel reaches the job": the page's Stop (`POST
    /api/conversations/{id}/cancel`) while the drain runs on the worker: the tool sees it within the
    worker's half-second reads (the lease, ten minutes here, is not waited for), stops, and its call
    fails as stopped; the model is not asked again until someone writes."""
    model.call([("drain_node", {"node": "n1"})], text="I will drain n1.")
    ledger = Path(setting["DCAF_TEST_LEDGER"])
    with worker(setting) as process, api_server(setting) as server:
        conversation_id, pending = proposed_over_http(server.url, "drain n1")
        approving = approval(conversation_id, pending)
        approved = httpx.post(f"{server.url}/api/chat", json=approving, timeout=30).json()
        assert approved["meta"]["stop_reason"] == "running_in_background"
        wait_for(lambda: "started n1" in ledger.read_text(), "the drain starting on the worker")
        stop = httpx.post(f"{server.url}/api/conversations/{conversation_id}/cancel", timeout=30)
        assert stop.json() == {"conversation_id": conversation_id, "cancel_requested": True}

        def settled() -> dict[str, Any] | None:
            read = httpx.get(f"{server.url}/api/conversations/{conversation_id}", timeout=10).json()
            return read if read["tool_calls"][0]["status"] != "approved" else None

        wait_for(settled, "the drain's call settled", seconds=90)
        read = settled()
    assert read is not None
    [call] = read["tool_calls"]
    assert (call["status"], call["error"]) == ("failed", STOPPED_BY_CANCEL)
    assert ledger.read_text().splitlines() == [f"{process.pid} started n1", f"{process.pid} stopped n1"]
    assert len(model.requests) == 1
