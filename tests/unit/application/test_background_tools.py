"""Background tools (docs/runs.md, "Tools on a job engine"): the turn queues an approved call of a
background tool, saves it, hands its job to the agent's executor and ends without waiting; the job
runs it once, wherever it runs; the next turn reads its result."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from dcaf_like import (
    Agent,
    InProcessExecutor,
    ModelError,
    QuestionExpired,
    ToolContext,
    ToolDecision,
    ToolJob,
    ToolQueued,
    tool,
)
from dcaf_like.application.executors import LEASED_TO_QUEUE, InvalidJob
from dcaf_like.application.tool_execution import STOPPED_BY_CANCEL
from dcaf_like.application.tool_jobs import JobOutcome
from dcaf_like.domain import CallOutcome, ToolCallStatus
from dcaf_like.stores.memory import InMemoryConversationRepository
from dcaf_like.testing import FakeRuntime, ManualClock, fail, reply, tool_call, tool_calls


class KeptJobs:
    """An executor that keeps its jobs, and what the store held for each call when it was handed over."""

    queue_ttl = 600.0

    def __init__(self, agent_store: Any = None, fail: BaseException | None = None) -> None:
        self.jobs: list[ToolJob] = []
        self.seen: list[tuple[str, str | None]] = []
        self.store, self.fail = agent_store, fail

    def submit(self, job: ToolJob) -> None:
        if self.fail is not None:
            raise self.fail
        if self.store is not None:
            call = self.store.get(job.conversation_id).tool_call(job.call_id)
            self.seen.append((call.status.value, call.lease_owner))
        self.jobs.append(job)

    async def asubmit(self, job: ToolJob) -> None:
        self.submit(job)


runs: list[str] = []


@tool(background=True)
def drain(node: str) -> str:
    """Evict every pod of a node."""
    runs.append(node)
    return f"{node} drained"


@tool(requires_approval=False)
def list_nodes() -> str:
    """List the nodes."""
    return "n1, n2"


@pytest.fixture(autouse=True)
def _no_runs() -> None:
    runs.clear()


def approve_all(agent: Agent, conversation_id: str, response: Any) -> Any:
    return agent.decide(conversation_id, [ToolDecision(c.id, True) for c in response.pending_tool_calls])


def test_an_approved_background_call_is_queued_and_the_turn_does_not_wait() -> None:
    """Tools on a job engine: the response says running_in_background; the call is saved approved
    and queued (no worker holds it) before its job is handed over; the tool has not run."""
    clock = ManualClock(1_700_000_000.0)
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("n1 is drained.")])
    store = InMemoryConversationRepository()
    kept = KeptJobs(store)
    agent = Agent(tools=[drain], runtime=model, clock=clock, executor=kept, repository=store)
    asked = agent.run("drain n1")
    response = approve_all(agent, asked.conversation_id, asked)
    assert response.stop_reason == "running_in_background"
    assert response.executed_tool_calls == ()
    assert runs == []
    [job] = kept.jobs
    assert kept.seen == [("approved", LEASED_TO_QUEUE)]  # saved queued before the job left
    call = agent.repository.get(asked.conversation_id).tool_call(job.call_id)
    assert call.lease_expires_at == clock.now + kept.queue_ttl
    assert (job.conversation_id, job.fingerprint) == (asked.conversation_id, call.approved_fingerprint)


def test_the_next_turn_reads_the_jobs_result() -> None:
    """Tools on a job engine: the job records the result; the user's next message (even an empty
    one) lets the model read it."""
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("n1 is drained.")])
    agent = Agent(tools=[drain], runtime=model, executor=InProcessExecutor)
    asked = agent.run("drain n1")
    assert approve_all(agent, asked.conversation_id, asked).stop_reason == "running_in_background"
    assert runs == ["n1"]
    response = agent.decide(asked.conversation_id, [])
    assert response.text == "n1 is drained."
    [call] = agent.repository.get(asked.conversation_id).tool_calls.values()
    assert (call.status, call.result) == (ToolCallStatus.EXECUTED, "n1 drained")
    assert model.requests[-1].messages[-1].content == "n1 drained"


def test_the_stream_says_a_call_went_to_the_background() -> None:
    """Tools on a job engine: the stream sends tool_queued for the call (no tool_started, no
    tool_finished), and its done event says running_in_background."""
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("n1 is drained.")])
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept)
    asked = agent.run("drain n1")
    [pending] = asked.pending_tool_calls

    async def events() -> list[Any]:
        decision = {
            "role": "user",
            "content": "",
            "data": {"tool_calls": [{"id": pending.id, "execute": True}]},
        }
        return [e async for e in agent.arun_stream([decision], conversation_id=asked.conversation_id)]

    seen = asyncio.run(events())
    kinds = [e.type for e in seen]
    assert "tool_started" not in kinds
    assert "tool_finished" not in kinds
    [queued] = [e for e in seen if isinstance(e, ToolQueued)]
    assert (queued.call.id, queued.call.status) == (pending.id, "approved")
    assert seen[-1].response.stop_reason == "running_in_background"
    assert len(kept.jobs) == 1


def test_a_call_the_policy_allows_is_queued_in_the_turn_that_proposed_it() -> None:
    """Tools on a job engine: every approved call goes, by a human or by the policy; the other
    calls of the batch run in the turn, and the model is not asked again."""

    @tool(requires_approval=False, background=True)
    def restart(name: str) -> str:
        """Restart a deployment."""
        return f"{name} restarted"

    model = FakeRuntime(
        [tool_calls(tool_call("restart", name="web"), tool_call("list_nodes")), reply("unused")]
    )
    kept = KeptJobs()
    agent = Agent(tools=[restart, list_nodes], runtime=model, executor=kept)
    response = agent.run("restart web")
    assert response.stop_reason == "running_in_background"
    assert [c.name for c in response.executed_tool_calls] == ["list_nodes"]
    [job] = kept.jobs
    assert agent.repository.get(response.conversation_id).tool_call(job.call_id).name == "restart"
    assert len(model.requests) == 1


def test_every_tool_of_an_agent_may_run_in_the_background() -> None:
    """Tools on a job engine: Agent(executor=..., background=True) sends every tool's calls."""
    model = FakeRuntime([tool_calls(tool_call("list_nodes")), reply("unused")])
    kept = KeptJobs()
    agent = Agent(tools=[list_nodes], runtime=model, executor=kept, background=True)
    assert agent.run("which nodes?").stop_reason == "running_in_background"
    assert len(kept.jobs) == 1


