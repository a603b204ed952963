"""The executor port's contract (docs/runs.md, "Tools on a job engine"): every executor runs the job of
an approved, queued call once, records its result in the store, and runs nothing for a job handed
over again, replayed, or forged. Adding an executor = adding a harness to ``EXECUTORS``.

The Celery executor runs over the real Redis broker on 127.0.0.1:6379 (database 9), with Celery's
own in-process worker; each test has a queue of its own, so parallel tests never take each other's
jobs."""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from dcaf_like import Agent, InvalidRequest, ToolContext, ToolDecision, tool
from dcaf_like.application.executors import ToolExecutor, ToolJob
from dcaf_like.application.tool_execution import STOPPED_BY_CANCEL
from dcaf_like.application.tool_jobs import InProcessExecutor, JobOutcome, ToolJobs
from dcaf_like.domain import ToolCallStatus
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

BROKER = os.environ.get("DCAF_TEST_BROKER_URL", "redis://127.0.0.1:6379/9")
#: Seconds a test waits for a worker's outcome before it fails: never how fast, only that it ends.
PATIENCE = 60


class KeptJobs:
    """An executor that keeps the jobs it is handed, so a test hands them to the executor under test."""

    queue_ttl = 3600.0

    def __init__(self) -> None:
        self.jobs: list[ToolJob] = []

    def submit(self, job: ToolJob) -> None:
        self.jobs.append(job)

    async def asubmit(self, job: ToolJob) -> None:
        self.jobs.append(job)


Harness = Callable[[ToolJobs], AbstractContextManager[ToolExecutor]]


@contextmanager
def in_process(jobs: ToolJobs) -> Iterator[ToolExecutor]:
    yield InProcessExecutor(jobs)


@contextmanager
def celery(jobs: ToolJobs) -> Iterator[ToolExecutor]:
    pytest.importorskip("celery", reason="the celery extra is not installed: pip install -e '.[celery]'")
    from celery.contrib.testing.worker import start_worker

    from dcaf_like.jobs.celery import CeleryExecutor

    executor = CeleryExecutor(BROKER, queue=f"dcaf-test-{uuid.uuid4().hex}")
    worker_app = executor.worker_app(jobs)
    with start_worker(
        worker_app,
        pool="threads",
        concurrency=4,
        perform_ping_check=False,
        queues=[executor.queue],
        shutdown_timeout=30,
    ):
        yield executor


EXECUTORS: dict[str, Harness] = {"in_process": in_process, "celery": celery}


@pytest.fixture(params=sorted(EXECUTORS))
def harness(request: pytest.FixtureRequest) -> Harness:
    if request.param == "celery":  # its broker is the Redis server the suite's `redis_url` checks
        request.getfixturevalue("redis_url")
    return EXECUTORS[request.param]


class Drains:
    """A background tool that counts its runs, and the outcomes the worker reports, as they come."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.outcomes: queue.Queue[JobOutcome] = queue.Queue()
        self.lock = threading.Lock()

        @tool(background=True)
        def drain(node: str) -> str:
            """Evict every pod of a node."""
            with self.lock:
                self.runs.append(node)
            return f"{node} drained"

        self.tool = drain

    def outcome(self) -> JobOutcome:
        return self.outcomes.get(timeout=PATIENCE)


def approved_job(drains: Drains, calls: int = 1) -> tuple[Agent, list[ToolJob]]:
    """An agent whose model proposed `calls` drains, approved: their jobs kept, not run."""
    kept = KeptJobs()
    proposed = [tool_call("drain", node=f"n{i}") for i in range(calls)]
    model = FakeRuntime([tool_calls(*proposed), reply("Drained.")])
    agent = Agent(tools=[drains.tool], runtime=model, executor=kept)
    asked = agent.run("drain the nodes")
    response = agent.decide(
        asked.conversation_id, [ToolDecision(c.id, True) for c in asked.pending_tool_calls]
    )
    assert response.stop_reason == "running_in_background"
    assert len(kept.jobs) == calls
    return agent, kept.jobs


def worker_jobs(agent: Agent, drains: Drains) -> ToolJobs:
    """The agent's jobs as a worker runs them, reporting each outcome."""
    jobs = agent.jobs
    jobs.on_outcome = drains.outcomes.put
    return jobs


def test_a_job_runs_its_approved_call_and_records_the_result(harness: Harness) -> None:
    """Tools on a job engine: the worker runs the call's stored arguments and records its result."""
    drains = Drains()
    agent, [job] = approved_job(drains)
    with harness(worker_jobs(agent, drains)) as executor:
        executor.submit(job)
        assert drains.outcome() == JobOutcome("executed", continues=True)
    call = agent.repository.get(job.conversation_id).tool_call(job.call_id)
    assert (call.status, call.result) == (ToolCallStatus.EXECUTED, "n0 drained")
    assert drains.runs == ["n0"]
    assert_the_model_reads_the_results(harness, agent, job.conversation_id)


def assert_the_model_reads_the_results(harness: Harness, agent: Agent, conversation_id: str) -> None:
    """docs/runs.md, "Tools on a job engine": a job engine's worker goes on with the run itself, once,
    when its job settled the run's last call; in process, the job ran inside the turn that handed it
    over, and the next turn goes on."""
    if harness is in_process:
        assert agent.decide(conversation_id, []).text == "Drained."
        return
    assert answered(agent, conversation_id) == "Drained."
    with pytest.raises(InvalidRequest, match="nothing to do"):  # the model already read them
        agent.decide(conversation_id, [])


