"""The life of a run: leases on claimed calls, calls settled as interrupted, and time limits."""

from __future__ import annotations

import asyncio
import logging
import re
import threading

import pytest

from dcaf_like import (
    Agent,
    ConversationNotFound,
    InMemoryConversationRepository,
    InvalidRequest,
    ModelCompleted,
    ModelResponse,
    ModelTimeout,
    ToolContext,
    ToolResult,
    tool,
)
from dcaf_like.application.effects import RunTool, timed_out
from dcaf_like.application.tool_execution import CANCEL_POLL, STOPPED_BY_CANCEL
from dcaf_like.application.transcript import transcript
from dcaf_like.domain import Conversation, ToolCallStatus, ToolInput
from dcaf_like.helpdesk.protocol import assistant_message
from dcaf_like.testing import FakeRuntime, ManualClock, reply, tool_call, tool_calls


def results_seen_by_model(runtime: FakeRuntime) -> list[ToolResult]:
    return [m for m in runtime.requests[-1].messages if isinstance(m, ToolResult)]


# -- leases -----------------------------------------------------------------------------------------


def test_the_claim_saves_who_runs_the_call_and_until_when(cluster):
    store = InMemoryConversationRepository()
    clock = ManualClock()
    seen = []

    @tool
    def drain_node(name: str) -> str:
        """Drain a node."""
        stored = store.get(conversation_id)
        seen.append(stored.tool_call(call_id))
        return "drained"

    runtime = FakeRuntime([tool_calls(tool_call("drain_node", name="n1")), reply("Drained.")])
    agent = Agent(tools=[drain_node], runtime=runtime, repository=store, clock=clock, lease_ttl=30)
    first = agent.run("drain n1")
    conversation_id, call_id = first.conversation_id, first.pending_tool_calls[0].id

    agent.approve(conversation_id, call_id)

    [stored] = seen  # what another worker would read while the tool runs
    assert stored.status is ToolCallStatus.APPROVED
    assert stored.lease_owner == agent._service.worker
    assert stored.lease_expires_at == clock.now + 30


def claimed_and_abandoned(cluster, *script, lease_ttl=30.0):
    """A conversation whose approved delete_pod was claimed by a worker that then died: what the
    claim saved is all the store has."""
    store = InMemoryConversationRepository()
    clock = ManualClock()
    runtime = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-2")), *script])
    agent = Agent(tools=cluster.tools(), runtime=runtime, repository=store, clock=clock, lease_ttl=lease_ttl)
    first = agent.run("delete web-2")
    conversation = store.get(first.conversation_id)
    expected = conversation.version
    call_id = first.pending_tool_calls[0].id
    conversation.approve_tool_call(call_id, by="alice", at=clock.now)
    conversation.lease_tool_call(call_id, "dead-worker", until=clock.now + lease_ttl)
    store.save(conversation, expected)
    return agent, runtime, clock, first.conversation_id, call_id


def test_a_call_whose_lease_ran_out_is_settled_as_interrupted_and_never_run_again(cluster):
    agent, runtime, clock, conversation_id, call_id = claimed_and_abandoned(cluster, reply("I cannot tell."))
    clock.now += 31

    response = agent.run("did it work?", conversation_id=conversation_id)

    assert cluster.deleted == []
    [settled] = response.executed_tool_calls
    assert (settled.id, settled.status) == (call_id, "interrupted")
    assert "may or may not have run" in settled.error
    helpdesk = assistant_message(response)["data"]["executed_tool_calls"][0]
    assert helpdesk["status"] == "interrupted"
    assert "may or may not have run" in helpdesk["error"]
    [result] = results_seen_by_model(runtime)
    assert result.is_error
    assert result.content.startswith("Outcome unknown:")
    stored = agent.conversation(conversation_id).tool_call(call_id)
    assert stored.status is ToolCallStatus.INTERRUPTED
    with pytest.raises(Exception, match="interrupted"):
        agent.approve(conversation_id, call_id)
    assert cluster.deleted == []