def test_a_background_tool_needs_an_executor() -> None:
    with pytest.raises(ValueError, match=r"tools run in the background \(drain\) need an executor"):
        Agent(tools=[drain], runtime=FakeRuntime([]))


def test_a_job_that_cannot_be_queued_fails_its_call_not_run() -> None:
    """Tools on a job engine: a broker that cannot be reached fails the call, not run; the next
    turn's model reads why."""
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("The drain could not start.")])
    agent = Agent(tools=[drain], runtime=model, executor=KeptJobs(fail=ConnectionError("broker down")))
    asked = agent.run("drain n1")
    approve_all(agent, asked.conversation_id, asked)
    [call] = agent.repository.get(asked.conversation_id).tool_calls.values()
    assert call.status is ToolCallStatus.FAILED
    assert call.error == "not run: its job could not be queued (ConnectionError)"
    assert agent.decide(asked.conversation_id, []).text == "The drain could not start."


def test_a_job_past_its_queue_window_is_interrupted_and_never_runs() -> None:
    """Tools on a job engine: a call whose job waited past the executor's queue_ttl is settled as
    interrupted by the next turn, and its job, should it come later, runs nothing."""
    clock = ManualClock(1_700_000_000.0)
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("It never started.")])
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept, clock=clock)
    asked = agent.run("drain n1")
    approve_all(agent, asked.conversation_id, asked)
    clock.advance(kept.queue_ttl)
    [interrupted] = agent.decide(asked.conversation_id, []).executed_tool_calls
    assert interrupted.status == "interrupted"
    assert agent.jobs.run(kept.jobs[0]) == JobOutcome("refused", "the call is interrupted, not approved")
    assert runs == []