def answered(agent: Agent, conversation_id: str) -> str:
    """The model's last answer in the stored conversation, once there is one (within PATIENCE)."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        last = agent.repository.get(conversation_id).messages[-1]
        if last.role.value == "assistant" and last.content.text:
            return last.content.text
        time.sleep(0.02)
    pytest.fail("the worker never went on with the run")


def test_a_job_handed_over_again_runs_nothing(harness: Harness) -> None:
    """Tools on a job engine: a job delivered twice, or replayed by hand, runs its call once."""
    drains = Drains()
    agent, [job] = approved_job(drains)
    with harness(worker_jobs(agent, drains)) as executor:
        executor.submit(job)
        assert drains.outcome().outcome == "executed"
        executor.submit(job)
        assert drains.outcome() == JobOutcome("refused", "the call is executed, not approved")
    assert drains.runs == ["n0"]


def test_concurrent_deliveries_of_one_job_run_it_once(harness: Harness) -> None:
    """Tools on a job engine: twenty deliveries of one job at once run it once; the claim decides."""
    drains = Drains()
    agent, [job] = approved_job(drains)
    with harness(worker_jobs(agent, drains)) as executor:
        threads = [threading.Thread(target=executor.submit, args=(job,)) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        outcomes = [drains.outcome().outcome for _ in range(20)]
    assert sorted(set(outcomes)) == ["executed", "refused"]
    assert outcomes.count("executed") == 1
    assert drains.runs == ["n0"]


@pytest.mark.parametrize(
    ("forge", "reason"),
    [
        (
            lambda job: ToolJob(job.conversation_id, job.call_id, "0" * 64),
            "the job's fingerprint is not the approved call's",
        ),
        (
            lambda job: ToolJob(job.conversation_id, "tc_forged", job.fingerprint),
            "the conversation has no such call",
        ),
        (lambda job: ToolJob("no-such-conversation", job.call_id, job.fingerprint), "no such conversation"),
    ],
    ids=["other arguments", "unknown call", "unknown conversation"],
)
def test_a_forged_job_runs_nothing(
    harness: Harness, forge: Callable[[ToolJob], ToolJob], reason: str
) -> None:
    """Tools on a job engine: a job naming no call approved and queued with its fingerprint runs nothing."""
    drains = Drains()
    agent, [job] = approved_job(drains)
    with harness(worker_jobs(agent, drains)) as executor:
        executor.submit(forge(job))
        assert drains.outcome() == JobOutcome("refused", reason)
    assert drains.runs == []
    assert agent.repository.get(job.conversation_id).tool_call(job.call_id).status is ToolCallStatus.APPROVED


def test_a_job_of_a_call_not_approved_runs_nothing(harness: Harness) -> None:
    """Tools on a job engine: a job for a call that waits for its approval runs nothing."""
    drains = Drains()
    model = FakeRuntime([tool_calls(tool_call("drain", node="n0")), reply("Drained.")])
    agent = Agent(tools=[drains.tool], runtime=model, executor=KeptJobs())
    asked = agent.run("drain n0")
    [pending] = agent.repository.get(asked.conversation_id).pending_tool_calls
    with harness(worker_jobs(agent, drains)) as executor:
        executor.submit(ToolJob(asked.conversation_id, pending.id.value, pending.approved_fingerprint))
        assert drains.outcome() == JobOutcome("refused", "the call is pending, not approved")
    assert drains.runs == []


def test_the_jobs_of_one_batch_each_run_once(harness: Harness) -> None:
    """Tools on a job engine: each approved call of a batch is a job of its own."""
    drains = Drains()
    agent, jobs = approved_job(drains, calls=3)
    with harness(worker_jobs(agent, drains)) as executor:
        for job in jobs:
            executor.submit(job)
        assert sorted(drains.outcome().outcome for _ in jobs) == ["executed"] * 3
    assert sorted(drains.runs) == ["n0", "n1", "n2"]
    assert_the_model_reads_the_results(harness, agent, jobs[0].conversation_id)


def test_a_cancel_asked_while_the_job_runs_stops_a_tool_that_looks(harness: Harness) -> None:
    """Tools on a job engine, "a cancel reaches the job": asked while the tool runs, the tool's context
    says so within the worker's half-second reads (a ten-minute lease is not waited for), the tool
    stops there, and its call fails as stopped (ADR 45)."""
    started = threading.Event()
    outcomes: queue.Queue[JobOutcome] = queue.Queue()

    @tool(background=True)
    def evict_pods(node: str, context: ToolContext) -> str:
        """Evict the pods of a node one by one."""
        started.set()
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:  # a bounded wait for the cancel, not a measure of time
            context.check_cancelled()
            time.sleep(0.01)
        return "never cancelled"

    kept = KeptJobs()
    model = FakeRuntime([tool_calls(tool_call("evict_pods", node="n0")), reply("Stopped.")])
    agent = Agent(tools=[evict_pods], runtime=model, executor=kept, lease_ttl=600)
    asked = agent.run("drain n0")
    agent.decide(asked.conversation_id, [ToolDecision(c.id, True) for c in asked.pending_tool_calls])
    [job] = kept.jobs
    jobs = agent.jobs
    jobs.on_outcome = outcomes.put
    with harness(jobs) as executor:
        handing = threading.Thread(target=executor.submit, args=(job,))  # in process: runs it there
        handing.start()
        assert started.wait(PATIENCE)
        agent.cancel(asked.conversation_id)
        assert outcomes.get(timeout=PATIENCE) == JobOutcome("failed", STOPPED_BY_CANCEL, continues=True)
        handing.join(PATIENCE)
    call = agent.repository.get(job.conversation_id).tool_call(job.call_id)
    assert (call.status, call.error) == (ToolCallStatus.FAILED, STOPPED_BY_CANCEL)