def test_an_empty_request_continues_after_an_interrupted_call(cluster):
    agent, _, clock, conversation_id, _ = claimed_and_abandoned(cluster, reply("Checking."))
    clock.now += 31

    response = agent.decide(conversation_id, [])

    assert response.text == "Checking."
    assert [c.status for c in response.executed_tool_calls] == ["interrupted"]


def test_a_call_still_leased_is_left_running_and_the_model_reads_that_it_has_no_result(cluster):
    agent, runtime, clock, conversation_id, call_id = claimed_and_abandoned(cluster, reply("Still going."))
    clock.now += 29  # the worker running it may still be alive

    response = agent.run("status?", conversation_id=conversation_id)

    assert response.text == "Still going."
    assert response.executed_tool_calls == ()
    assert agent.conversation(conversation_id).tool_call(call_id).status is ToolCallStatus.APPROVED
    [result] = results_seen_by_model(runtime)
    assert (result.call_id, result.is_error) == (call_id, True)
    assert result.content.startswith("No result yet")


def test_the_transcript_never_holds_a_call_without_a_result():
    conversation = Conversation.start("conv_1", at=0.0)
    conversation.add_user_message("go", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    running = conversation.request_tool_call("a", ToolInput.of({}), requires_approval=True, at=0.0)
    done = conversation.request_tool_call("b", ToolInput.of({}), requires_approval=True, at=0.0)
    conversation.approve_tool_call(running.id.value, by="u", at=0.0)
    conversation.approve_tool_call(done.id.value, by="u", at=0.0)
    conversation.record_tool_result(done.id.value, "ok", at=0.0)

    results = [m for m in transcript(conversation) if isinstance(m, ToolResult)]

    assert [r.call_id for r in results] == [running.id.value, done.id.value]


def test_a_call_stored_before_leases_existed_is_settled_when_loaded():
    conversation = Conversation.start("conv_1", at=0.0)
    conversation.add_user_message("go", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call("a", ToolInput.of({}), requires_approval=True, at=0.0)
    conversation.approve_tool_call(call.id.value, by="u", at=0.0)

    [settled] = conversation.settle_abandoned_calls(at=1.0)

    assert settled.status is ToolCallStatus.INTERRUPTED
    assert conversation.settle_abandoned_calls(at=2.0) == []


@pytest.mark.parametrize("api", ["run", "arun"])
def test_a_long_tool_renews_its_lease_so_no_other_worker_settles_it(api):
    store = InMemoryConversationRepository()
    leases = []

    @tool(requires_approval=False)
    def rollout_status(context: ToolContext) -> str:
        """Wait for a rollout."""
        for _ in range(200):  # until the stored lease has moved on twice (bounded)
            stored = store.get(context.conversation_id)
            if stored is not None and context.call_id in stored.tool_calls:
                lease = stored.tool_call(context.call_id).lease_expires_at
                if lease not in leases:
                    leases.append(lease)
                if len(leases) == 2:
                    return "rolled out"
            threading.Event().wait(0.02)
        return "never renewed"

    runtime = FakeRuntime([tool_calls(tool_call("rollout_status")), reply("Done.")])
    agent = Agent(tools=[rollout_status], runtime=runtime, repository=store, lease_ttl=0.15)

    if api == "run":
        response = agent.run("wait for the rollout")
    else:  # served: the loop's ticker renews it while the tool runs in a thread
        response = asyncio.run(agent.arun("wait for the rollout"))

    assert response.executed_tool_calls[0].output == "rolled out"
    first, second = leases
    assert second > first
    stored = agent.conversation(response.conversation_id).tool_call(response.executed_tool_calls[0].id)
    assert stored.status is ToolCallStatus.EXECUTED
    assert stored.lease_owner == agent._service.worker


# -- time limits ------------------------------------------------------------------------------------


def test_an_async_tool_past_its_time_limit_is_cancelled_and_the_model_reads_the_limit():
    never = asyncio.Event()
    cancelled = []

    @tool(requires_approval=False, timeout=0.05)
    async def rollout_status() -> str:
        """Wait for a rollout."""
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "rolled out"

    runtime = FakeRuntime([tool_calls(tool_call("rollout_status")), reply("It hangs.")])
    agent = Agent(tools=[rollout_status], runtime=runtime)

    response = asyncio.run(agent.arun("wait for the rollout"))

    assert response.text == "It hangs."
    [call] = response.executed_tool_calls
    assert call.status == "failed"
    assert "timed out after 0.05 s (the tool's time limit of 0.05 s): it was cancelled" in call.error
    assert cancelled == [True]
    [result] = results_seen_by_model(runtime)
    assert result.is_error
    assert "the tool's time limit of 0.05 s" in result.content


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_plain_tool_past_its_time_limit_is_left_running_and_its_late_result_is_not_used(api, caplog):
    release = threading.Event()
    finished = threading.Event()

    @tool(requires_approval=False, timeout=0.05)
    def rollout_status() -> str:
        """Wait for a rollout."""
        release.wait(10)
        finished.set()
        return "rolled out"

    runtime = FakeRuntime([tool_calls(tool_call("rollout_status")), reply("It hangs.")])
    agent = Agent(tools=[rollout_status], runtime=runtime)

    with caplog.at_level(logging.WARNING, logger="dcaf_like"):
        response = (
            agent.run("wait for the rollout")
            if api == "sync"
            else asyncio.run(agent.arun("wait for the rollout"))
        )
        [call] = response.executed_tool_calls
        assert call.status == "failed"
        assert "may still be running; its result will not be used" in call.error
        release.set()
        assert finished.wait(5)
        for _ in range(100):  # the thread logs once it has finished
            if any("its result was not used" in r.getMessage() for r in caplog.records):
                break
            threading.Event().wait(0.02)

    assert any("rollout_status" in r.getMessage() and "not used" in r.getMessage() for r in caplog.records)
    assert agent.conversation(response.conversation_id).tool_call(call.id).error == call.error


@pytest.mark.parametrize("api", ["sync", "async", "stream"])
def test_a_turn_past_its_time_limit_stops_and_the_conversation_stays_usable(api):
    never = threading.Event()

    @tool(requires_approval=False)
    def rollout_status() -> str:
        """Wait for a rollout."""
        never.wait(10)
        return "rolled out"

    runtime = FakeRuntime([tool_calls(tool_call("rollout_status")), reply("Try again later.")])
    agent = Agent(tools=[rollout_status], runtime=runtime, turn_timeout=0.1)

    if api == "sync":
        response = agent.run("wait for the rollout")
    elif api == "async":
        response = asyncio.run(agent.arun("wait for the rollout"))
    else:
        [*_, done] = agent.run_stream("wait for the rollout")
        response = done.response
    never.set()

    assert response.stop_reason == "turn_timeout"
    [call] = response.executed_tool_calls
    assert call.status == "failed"
    assert "the turn's time limit of 0.1 s" in call.error
    # What was left of the turn, rounded as a person reads it ("0.1", "0.087"), never "0.0999612"
    assert re.match(r"timed out after [0-9.]{1,5} s \(the turn's time limit of 0.1 s\)", call.error), (
        call.error
    )
    assert len(runtime.requests) == 1
    follow_up = agent.decide(response.conversation_id, [])
    assert follow_up.text == "Try again later."
    assert "the turn's time limit of 0.1 s" in results_seen_by_model(runtime)[0].content


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_turn_whose_time_limit_passes_during_a_tool_stops_before_the_next_model_call(api):
    """The limit is measured by the agent's clock: a test moves it instead of waiting."""
    clock = ManualClock()

    @tool(requires_approval=False)
    def rollout_status() -> str:
        """Wait for a rollout."""
        clock.advance(61)  # the rollout took a minute
        return "rolled out"

    runtime = FakeRuntime([tool_calls(tool_call("rollout_status")), reply("Rolled out.")])
    agent = Agent(tools=[rollout_status], runtime=runtime, turn_timeout=60, clock=clock)

    response = agent.run("roll out") if api == "sync" else asyncio.run(agent.arun("roll out"))

    assert response.stop_reason == "turn_timeout"
    [call] = response.executed_tool_calls
    assert (call.status, call.output) == ("executed", "rolled out")  # it ended in time: its result is kept
    assert len(runtime.requests) == 1
    assert agent.decide(response.conversation_id, []).text == "Rolled out."


def test_a_turn_with_time_left_on_the_agents_clock_goes_on_however_long_the_machine_takes():
    clock = ManualClock()

    @tool(requires_approval=False)
    def rollout_status() -> str:
        """Wait for a rollout."""
        clock.advance(59)
        return "rolled out"

    runtime = FakeRuntime([tool_calls(tool_call("rollout_status")), reply("Rolled out.")])
    agent = Agent(tools=[rollout_status], runtime=runtime, turn_timeout=60, clock=clock)

    response = agent.run("roll out")

    assert (response.stop_reason, response.text) == ("end_turn", "Rolled out.")


@pytest.mark.parametrize(
    ("left", "said"), [(2.99961, "3"), (12.345, "12.3"), (59.96, "60"), (0.0499, "0.05"), (0.05, "0.05")]
)
def test_a_time_limit_that_ran_out_is_said_in_rounded_seconds(left, said):
    effect = RunTool(
        tool=None, arguments={}, context=None, timeout=left, limit="the turn's time limit of 3 s"
    )  # type: ignore[arg-type]

    outcome = timed_out(effect, cancelled=True)

    assert outcome.error == f"timed out after {said} s (the turn's time limit of 3 s): it was cancelled"


class HangingRuntime(FakeRuntime):
    """Answers from its script, except while `hang` is set: then it waits for `release`."""

    def __init__(self, script):
        super().__init__(script)
        self.hang = True
        self.release = threading.Event()

    def _wait(self):
        if self.hang:
            self.hang = False
            self.release.wait(10)

    def invoke(self, request):
        self._wait()
        return super().invoke(request)

    def stream(self, request):
        self._wait()
        yield from super().stream(request)


async def released_after(awaitable, release):
    """`awaitable`, then `release` set before the loop closes (asyncio.run waits for its threads)."""
    try:
        return await awaitable
    finally:
        release.set()


@pytest.mark.parametrize("api", ["sync", "async", "stream"])
def test_a_model_call_past_its_time_limit_fails_with_model_timeout_and_the_turn_can_be_retried(api):
    runtime = HangingRuntime([reply("ignored"), reply("Here now.")])
    agent = Agent(runtime=runtime, model_timeout=0.05)

    def ask():
        if api == "sync":
            agent.run("hello", conversation_id="conv_hang")
        elif api == "async":
            asyncio.run(released_after(agent.arun("hello", conversation_id="conv_hang"), runtime.release))
        else:
            for event in agent.run_stream("hello", conversation_id="conv_hang"):
                if event.type == "error":
                    raise event.exception

    with pytest.raises(ModelTimeout, match=r"model-call time limit of 0\.05 s"):
        ask()
    runtime.release.set()

    retried = agent.decide("conv_hang", [])
    assert retried.text in ("ignored", "Here now.")


def test_a_model_call_that_outlasts_the_turn_ends_the_turn():
    runtime = HangingRuntime([reply("ignored")])
    agent = Agent(runtime=runtime, turn_timeout=0.05)

    response = agent.run("hello")
    runtime.release.set()

    assert response.stop_reason == "turn_timeout"
    assert response.text == ""


@pytest.mark.parametrize("limit", [0, -1, "1"])
def test_a_time_limit_must_be_a_positive_number(limit):
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        tool(timeout=limit)(lambda: None)
    if limit != "1":
        with pytest.raises(ValueError, match="turn_timeout must be a positive number"):
            Agent(runtime=FakeRuntime(), turn_timeout=limit)


# -- cancel -----------------------------------------------------------------------------------------


def test_a_cancel_stops_the_turn_before_its_next_step_and_the_conversation_goes_on():
    ran = []

    @tool(requires_approval=False)
    def scale(name: str, context: ToolContext) -> str:
        """Scale a deployment."""
        ran.append(name)
        if name == "web":
            agent.cancel(context.conversation_id)  # as another worker, or the user, would
        return f"{name} scaled"

    runtime = FakeRuntime(
        [tool_calls(tool_call("scale", name="web"), tool_call("scale", name="api")), reply("Resumed.")]
    )
    agent = Agent(tools=[scale], runtime=runtime)

    response = agent.run("scale web and api")

    assert response.stop_reason == "cancelled"
    assert ran == ["web"]  # the tool running when the cancel came finished; the next one never started
    web, api = response.executed_tool_calls
    assert (web.status, web.output) == ("executed", "web scaled")
    assert (api.status, api.error) == ("failed", "not run: the run was cancelled before it")
    assert len(runtime.requests) == 1
    follow_up = agent.run("go on", conversation_id=response.conversation_id)
    assert follow_up.text == "Resumed."
    assert follow_up.stop_reason == "end_turn"


def test_a_cancel_asked_before_a_turn_started_does_not_stop_it(cluster):
    runtime = FakeRuntime([reply("Hello."), tool_calls(tool_call("list_pods")), reply("All running.")])
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    agent.run("hello", conversation_id="conv_early")
    agent.cancel("conv_early")

    response = agent.run("which pods run?", conversation_id="conv_early")

    assert (response.stop_reason, response.text) == ("end_turn", "All running.")


def test_a_cancel_of_a_conversation_the_store_does_not_hold_is_refused_and_writes_nothing():
    agent = Agent(runtime=FakeRuntime([]))

    with pytest.raises(ConversationNotFound):
        agent.cancel("conv_nobody")
    with pytest.raises(InvalidRequest, match="conversation_id"):
        agent.cancel("conv with spaces")

    assert not agent.repository.cancel_requested("conv_nobody", since=0)


# -- stopping a running tool (docs/runs.md, "Stopping a running tool") -------------------------------


def stopping_agent(step):
    """An agent whose one tool, `drain_node`, is `step`, on a clock the test moves."""
    drain = tool(requires_approval=False, name="drain_node")(step)
    runtime = FakeRuntime([tool_calls(tool_call("drain_node", node="n1")), reply("never read")])
    return Agent(tools=[drain], runtime=runtime, clock=ManualClock())


async def cancel_once_started(agent, started, conversation_id="conv_drain"):
    """Cancel the run once `started`, then move the agent's clock past the poll that reads cancels."""
    running = asyncio.ensure_future(agent.arun("drain n1", conversation_id=conversation_id))
    await started()
    await agent.acancel(conversation_id)
    agent.clock.advance(CANCEL_POLL)
    response = await running
    return response, (await agent.repository.aget(conversation_id)).tool_calls


def test_a_cancel_stops_an_async_tool_while_it_runs():
    began, finished = asyncio.Event(), []

    async def drain(node: str) -> str:
        began.set()
        await asyncio.Event().wait()  # a rollout watched for ever
        finished.append(node)
        return "drained"

    agent = stopping_agent(drain)
    response, calls = asyncio.run(cancel_once_started(agent, began.wait))

    (call,) = calls.values()
    assert response.stop_reason == "cancelled"
    assert (call.status, call.error) == (ToolCallStatus.FAILED, STOPPED_BY_CANCEL)
    assert finished == []


def test_a_def_tool_sees_the_cancel_at_its_next_check_and_stops_there():
    began, drained = threading.Event(), []

    def drain(node: str, context: ToolContext) -> str:
        began.set()
        for pod in range(10_000):  # pod after pod, looking between them
            context.check_cancelled()
            drained.append(pod)
            context.cancel_signal.wait(0.01)  # a pod's eviction; over at once when a cancel comes
        return "drained every pod"

    agent = stopping_agent(drain)
    response, calls = asyncio.run(cancel_once_started(agent, lambda: asyncio.to_thread(began.wait)))

    (call,) = calls.values()
    assert response.stop_reason == "cancelled"
    assert (call.status, call.error) == (ToolCallStatus.FAILED, STOPPED_BY_CANCEL)
    assert 0 < len(drained) < 10_000


def test_a_def_tool_that_does_not_stop_finishes_and_its_result_is_kept():
    """No one can stop a def tool from outside: one that goes on to its end is recorded as it ended."""
    began = threading.Event()

    def drain(node: str, context: ToolContext) -> str:
        began.set()
        context.cancel_signal.wait(30)  # its work outlasts the cancel (30 s: a bound for a hang)
        return f"drained {node}; told to stop: {context.cancelled}"

    agent = stopping_agent(drain)
    response, calls = asyncio.run(cancel_once_started(agent, lambda: asyncio.to_thread(began.wait)))

    (call,) = calls.values()
    assert response.stop_reason == "cancelled"
    assert call.status is ToolCallStatus.EXECUTED
    assert call.result == "drained n1; told to stop: True"


class WaitingRuntime(FakeRuntime):
    """An async model that answers only once `answer` is set; `asked` is set when it is called."""

    def __init__(self, script):
        super().__init__(script)
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def ainvoke(self, request):
        self.asked.set()
        await self.answer.wait()
        return self.invoke(request)

    async def astream(self, request):
        response = await self.ainvoke(request)
        yield ModelCompleted(response)


def test_a_first_turn_is_readable_and_listed_while_it_waits_for_the_model():
    """docs/runs.md, "Who may cancel": a conversation is saved as its first turn starts."""
    runtime = WaitingRuntime([reply("Two pods run.")])
    agent = Agent(runtime=runtime)

    async def read_while_it_runs():
        running = asyncio.ensure_future(agent.arun("which pods run?", conversation_id="conv_first"))
        await runtime.asked.wait()
        seen = await agent.repository.aget("conv_first")
        listed = agent.repository.list_ids(10)
        runtime.answer.set()
        await running
        return seen, listed

    seen, listed = asyncio.run(read_while_it_runs())

    assert seen is not None
    assert [m.content.text for m in seen.messages] == ["which pods run?"]
    assert "conv_first" in listed


@pytest.mark.parametrize("api", ["arun", "arun_stream"])
def test_a_cancel_stops_a_turn_waiting_for_the_model(api):
    runtime = WaitingRuntime([reply("never read")])
    agent = Agent(runtime=runtime, clock=ManualClock())

    async def run_and_cancel():
        if api == "arun":
            running = asyncio.ensure_future(agent.arun("summarize the incident", conversation_id="conv_c"))
        else:

            async def last_event():
                return [
                    e async for e in agent.arun_stream("summarize the incident", conversation_id="conv_c")
                ][-1]

            running = asyncio.ensure_future(last_event())
        await runtime.asked.wait()
        await agent.acancel("conv_c")
        agent.clock.advance(CANCEL_POLL)  # the poll that reads cancels is due
        return await asyncio.wait_for(running, 10)

    outcome = asyncio.run(run_and_cancel())

    response = outcome if api == "arun" else outcome.response
    assert response.stop_reason == "cancelled"
    assert response.text == ""
    stored = agent.conversation("conv_c")
    assert [m.role.value for m in stored.messages] == ["user"]  # usable: the next turn answers it


class CountingStore(InMemoryConversationRepository):
    """The in-memory store, counting the cancel requests it is asked about."""

    def __init__(self) -> None:
        super().__init__()
        self.asked_for_cancels = 0

    async def acancel_requested(self, conversation_id, *, since):
        self.asked_for_cancels += 1
        return await super().acancel_requested(conversation_id, since=since)


class WaitingByConversation(FakeRuntime):
    """An async model that answers each conversation once the test releases it."""

    def __init__(self) -> None:
        super().__init__([])
        self.asked: dict[str, asyncio.Event] = {}
        self.answer = asyncio.Event()

    async def ainvoke(self, request):
        [first] = [m.text for m in request.messages if hasattr(m, "text")][:1]
        self.asked[first].set()
        await self.answer.wait()
        return ModelResponse(text=f"answered {first}")


def test_turns_waiting_for_the_model_at_once_are_each_stopped_by_their_own_cancel_only():
    runtime = WaitingByConversation()
    agent = Agent(runtime=runtime, clock=ManualClock())

    async def two_turns_one_cancelled():
        runtime.asked = {"first": asyncio.Event(), "second": asyncio.Event()}
        first = asyncio.ensure_future(agent.arun("first", conversation_id="conv_1"))
        second = asyncio.ensure_future(agent.arun("second", conversation_id="conv_2"))
        await runtime.asked["first"].wait()
        await runtime.asked["second"].wait()
        await agent.acancel("conv_1")
        agent.clock.advance(CANCEL_POLL)
        stopped = await asyncio.wait_for(first, 10)
        runtime.answer.set()
        return stopped, await asyncio.wait_for(second, 10)

    stopped, answered = asyncio.run(two_turns_one_cancelled())

    assert stopped.stop_reason == "cancelled"
    assert (answered.stop_reason, answered.text) == ("end_turn", "answered second")


def test_a_model_call_quicker_than_the_poll_reads_no_cancel_request():
    store = CountingStore()
    agent = Agent(runtime=FakeRuntime([reply("At once."), reply("Again.")]), repository=store)

    async def two_turns():
        await agent.arun("which pods run?", conversation_id="conv_q")
        return await agent.arun("and now?", conversation_id="conv_q")

    response = asyncio.run(two_turns())

    assert response.text == "Again."
    assert store.asked_for_cancels == 0


def test_a_closed_event_loop_is_not_kept_alive_by_the_timer_its_turns_shared():
    import gc
    import weakref

    agent = Agent(runtime=FakeRuntime([reply("At once.")]))
    loop = asyncio.new_event_loop()
    loop.run_until_complete(agent.arun("which pods run?"))  # its poll's timer is still pending here
    loop.close()
    closed = weakref.ref(loop)
    del loop
    gc.collect()

    assert closed() is None


# -- progress ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_a_tool_reports_progress_on_the_stream_between_its_start_and_its_end(kind):
    def restart(count: int, context: ToolContext) -> str:
        for done in range(1, count + 1):
            context.progress(f"{done}/{count} pods restarted", fraction=done / count)
        return "restarted"

    async def arestart(count: int, context: ToolContext) -> str:
        return restart(count, context)

    restart_pods = tool(requires_approval=False, name="restart_pods")(restart if kind == "def" else arestart)
    runtime = FakeRuntime([tool_calls(tool_call("restart_pods", count=2)), reply("Done."), reply("Again.")])
    agent = Agent(tools=[restart_pods], runtime=runtime)

    async def stream():
        return [event async for event in agent.arun_stream("restart the pods", conversation_id="conv_p")]

    events = asyncio.run(stream())

    kinds = [e.type for e in events]
    reports = [(e.call_id, e.message, e.fraction) for e in events if e.type == "tool_progress"]
    [finished] = [e for e in events if e.type == "tool_finished"]
    assert reports == [
        (finished.call.id, "1/2 pods restarted", 0.5),
        (finished.call.id, "2/2 pods restarted", 1.0),
    ]
    assert kinds.index("tool_started") < kinds.index("tool_progress") < kinds.index("tool_finished")
    assert finished.call.output == "restarted"


@pytest.mark.parametrize("fraction", [-0.1, 1.5, "half"])
def test_progress_refuses_a_fraction_outside_zero_to_one(fraction):
    from dcaf_like.domain import Session

    context = ToolContext("conv_1", "tc_1", None, Session())  # type: ignore[arg-type]

    with pytest.raises(ValueError, match="fraction must be between 0 and 1"):
        context.progress("halfway", fraction=fraction)
    context.progress("no one listens")  # nobody streams: nothing happens


# -- the stream acknowledges a cancel (docs/runs.md, "Cancel": "The stream says so at once") ---------


def types_of(events):
    return [e.type for e in events]


def test_a_stream_waiting_for_the_model_says_it_saw_the_cancel_then_ends_cancelled():
    runtime = WaitingRuntime([reply("never read")])
    agent = Agent(runtime=runtime, clock=ManualClock())

    async def stream_and_cancel():
        events = []

        async def read():
            async for event in agent.arun_stream("summarize the incident", conversation_id="conv_s"):
                events.append(event)

        reading = asyncio.ensure_future(read())
        await runtime.asked.wait()
        await agent.acancel("conv_s")
        agent.clock.advance(CANCEL_POLL)
        await asyncio.wait_for(reading, 10)
        return events

    events = asyncio.run(stream_and_cancel())

    assert types_of(events) == ["run_started", "cancel_requested", "done"]
    assert events[1].conversation_id == "conv_s"
    assert events[-1].response.stop_reason == "cancelled"


def test_a_stream_says_it_saw_the_cancel_while_a_def_tool_that_does_not_look_still_runs():
    """The acknowledgement does not wait for the tool: this one ends only after the stream said it."""
    acknowledged, began = threading.Event(), threading.Event()

    def drain(node: str) -> str:
        began.set()
        acknowledged.wait(30)  # a bound for a hang: the test sets it on reading the acknowledgement
        return "drained"

    agent = stopping_agent(drain)

    async def stream_and_cancel():
        events = []

        async def read():
            async for event in agent.arun_stream("drain n1", conversation_id="conv_d"):
                events.append(event)
                if event.type == "cancel_requested":
                    acknowledged.set()

        reading = asyncio.ensure_future(read())
        await asyncio.to_thread(began.wait)
        await agent.acancel("conv_d")
        agent.clock.advance(CANCEL_POLL)
        await asyncio.wait_for(reading, 10)
        return events

    events = asyncio.run(stream_and_cancel())

    kinds = types_of(events)
    assert kinds[kinds.index("tool_started") :] == [
        "tool_started",
        "cancel_requested",
        "tool_finished",
        "done",
    ]
    assert events[kinds.index("tool_finished")].call.status == "executed"  # it ended as it ended
    assert events[-1].response.stop_reason == "cancelled"


def test_a_stream_cancelled_while_an_async_tool_runs_says_so_then_settles_the_call():
    began = asyncio.Event()

    async def drain(node: str) -> str:
        began.set()
        await asyncio.Event().wait()
        return "drained"

    agent = stopping_agent(drain)

    async def stream_and_cancel():
        reading = asyncio.ensure_future(collected(agent.arun_stream("drain n1", conversation_id="conv_a")))
        await began.wait()
        await agent.acancel("conv_a")
        agent.clock.advance(CANCEL_POLL)
        return await asyncio.wait_for(reading, 10)

    events = asyncio.run(stream_and_cancel())

    kinds = types_of(events)
    assert kinds[kinds.index("tool_started") :] == [
        "tool_started",
        "cancel_requested",
        "tool_finished",
        "done",
    ]
    assert (events[-2].call.status, events[-2].call.error) == ("failed", STOPPED_BY_CANCEL)


def test_a_blocking_stream_says_it_saw_a_cancel_found_between_steps_once():
    @tool(requires_approval=False)
    def scale(name: str, context: ToolContext) -> str:
        """Scale a deployment."""
        agent.cancel(context.conversation_id)
        return f"{name} scaled"

    runtime = FakeRuntime([tool_calls(tool_call("scale", name="web"), tool_call("scale", name="api"))])
    agent = Agent(tools=[scale], runtime=runtime)

    events = list(agent.run_stream("scale web and api"))

    kinds = types_of(events)
    assert kinds.count("cancel_requested") == 1
    assert kinds[kinds.index("cancel_requested") :] == ["cancel_requested", "tool_finished", "done"]
    assert events[-2].call.error == "not run: the run was cancelled before it"


async def collected(events):
    return [event async for event in events]