def test_a_job_claimed_after_its_queue_window_runs_nothing() -> None:
    clock = ManualClock(1_700_000_000.0)
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("unused")])
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept, clock=clock)
    asked = agent.run("drain n1")
    approve_all(agent, asked.conversation_id, asked)
    clock.advance(kept.queue_ttl)
    assert agent.jobs.run(kept.jobs[0]) == JobOutcome(
        "refused", "the call waited in the queue past its window"
    )
    assert runs == []


def test_a_worker_holds_the_call_under_a_lease_of_its_own_while_the_tool_runs() -> None:
    """Tools on a job engine: the worker claims the call under a lease of its own (renewed as a turn
    renews it), so no turn settles it while it runs."""
    clock = ManualClock(1_700_000_000.0)
    leases: list[tuple[str | None, float | None]] = []
    holder: dict[str, Agent] = {}

    @tool(background=True)
    def snapshot(volume: str) -> str:
        """Snapshot a volume."""
        call = next(iter(holder["agent"].repository.get(conversation).tool_calls.values()))
        leases.append((call.lease_owner, call.lease_expires_at))
        return f"{volume} saved"

    model = FakeRuntime([tool_calls(tool_call("snapshot", volume="v1")), reply("Saved.")])
    kept = KeptJobs()
    agent = holder["agent"] = Agent(tools=[snapshot], runtime=model, executor=kept, clock=clock, lease_ttl=30)
    asked = agent.run("snapshot v1")
    conversation = asked.conversation_id
    approve_all(agent, conversation, asked)
    jobs = agent.jobs
    assert jobs.run(kept.jobs[0]).outcome == "executed"
    [(owner, until)] = leases
    assert owner == jobs.worker
    assert until == clock.now + 30


def test_a_worker_renews_the_lease_of_a_call_whose_tool_runs_past_a_third_of_it() -> None:
    """Tools on a job engine: while the tool runs, the worker renews its call's lease every third of
    the lease (here 0.3 s), apart from its half-second reads for a cancel."""
    holder: dict[str, Any] = {}

    def stored_lease() -> float | None:
        [call] = holder["agent"].repository.get(holder["conversation"]).tool_calls.values()
        return call.lease_expires_at

    @tool(background=True)
    def snapshot(volume: str) -> str:
        """Snapshot a volume."""
        claimed = stored_lease()
        deadline = time.monotonic() + 60
        while stored_lease() == claimed:  # a bounded wait for the renewal, not a measure of time
            if time.monotonic() > deadline:
                return "never renewed"
            time.sleep(0.01)
        return f"{volume} saved"

    model = FakeRuntime([tool_calls(tool_call("snapshot", volume="v1")), reply("Saved.")])
    kept = KeptJobs()
    agent = holder["agent"] = Agent(tools=[snapshot], runtime=model, executor=kept, lease_ttl=0.3)
    asked = agent.run("snapshot v1")
    holder["conversation"] = asked.conversation_id
    approve_all(agent, asked.conversation_id, asked)
    assert agent.jobs.run(kept.jobs[0]).outcome == "executed"
    [call] = agent.repository.get(asked.conversation_id).tool_calls.values()
    assert call.result == "v1 saved"


def test_a_result_is_not_recorded_once_another_worker_settled_the_call() -> None:
    """Tools on a job engine: a worker that lost its call (its lease ran out, the call was settled
    as interrupted) does not overwrite the record: the interrupted record stands."""
    clock = ManualClock(1_700_000_000.0)
    holder: dict[str, Any] = {}

    @tool(background=True)
    def slow(name: str) -> str:
        """A tool whose worker pauses past its lease."""
        clock.advance(120)
        holder["agent"].decide(holder["conversation"], [])  # another turn settles it meanwhile
        return "done"

    model = FakeRuntime([tool_calls(tool_call("slow", name="x")), reply("Interrupted."), reply("again")])
    kept = KeptJobs()
    agent = holder["agent"] = Agent(tools=[slow], runtime=model, executor=kept, clock=clock, lease_ttl=60)
    asked = agent.run("go")
    holder["conversation"] = asked.conversation_id
    approve_all(agent, asked.conversation_id, asked)
    outcome = agent.jobs.run(kept.jobs[0])
    assert outcome.outcome == "lost"
    [call] = agent.repository.get(asked.conversation_id).tool_calls.values()
    assert call.status is ToolCallStatus.INTERRUPTED


