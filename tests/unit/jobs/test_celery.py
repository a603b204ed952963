"""The Celery adapter (docs/runs.md, "Tools on a job engine"): the settings at-most-once needs, and a
worker over the real Redis broker (127.0.0.1:6379, database 9) that runs nothing for a message
delivered again, replayed by hand, or that is no job at all."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dcaf_like import Agent, ToolDecision, ToolJob, tool
from dcaf_like.domain import ToolCallStatus
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

pytest.importorskip("celery", reason="the celery extra is not installed: pip install -e '.[celery]'")

from celery.contrib.testing.worker import start_worker

from dcaf_like.jobs.celery import TASK, CeleryExecutor

BROKER = os.environ.get("DCAF_TEST_BROKER_URL", "redis://127.0.0.1:6379/9")
# Celery's Redis result backend calls a method redis-py deprecates (setex); the answer is read all the same.
pytestmark = pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning")
PATIENCE = 60  # seconds a test waits for a worker's answer: never how fast, only that it comes


def test_a_message_is_acknowledged_when_taken_and_a_worker_takes_one_at_a_time() -> None:
    """Tools on a job engine: late acks off (a worker killed mid-task leaves nothing to deliver
    again), one message prefetched, JSON only (a message is data, never pickled code)."""
    conf = CeleryExecutor(BROKER).app.conf
    assert conf.task_acks_late is False
    assert conf.task_reject_on_worker_lost is False
    assert conf.worker_prefetch_multiplier == 1
    assert list(conf.accept_content) == ["json"]


def test_the_broker_url_is_never_in_the_executors_repr() -> None:
    assert "s3cret" not in repr(CeleryExecutor("redis://:s3cret@127.0.0.1:6379/9"))


def test_a_queue_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="queue_ttl"):
        CeleryExecutor(BROKER, queue_ttl=0)


runs: list[str] = []


@tool(background=True)
def drain(node: str) -> str:
    """Evict every pod of a node."""
    runs.append(node)
    return f"{node} drained"


@pytest.fixture
def redis_broker(redis_url: str) -> str:
    """The broker, on the Redis server the suite's `redis_url` found running (another database)."""
    return BROKER


@pytest.fixture
def served(redis_broker: str) -> Iterator[tuple[Agent, CeleryExecutor]]:
    """An agent whose background tool goes to Celery, with a worker (results kept in Redis)."""
    runs.clear()
    executor = CeleryExecutor(redis_broker, backend=redis_broker, queue=f"dcaf-test-{uuid.uuid4().hex}")
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("n1 is drained.")])
    agent = Agent(tools=[drain], runtime=model, executor=executor)
    worker = executor.worker_app(agent.jobs)
    with start_worker(
        worker, pool="solo", perform_ping_check=False, queues=[executor.queue], shutdown_timeout=30
    ):
        yield agent, executor


def sent(executor: CeleryExecutor, message: Any, task_id: str | None = None) -> dict[str, str]:
    """The worker's answer to `message`, sent as anyone who can reach the broker may send it."""
    result = executor.app.send_task(TASK, args=[message], queue=executor.queue, task_id=task_id)
    answer: dict[str, str] = result.get(timeout=PATIENCE)
    return answer


def queued_job(agent: Agent) -> ToolJob:
    asked = agent.run("drain n1")
    [pending] = asked.pending_tool_calls
    call = agent.repository.get(asked.conversation_id).tool_call(pending.id)
    return ToolJob(asked.conversation_id, pending.id, call.fingerprint)


def test_a_redelivered_and_a_hand_replayed_message_run_nothing(served: tuple[Agent, CeleryExecutor]) -> None:
    """Tools on a job engine: the approval's job runs the tool once; the same message delivered
    again (its task id) or replayed by hand (a new one) is refused by the claim in the store."""
    agent, executor = served
    asked = agent.run("drain n1")
    [pending] = asked.pending_tool_calls
    decided = agent.decide(asked.conversation_id, [ToolDecision(pending.id, True)])
    assert decided.stop_reason == "running_in_background"
    call = agent.repository.get(asked.conversation_id).tool_call(pending.id)
    job = ToolJob(asked.conversation_id, pending.id, call.approved_fingerprint).to_dict()
    task_id = str(uuid.uuid4())
    refused = {"outcome": "refused", "reason": "the call is executed, not approved"}
    assert sent(executor, job, task_id=task_id) == refused  # the executor's own message ran first
    assert sent(executor, job, task_id=task_id) == refused  # delivered again
    assert sent(executor, job) == refused  # replayed by hand
    stored = agent.repository.get(asked.conversation_id).tool_call(pending.id)
    assert (stored.status, stored.result) == (ToolCallStatus.EXECUTED, "n1 drained")
    assert runs == ["n1"]


def test_a_message_for_a_call_not_yet_approved_runs_nothing(served: tuple[Agent, CeleryExecutor]) -> None:
    """Tools on a job engine: a message naming a pending call (its proposal's fingerprint) is refused."""
    agent, executor = served
    job = queued_job(agent)
    assert sent(executor, job.to_dict()) == {
        "outcome": "refused",
        "reason": "the call is pending, not approved",
    }
    assert runs == []


@pytest.mark.parametrize(
    "message", ["rm -rf /", {"conversation_id": "c"}, {"call_id": 1, "fingerprint": None}]
)
def test_a_message_that_is_no_job_runs_nothing(served: tuple[Agent, CeleryExecutor], message: Any) -> None:
    """Tools on a job engine: what the worker cannot read as a job is refused before any store read."""
    _, executor = served
    assert sent(executor, message)["outcome"] == "refused"
    assert runs == []


def closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_ready_names_the_job_engine_and_fails_while_its_broker_is_unreachable(redis_broker: str) -> None:
    """docs/operations.md, "Health and readiness": `job_engine` checks the broker of an agent whose
    background tools go to Celery: 200 while it answers, 503 naming it when it cannot be reached."""
    from fastapi.testclient import TestClient

    from dcaf_like import create_app

    def ready(broker: str) -> Any:
        agent = Agent(tools=[drain], runtime=FakeRuntime([]), executor=CeleryExecutor(broker))
        with TestClient(create_app(agent)) as client:
            return client.get("/ready")

    up = ready(redis_broker)
    assert up.status_code == 200, up.text
    assert up.json()["checks"]["job_engine"]["ok"] is True
    down = ready(f"redis://127.0.0.1:{closed_port()}/0")
    assert down.status_code == 503
    check = down.json()["checks"]["job_engine"]
    assert check["ok"] is False
    assert "127.0.0.1" not in check["error"]  # the exception's class, never its text