def test_a_worker_without_the_tool_fails_the_call() -> None:
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("unused")])
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept)
    asked = agent.run("drain n1")
    approve_all(agent, asked.conversation_id, asked)
    elsewhere = Agent(tools=[list_nodes], runtime=model, repository=agent.repository)
    outcome = elsewhere.jobs.run(kept.jobs[0])
    assert outcome == JobOutcome(
        "failed", "tool 'drain' is not available on the worker that took its job", continues=True
    )
    assert runs == []


def test_a_background_job_runs_with_the_async_ports() -> None:
    """Tools on a job engine: served (arun), the in-process executor runs the job on the event loop."""
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("n1 is drained.")])
    agent = Agent(tools=[drain], runtime=model, executor=InProcessExecutor)

    async def turns() -> str:
        asked = await agent.arun("drain n1")
        decided = await agent.adecide(
            asked.conversation_id, [ToolDecision(asked.pending_tool_calls[0].id, True)]
        )
        assert decided.stop_reason == "running_in_background"
        return (await agent.adecide(asked.conversation_id, [])).text

    assert asyncio.run(turns()) == "n1 is drained."
    assert runs == ["n1"]


@pytest.mark.parametrize(
    "message",
    [
        "not a job",
        {"conversation_id": "c", "call_id": "tc_1"},
        {"conversation_id": "c", "call_id": "tc_1", "fingerprint": "f" * 63},
        {"conversation_id": "c d", "call_id": "tc_1", "fingerprint": "f" * 64},
        {"conversation_id": "c", "call_id": 7, "fingerprint": "f" * 64},
    ],
)
def test_a_message_that_is_not_a_job_is_refused(message: Any) -> None:
    with pytest.raises(InvalidJob):
        ToolJob.of(message)


def test_a_job_reads_back_from_its_message() -> None:
    job = ToolJob("conv_1", "tc_1", "a" * 64)
    assert ToolJob.of(job.to_dict()) == job


def test_a_cancel_asked_before_the_job_starts_stops_it_before_the_tool_runs() -> None:
    """Tools on a job engine: a cancel of the conversation asked after the approval reaches the job:
    before the tool starts, the call fails, not run."""
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("Cancelled.")])
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept)
    asked = agent.run("drain n1")
    approve_all(agent, asked.conversation_id, asked)
    agent.cancel(asked.conversation_id)
    assert agent.jobs.run(kept.jobs[0]) == JobOutcome(
        "failed", "not run: the run was cancelled before it", continues=True
    )
    assert runs == []
    [call] = agent.repository.get(asked.conversation_id).tool_calls.values()
    assert call.status is ToolCallStatus.FAILED
    assert call.outcome is CallOutcome.CANCELLED  # named as a turn names a call a cancel kept from running


def test_a_job_whose_tool_runs_past_its_time_limit_fails_as_timed_out() -> None:
    """docs/protocol.md, "A call's outcome": a job's call that ran past its tool's `timeout=` ends
    `timeout`, as a turn's does, not `error`."""
    release = threading.Event()

    @tool(background=True, timeout=0.05)
    def slow(node: str) -> str:
        """Takes its time."""
        release.wait(5)  # bounded: the time limit is what ends the wait for the run
        return "done"

    kept = KeptJobs()
    agent = Agent(
        tools=[slow], runtime=FakeRuntime([tool_calls(tool_call("slow", node="n1"))]), executor=kept
    )
    asked = agent.run("go")
    approve_all(agent, asked.conversation_id, asked)
    try:
        outcome = agent.jobs.run(kept.jobs[0])
    finally:
        release.set()

    [call] = agent.repository.get(asked.conversation_id).tool_calls.values()
    assert outcome.outcome == "failed"
    assert (call.status, call.outcome) == (ToolCallStatus.FAILED, CallOutcome.TIMEOUT)


def test_a_cancel_asked_while_the_job_runs_reaches_a_tool_under_a_short_lease() -> None:
    """Tools on a job engine: a cancel asked while the tool runs turns its context's `cancelled` true
    (here under a lease shorter than the half second between reads); a tool that looks stops, and its
    call fails as stopped."""
    started = threading.Event()

    @tool(background=True)
    def evict_pods(node: str, context: ToolContext) -> str:
        """Evict the pods of a node one by one."""
        started.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a bounded wait for the cancel, not a measure of time
            context.check_cancelled()
            time.sleep(0.01)
        return "never cancelled"

    model = FakeRuntime([tool_calls(tool_call("evict_pods", node="n1")), reply("Stopped.")])
    kept = KeptJobs()
    agent = Agent(tools=[evict_pods], runtime=model, executor=kept, lease_ttl=0.3)
    asked = agent.run("drain n1")
    [outcome] = cancelled_while_it_runs(agent, kept, asked, started)
    assert outcome == JobOutcome("failed", STOPPED_BY_CANCEL, continues=True)
    [call] = agent.repository.get(asked.conversation_id).tool_calls.values()
    assert (call.status, call.error) == (ToolCallStatus.FAILED, STOPPED_BY_CANCEL)


def cancelled_while_it_runs(
    agent: Agent, kept: Any, asked: Any, started: threading.Event
) -> list[JobOutcome]:
    """Approve the call, run its job in a thread, cancel the conversation once the tool started, and
    return what the job ended with."""
    approve_all(agent, asked.conversation_id, asked)
    outcomes: list[JobOutcome] = []
    worker = threading.Thread(target=lambda: outcomes.append(agent.jobs.run(kept.jobs[0])))
    worker.start()
    assert started.wait(60)
    agent.cancel(asked.conversation_id)
    worker.join(90)
    return outcomes


def test_a_cancel_reaches_the_job_long_before_its_lease_is_renewed() -> None:
    """Tools on a job engine: the worker reads the store for a cancel every half second while the tool
    runs, as a turn does, whatever the lease (ADR 45): under a ten-minute lease, not renewed meanwhile,
    the tool sees the cancel and its call fails as stopped."""
    started = threading.Event()
    leases: list[float | None] = []
    holder: dict[str, Any] = {}

    def stored_lease() -> float | None:
        [call] = holder["agent"].repository.get(holder["conversation"]).tool_calls.values()
        return call.lease_expires_at

    @tool(background=True)
    def evict_pods(node: str, context: ToolContext) -> str:
        """Evict the pods of a node one by one."""
        leases.append(stored_lease())
        started.set()
        deadline = time.monotonic() + 60
        while not context.cancelled and time.monotonic() < deadline:  # a bounded wait for the cancel
            time.sleep(0.01)
        leases.append(stored_lease())
        context.check_cancelled()
        return "never cancelled"

    model = FakeRuntime([tool_calls(tool_call("evict_pods", node="n1")), reply("Stopped.")])
    kept = KeptJobs()
    agent = holder["agent"] = Agent(tools=[evict_pods], runtime=model, executor=kept, lease_ttl=600)
    asked = agent.run("drain n1")
    holder["conversation"] = asked.conversation_id
    outcomes = cancelled_while_it_runs(agent, kept, asked, started)
    assert outcomes == [JobOutcome("failed", STOPPED_BY_CANCEL, continues=True)]
    [claimed, when_stopped] = leases
    assert claimed is not None
    assert when_stopped == claimed  # the half-second reads saved nothing


# -- the run goes on when its last job ends (docs/runs.md, "Tools on a job engine") ---------------


def two_drains_waiting(model: FakeRuntime) -> tuple[Agent, KeptJobs, str]:
    """An agent whose run queued two background drains (n1, n2), their jobs kept, not run."""
    kept = KeptJobs()
    store = InMemoryConversationRepository()
    agent = Agent(tools=[drain], runtime=model, executor=kept, repository=store)
    asked = agent.run("drain n1 and n2")
    assert approve_all(agent, asked.conversation_id, asked).stop_reason == "running_in_background"
    return agent, kept, asked.conversation_id


def test_a_job_engine_worker_goes_on_with_the_run_once_its_last_job_ends() -> None:
    """docs/runs.md, "Tools on a job engine": the job that settles the run's last call starts the
    turn that lets the model read the results, in the worker, as the user's empty message would; the
    job that ends first does not (the other call still runs), so the model answers once."""
    model = FakeRuntime(
        [tool_calls(tool_call("drain", node="n1"), tool_call("drain", node="n2")), reply("Both drained.")]
    )
    agent, kept, conversation_id = two_drains_waiting(model)
    first, second = kept.jobs

    assert agent.jobs.run(first, continue_run=True) == JobOutcome("executed")  # n2 still runs
    assert len(model.requests) == 1
    assert agent.jobs.run(second, continue_run=True) == JobOutcome("executed", continues=True)

    assert runs == ["n1", "n2"]
    assert len(model.requests) == 2  # one continuation, after both results
    assert [m.content for m in model.requests[-1].messages[-2:]] == ["n1 drained", "n2 drained"]
    stored = agent.repository.get(conversation_id)
    assert stored.messages[-1].content.text == "Both drained."


def test_a_job_delivered_again_after_the_run_went_on_starts_nothing() -> None:
    """docs/runs.md, "Tools on a job engine": the continuation is owed by the one record that
    settled the last call; a redelivered job is refused by the claim and asks the model nothing."""
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("n1 is drained.")])
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept)
    asked = agent.run("drain n1")
    approve_all(agent, asked.conversation_id, asked)
    [job] = kept.jobs
    assert agent.jobs.run(job, continue_run=True).continues
    again = agent.jobs.run(job, continue_run=True)
    assert (again.outcome, again.continues) == ("refused", False)
    assert runs == ["n1"]
    assert len(model.requests) == 2


def test_in_process_jobs_leave_the_run_to_the_next_message() -> None:
    """docs/runs.md, "Tools on a job engine": InProcessExecutor runs the job inside the turn that
    hands it over, so it does not start a turn of its own; the next message reads the result."""
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("n1 is drained.")])
    agent = Agent(tools=[drain], runtime=model, executor=InProcessExecutor)
    asked = agent.run("drain n1")
    assert approve_all(agent, asked.conversation_id, asked).stop_reason == "running_in_background"
    assert len(model.requests) == 1


def test_a_stopped_run_is_not_continued_by_its_job() -> None:
    """docs/runs.md, "Tools on a job engine": after a human's Stop the job's result is recorded but
    the model is not asked again until someone writes."""
    clock = ManualClock(1_700_000_000.0)
    model = FakeRuntime([tool_calls(tool_call("drain", node="n1")), reply("n1 is drained.")])
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept, clock=clock)
    asked = agent.run("drain n1")
    approve_all(agent, asked.conversation_id, asked)
    clock.advance(1)
    agent.cancel(asked.conversation_id)
    [job] = kept.jobs
    outcome = agent.jobs.run(job, continue_run=True)
    assert outcome.continues  # the record settled the last call...
    assert len(model.requests) == 1  # ...but the Stop holds the run


def test_a_failing_continuation_keeps_the_result_for_the_next_message() -> None:
    """docs/runs.md, "Tools on a job engine": a model that fails in the worker's turn loses
    nothing: the result is stored and the next message goes on from it."""
    model = FakeRuntime(
        [tool_calls(tool_call("drain", node="n1")), fail(ModelError("model down")), reply("n1 is drained.")]
    )
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept)
    asked = agent.run("drain n1")
    approve_all(agent, asked.conversation_id, asked)
    [job] = kept.jobs
    assert agent.jobs.run(job, continue_run=True).outcome == "executed"
    assert agent.decide(asked.conversation_id, []).text == "n1 is drained."


def test_a_job_whose_conversation_moved_to_another_context_runs_nothing() -> None:
    """docs/runs.md, "Tools on a job engine": a call approved in the dev namespace is not run by its
    job once a later turn stored another platform context (prod): it fails, not run, and says why."""
    model = FakeRuntime(
        [tool_calls(tool_call("drain", node="n1")), reply("Listing."), reply("It did not run.")]
    )
    kept = KeptJobs()
    agent = Agent(tools=[drain], runtime=model, executor=kept)
    asked = agent.run("drain n1", platform_context={"k8s_namespace": "dev"})
    agent.decide(
        asked.conversation_id,
        [ToolDecision(c.id, True) for c in asked.pending_tool_calls],
        platform_context={"k8s_namespace": "dev"},
    )
    agent.run("and now?", conversation_id=asked.conversation_id, platform_context={"k8s_namespace": "prod"})
    [job] = kept.jobs
    outcome = agent.jobs.run(job)
    assert outcome.outcome == "failed"
    assert "platform context changed" in outcome.reason
    assert runs == []


def test_a_jobs_session_changes_keep_what_a_turn_changed_while_it_ran() -> None:
    """docs/runs.md, "Tools on a job engine" (what the tool changes in the session is saved): only the
    keys the tool set or deleted are written, over what a turn stored while the job ran."""
    store = InMemoryConversationRepository()

    def a_turn_saves(conversation_id: str) -> None:  # another turn, while the tool runs
        meanwhile = store.get(conversation_id)
        read_at = meanwhile.version
        meanwhile.replace_session({**meanwhile.session, "ticket": "OPS-7"})
        store.save(meanwhile, read_at)

    @tool(background=True)
    def drain_noting(node: str, context: ToolContext) -> str:
        """Evict every pod of a node, and note it."""
        a_turn_saves(context.conversation_id)
        context.session.set("drained", node)
        context.session.delete("cordoned")
        return f"{node} drained"

    kept = KeptJobs()
    model = FakeRuntime([tool_calls(tool_call("drain_noting", node="n1")), reply("Noted.")])
    agent = Agent(tools=[drain_noting], runtime=model, executor=kept, repository=store)
    asked = agent.run("drain n1", session={"cordoned": "n1", "team": "sre"})
    approve_all(agent, asked.conversation_id, asked)
    [job] = kept.jobs

    assert agent.jobs.run(job).outcome == "executed"
    assert store.get(asked.conversation_id).session == {"team": "sre", "ticket": "OPS-7", "drained": "n1"}


def test_a_question_a_jobs_tool_asks_has_the_agents_question_window() -> None:
    """docs/runs.md, "A question's window": a question a background tool's job asks closes after
    `question_ttl`, counted from when the job asked it, as one asked in a turn."""
    clock = ManualClock(1_700_000_000.0)

    @tool(background=True)
    def cordon(node: str, context: ToolContext) -> str:
        """Cordon a node."""
        if not context.ask(f"Cordon {node} now?", kind="confirmation"):
            return "left alone"
        return f"{node} cordoned"

    model = FakeRuntime([tool_calls(tool_call("cordon", node="n1")), reply("Asked.")])
    kept = KeptJobs()
    agent = Agent(
        tools=[cordon], runtime=model, executor=kept, clock=clock, approval_ttl=3600, question_ttl=600
    )
    asked = agent.run("cordon n1")
    approve_all(agent, asked.conversation_id, asked)
    clock.advance(30)  # the job starts a little later

    assert agent.jobs.run(kept.jobs[0]).outcome == "asked"

    [question] = agent.repository.get(asked.conversation_id).questions.values()
    assert question.expires_at == clock.now + 600
    clock.advance(600)
    with pytest.raises(QuestionExpired):
        agent.answer(asked.conversation_id, question.id, True)


# -- a job's progress, kept on its call (docs/runs.md, "Tools on a job engine"; ADR 46) -------------


def stored_call(agent: Agent, conversation_id: str) -> Any:
    [call] = agent.repository.get(conversation_id).tool_calls.values()
    return call


def wait_for(what: Any, deadline: float = 30.0) -> None:
    """Poll the store until `what()` holds (a generous deadline, not a measure of time)."""
    until = time.monotonic() + deadline
    while not what():
        assert time.monotonic() < until, "not seen in the store in time"
        time.sleep(0.01)


class CountedBeats(InMemoryConversationRepository):
    """The in-memory store, counting the cancel reads a job's heartbeat makes (one a beat)."""

    def __init__(self) -> None:
        super().__init__()
        self.beats = 0

    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        self.beats += 1
        return super().cancel_requested(conversation_id, since=since)


def reporting_job(lease_ttl: float) -> tuple[Agent, CountedBeats, str, threading.Thread, threading.Event]:
    """A background snapshot whose tool reported twice and waits for the returned event, its job
    running on a thread under `lease_ttl`."""
    reported, finish = threading.Event(), threading.Event()

    @tool(background=True)
    def snapshot_volume(volume: str, context: ToolContext) -> str:
        """Snapshot a volume."""
        context.progress("listing blocks")
        context.progress("copying blocks", fraction=0.4)
        reported.set()
        assert finish.wait(60)
        return f"{volume} saved"

    model = FakeRuntime([tool_calls(tool_call("snapshot_volume", volume="vol-7")), reply("Saved.")])
    kept, store = KeptJobs(), CountedBeats()
    agent = Agent(
        tools=[snapshot_volume], runtime=model, executor=kept, repository=store, lease_ttl=lease_ttl
    )
    asked = agent.run("snapshot vol-7")
    approve_all(agent, asked.conversation_id, asked)
    worker = threading.Thread(target=lambda: agent.jobs.run(kept.jobs[0]))
    worker.start()
    assert reported.wait(60)
    return agent, store, asked.conversation_id, worker, finish


def test_a_jobs_latest_progress_report_is_saved_on_its_call_with_the_lease_renewal() -> None:
    """docs/runs.md, "Tools on a job engine": the save that renews the lease keeps the tool's latest
    report on its call, so whoever reads the conversation sees it; the settled call keeps none."""
    agent, _, conversation_id, worker, finish = reporting_job(lease_ttl=0.6)
    try:
        wait_for(lambda: stored_call(agent, conversation_id).progress is not None)
        running = stored_call(agent, conversation_id)
        assert (running.progress, running.progress_fraction) == ("copying blocks", 0.4)  # the latest only
    finally:
        finish.set()
        worker.join(60)
    done = stored_call(agent, conversation_id)
    assert (done.status, done.result, done.progress) == (ToolCallStatus.EXECUTED, "vol-7 saved", None)


def test_a_jobs_progress_costs_no_save_of_its_own() -> None:
    """ADR 46: between two renewals of its lease a job saves nothing, whatever its tool reports, so a
    turn that runs on the conversation meanwhile (a message sent while the job runs) keeps its save."""
    agent, store, conversation_id, worker, finish = reporting_job(lease_ttl=600)
    try:
        claimed = agent.repository.get(conversation_id).version
        seen = store.beats
        wait_for(lambda: store.beats >= seen + 3)  # heartbeats after the reports: none saved them
        assert agent.repository.get(conversation_id).version == claimed
        assert stored_call(agent, conversation_id).progress is None
    finally:
        finish.set()
        worker.join(60)


def test_a_job_with_the_async_ports_saves_its_tools_progress_too() -> None:
    """docs/runs.md, "Tools on a job engine": as with the blocking ports."""
    seen: list[tuple[str | None, float | None]] = []
    holder: dict[str, Any] = {}

    @tool(background=True)
    async def snapshot_volume(volume: str, context: ToolContext) -> str:
        """Snapshot a volume."""
        context.progress("copying blocks", fraction=0.5)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # a bounded wait for the store to show it
            call = stored_call(holder["agent"], holder["conversation"])
            if call.progress is not None:
                seen.append((call.progress, call.progress_fraction))
                break
            await asyncio.sleep(0.01)
        return f"{volume} saved"

    model = FakeRuntime([tool_calls(tool_call("snapshot_volume", volume="vol-7")), reply("Saved.")])
    kept = KeptJobs()
    agent = holder["agent"] = Agent(tools=[snapshot_volume], runtime=model, executor=kept, lease_ttl=0.6)
    asked = agent.run("snapshot vol-7")
    holder["conversation"] = asked.conversation_id
    approve_all(agent, asked.conversation_id, asked)

    assert asyncio.run(agent.jobs.arun(kept.jobs[0])).outcome == "executed"
    assert seen == [("copying blocks", 0.5)]
    assert stored_call(agent, asked.conversation_id).progress is None
