"""Tools side by side (docs/runs.md, "Tools side by side"): the calls of one answer that need no
approval run together with ``Agent(parallel_tools=True)``; their results reach the model in the order
it proposed them, a failure stops none of the others, a cancel or a shutdown stops them all.

No test here waits for a duration: tools meet on events, each wait bounded so a broken run fails
rather than hangs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from dcaf_like import (
    Agent,
    Hook,
    HookContext,
    HookFailed,
    InMemoryConversationRepository,
    Session,
    ToolCallInfo,
    ToolContext,
    ToolResult,
    Veto,
    tool,
)
from dcaf_like.application.tool_execution import CANCEL_POLL, STOPPED_BY_CANCEL
from dcaf_like.domain import ToolCallStatus
from dcaf_like.domain.conversation import STOPPED_WHILE_RUNNING
from dcaf_like.testing import FakeRuntime, ManualClock, reply, tool_call, tool_calls

#: Seconds a tool waits for its sibling before it gives up: a bound for a hang, never reached when the
#: tools run side by side.
BOUND = 10


def results_seen_by_model(runtime: FakeRuntime) -> list[ToolResult]:
    last = runtime.requests[-1]
    return [m for m in last.messages if isinstance(m, ToolResult)]


def meeting_tools() -> list:
    """Two async tools, each of which finishes only once the other has started: one after the
    other, the first would wait for ever (BOUND, then it says it was alone)."""
    ping_started, pong_started = asyncio.Event(), asyncio.Event()

    async def meet(mine: asyncio.Event, theirs: asyncio.Event, name: str) -> str:
        mine.set()
        try:
            await asyncio.wait_for(theirs.wait(), BOUND)
        except TimeoutError:
            return f"{name} alone"
        return f"{name} met"

    @tool(requires_approval=False)
    async def ping() -> str:
        """Ping."""
        return await meet(ping_started, pong_started, "ping")

    @tool(requires_approval=False)
    async def pong() -> str:
        """Pong."""
        return await meet(pong_started, ping_started, "pong")

    return [ping, pong]


def test_two_tools_that_wait_for_each_other_finish_side_by_side():
    runtime = FakeRuntime([tool_calls(tool_call("ping"), tool_call("pong")), reply("Both answered.")])
    agent = Agent(tools=meeting_tools(), runtime=runtime, parallel_tools=True)

    response = asyncio.run(agent.arun("ping and pong"))

    assert response.text == "Both answered."
    assert [(c.name, c.status, c.output) for c in response.executed_tool_calls] == [
        ("ping", "executed", "ping met"),
        ("pong", "executed", "pong met"),
    ]


def test_plain_def_tools_run_side_by_side_on_threads_with_the_blocking_api_too():
    first, second = threading.Event(), threading.Event()

    def meet(mine: threading.Event, theirs: threading.Event) -> str:
        mine.set()
        return "met" if theirs.wait(BOUND) else "alone"

    @tool(requires_approval=False)
    def drain(node: str) -> str:
        """Drain a node."""
        return meet(first, second) if node == "n1" else meet(second, first)

    runtime = FakeRuntime(
        [tool_calls(tool_call("drain", node="n1"), tool_call("drain", node="n2")), reply("ok")]
    )
    agent = Agent(tools=[drain], runtime=runtime, parallel_tools=True)

    response = agent.run("drain both")

    assert [c.output for c in response.executed_tool_calls] == ["met", "met"]


def test_without_parallel_tools_the_calls_run_one_after_the_other():
    """The default: each call ends before the next starts, as before the option existed."""
    seen: list[str] = []

    @tool(requires_approval=False)
    async def step(name: str) -> str:
        """A step."""
        seen.append(f"{name} started")
        await asyncio.sleep(0)  # hands the loop over: a sibling running meanwhile would start here
        seen.append(f"{name} ended")
        return name

    runtime = FakeRuntime([tool_calls(tool_call("step", name="a"), tool_call("step", name="b")), reply("ok")])
    agent = Agent(tools=[step], runtime=runtime)

    asyncio.run(agent.arun("go"))

    assert seen == ["a started", "a ended", "b started", "b ended"]


def test_results_reach_the_model_in_the_order_it_proposed_the_calls_whatever_order_they_end_in():
    slow_may_end = asyncio.Event()
    ended: list[str] = []

    @tool(requires_approval=False)
    async def slow() -> str:
        """Ends last."""
        await asyncio.wait_for(slow_may_end.wait(), BOUND)
        ended.append("slow")
        return "slow result"

    @tool(requires_approval=False)
    async def quick() -> str:
        """Ends first."""
        ended.append("quick")
        slow_may_end.set()
        return "quick result"

    runtime = FakeRuntime([tool_calls(tool_call("slow"), tool_call("quick")), reply("ok")])
    agent = Agent(tools=[slow, quick], runtime=runtime, parallel_tools=True)

    response = asyncio.run(agent.arun("go"))

    assert ended == ["quick", "slow"]
    assert [(r.tool_name, r.content) for r in results_seen_by_model(runtime)] == [
        ("slow", "slow result"),
        ("quick", "quick result"),
    ]
    assert [c.name for c in response.executed_tool_calls] == ["slow", "quick"]


def test_a_failing_tool_stops_none_of_its_siblings_and_each_outcome_is_its_own():
    failed = asyncio.Event()

    @tool(requires_approval=False)
    async def broken() -> str:
        """Fails."""
        failed.set()
        raise RuntimeError("the API is down")

    @tool(requires_approval=False)
    async def healthy() -> str:
        """Goes on once its sibling failed."""
        await asyncio.wait_for(failed.wait(), BOUND)
        return "all good"

    runtime = FakeRuntime([tool_calls(tool_call("broken"), tool_call("healthy")), reply("ok")])
    agent = Agent(tools=[broken, healthy], runtime=runtime, parallel_tools=True)

    response = asyncio.run(agent.arun("go"))

    broken_call, healthy_call = response.executed_tool_calls
    assert (broken_call.status, broken_call.error) == ("failed", "RuntimeError: the API is down")
    assert (healthy_call.status, healthy_call.output) == ("executed", "all good")
    assert response.text == "ok"


def test_a_cancel_stops_every_tool_running_side_by_side():
    """docs/runs.md, "Tools side by side": a Stop reaches each sibling, as it reaches a tool alone."""
    started = {"watch": asyncio.Event(), "wait": asyncio.Event()}
    looked = threading.Event()

    @tool(requires_approval=False)
    async def watch(name: str) -> str:
        """Watch a rollout for ever."""
        started[name].set()
        await asyncio.Event().wait()
        return "never"

    @tool(requires_approval=False)
    def drain(context: ToolContext) -> str:
        """A def tool that looks for a cancel between its steps."""
        looked.set()
        context.cancel_signal.wait(BOUND)
        context.check_cancelled()
        return "drained without being told"

    runtime = FakeRuntime(
        [
            tool_calls(tool_call("watch", name="watch"), tool_call("watch", name="wait"), tool_call("drain")),
            reply("x"),
        ]
    )
    agent = Agent(tools=[watch, drain], runtime=runtime, clock=ManualClock(), parallel_tools=True)

    async def main():
        running = asyncio.ensure_future(agent.arun("watch", conversation_id="conv_p"))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), BOUND)
        await asyncio.wait_for(asyncio.to_thread(looked.wait, BOUND), BOUND)
        await agent.acancel("conv_p")
        agent.clock.advance(CANCEL_POLL)
        return await asyncio.wait_for(running, BOUND)

    response = asyncio.run(main())

    assert response.stop_reason == "cancelled"
    calls = agent.conversation("conv_p").tool_calls.values()
    assert [(c.name, c.status, c.error) for c in calls] == [
        ("watch", ToolCallStatus.FAILED, STOPPED_BY_CANCEL),
        ("watch", ToolCallStatus.FAILED, STOPPED_BY_CANCEL),
        ("drain", ToolCallStatus.FAILED, STOPPED_BY_CANCEL),
    ]


def test_a_call_waiting_for_a_slot_when_the_run_is_cancelled_never_starts():
    started = [asyncio.Event(), asyncio.Event()]
    ran: list[int] = []

    @tool(requires_approval=False)
    async def watch(index: int) -> str:
        """Watch a rollout for ever."""
        ran.append(index)
        started[index].set()
        await asyncio.Event().wait()
        return "never"

    calls = [tool_call("watch", index=i) for i in range(3)]
    runtime = FakeRuntime([tool_calls(*calls), reply("x")])
    agent = Agent(
        tools=[watch], runtime=runtime, clock=ManualClock(), parallel_tools=True, max_parallel_tools=2
    )

    async def main():
        running = asyncio.ensure_future(agent.arun("watch", conversation_id="conv_w"))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), BOUND)
        await agent.acancel("conv_w")
        agent.clock.advance(CANCEL_POLL)
        return await asyncio.wait_for(running, BOUND)

    response = asyncio.run(main())

    assert response.stop_reason == "cancelled"
    assert sorted(ran) == [0, 1]
    calls = agent.conversation("conv_w").tool_calls.values()
    assert [c.error for c in calls] == [
        STOPPED_BY_CANCEL,
        STOPPED_BY_CANCEL,
        "not run: the run was cancelled before it",
    ]


def test_a_shutdown_settles_every_tool_running_side_by_side():
    """The turn's task stopped (a server past its grace period): each running call is settled as
    interrupted in the turn's last save, none left approved under its lease."""
    started = [asyncio.Event(), asyncio.Event()]

    @tool(requires_approval=False)
    async def snapshot(index: int) -> str:
        """Snapshot a volume."""
        started[index].set()
        await asyncio.Event().wait()
        return "never"

    runtime = FakeRuntime(
        [tool_calls(tool_call("snapshot", index=0), tool_call("snapshot", index=1)), reply("x")]
    )
    store = InMemoryConversationRepository()
    agent = Agent(tools=[snapshot], runtime=runtime, repository=store, parallel_tools=True)

    async def main() -> None:
        turn = asyncio.ensure_future(agent.arun("go", conversation_id="conv_s"))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), BOUND)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn

    asyncio.run(main())

    calls = store.get("conv_s").tool_calls.values()
    assert [(c.status, c.error) for c in calls] == [(ToolCallStatus.INTERRUPTED, STOPPED_WHILE_RUNNING)] * 2


class SlowSavingStore(InMemoryConversationRepository):
    """A store whose async save lets the loop run other tasks before it writes, as a network store's
    does: two saves at once would both expect the same version."""

    async def asave(self, conversation, expected_version):
        await asyncio.sleep(0)
        await super().asave(conversation, expected_version)


def test_siblings_renew_their_leases_one_save_at_a_time(caplog):
    """docs/runs.md, "Tools side by side": each running call keeps its lease; their renewals, which
    come due together, are saved one after the other, so none is refused as a concurrent update."""
    store, clock = SlowSavingStore(), ManualClock()
    started, renewed = [asyncio.Event(), asyncio.Event()], asyncio.Event()

    @tool(requires_approval=False)
    async def rollout(index: int) -> str:
        """Wait for a rollout."""
        started[index].set()
        await asyncio.wait_for(renewed.wait(), BOUND)
        return "rolled out"

    runtime = FakeRuntime(
        [tool_calls(tool_call("rollout", index=0), tool_call("rollout", index=1)), reply("ok")]
    )
    agent = Agent(
        tools=[rollout], runtime=runtime, repository=store, clock=clock, lease_ttl=30, parallel_tools=True
    )

    async def main():
        running = asyncio.ensure_future(agent.arun("roll out", conversation_id="conv_l"))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), BOUND)
        leased_until = clock() + 30
        clock.advance(10.5)  # past a third of the lease: both renewals come due at the next tick
        for _ in range(int(BOUND / 0.02)):  # until the store holds both renewals (bounded)
            leases = [c.lease_expires_at or 0 for c in store.get("conv_l").tool_calls.values()]
            if len(leases) == 2 and min(leases) > leased_until:
                break
            await asyncio.sleep(0.02)
        renewed.set()
        return await asyncio.wait_for(running, BOUND), leases, leased_until

    response, leases, leased_until = asyncio.run(main())

    assert [c.output for c in response.executed_tool_calls] == ["rolled out", "rolled out"]
    assert not [r for r in caplog.records if "could not renew" in r.getMessage()]
    assert len(leases) == 2
    assert min(leases) > leased_until


def test_the_stream_says_the_starts_then_progress_as_it_comes_then_the_ends_in_proposal_order():
    """docs/runs.md, "Tools side by side": the ordering the stream guarantees."""
    reported = asyncio.Event()

    @tool(requires_approval=False)
    async def first(context: ToolContext) -> str:
        """Reports once its sibling reported."""
        await asyncio.wait_for(reported.wait(), BOUND)
        context.progress("first halfway")
        return "first done"

    @tool(requires_approval=False)
    async def second(context: ToolContext) -> str:
        """Reports at once."""
        context.progress("second halfway")
        reported.set()
        return "second done"

    runtime = FakeRuntime([tool_calls(tool_call("first"), tool_call("second")), reply("ok")])
    agent = Agent(tools=[first, second], runtime=runtime, parallel_tools=True)

    async def main():
        return [e async for e in agent.arun_stream("go")]

    events = [e for e in asyncio.run(main()) if e.type.startswith("tool_") and e.type != "tool_call_proposed"]

    def said(event) -> tuple[str, str]:
        if event.type == "tool_progress":
            return (event.type, event.message)
        if event.type == "tool_started":
            return (event.type, event.name)
        return (event.type, event.call.name)

    assert [said(e) for e in events] == [
        ("tool_started", "first"),
        ("tool_started", "second"),
        ("tool_progress", "second halfway"),
        ("tool_progress", "first halfway"),
        ("tool_finished", "first"),
        ("tool_finished", "second"),
    ]


def test_at_most_max_parallel_tools_run_at_a_time():
    running, peak = [0], [0]
    both = asyncio.Event()

    @tool(requires_approval=False)
    async def probe(index: int) -> str:
        """Counts the probes running with it."""
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        if running[0] == 2:
            both.set()
        await asyncio.wait_for(both.wait(), BOUND)  # the first two meet; the third finds it set
        for _ in range(3):
            await asyncio.sleep(0)  # a probe still running here would be counted by the next
        running[0] -= 1
        return "ok"

    calls = [tool_call("probe", index=i) for i in range(3)]
    runtime = FakeRuntime([tool_calls(*calls), reply("ok")])
    agent = Agent(tools=[probe], runtime=runtime, parallel_tools=True, max_parallel_tools=2)

    response = asyncio.run(agent.arun("probe"))

    assert [c.output for c in response.executed_tool_calls] == ["ok", "ok", "ok"]
    assert peak[0] == 2


def test_a_call_that_needs_approval_still_waits_while_its_siblings_run():
    @tool(requires_approval=False)
    def read_logs(pod: str) -> str:
        """Read a pod's logs."""
        return f"logs of {pod}"

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return f"{name} deleted"

    runtime = FakeRuntime(
        [
            tool_calls(
                tool_call("read_logs", pod="a"),
                tool_call("delete_pod", name="b"),
                tool_call("read_logs", pod="c"),
            ),
            reply("Deleted."),
        ]
    )
    agent = Agent(tools=[read_logs, delete_pod], runtime=runtime, parallel_tools=True)

    response = agent.run("clean up")

    assert response.stop_reason == "awaiting_approval"
    assert [c.output for c in response.executed_tool_calls] == ["logs of a", "logs of c"]
    [pending] = response.pending_tool_calls
    assert pending.name == "delete_pod"
    response = agent.approve(response.conversation_id, pending.id)
    assert response.text == "Deleted."
    assert response.executed_tool_calls[0].output == "b deleted"


def test_each_tools_session_changes_are_kept_side_by_side():
    arrived = threading.Barrier(2, timeout=BOUND)

    @tool(requires_approval=False)
    def remember(key: str, session: Session) -> str:
        """Remember a key."""
        arrived.wait()  # both run before either changes the session
        session.set(key, True)
        return key

    runtime = FakeRuntime(
        [tool_calls(tool_call("remember", key="a"), tool_call("remember", key="b")), reply("ok")]
    )
    agent = Agent(tools=[remember], runtime=runtime, parallel_tools=True)

    response = agent.run("remember", session={"kept": 1})

    assert response.session == {"kept": 1, "a": True, "b": True}


class Freeze(Hook):
    """Refuses the calls of `refused`; raises before those of `broken`."""

    name = "freeze"

    def __init__(self, refused: str = "", broken: str = "") -> None:
        self.refused, self.broken = refused, broken

    async def before_tool(self, context: HookContext, call: ToolCallInfo) -> Veto | None:
        if call.arguments.get("name") == self.broken:
            raise RuntimeError("the hook broke")
        return Veto("change freeze") if call.arguments.get("name") == self.refused else None


def scaling_agent(hook: Hook, ran: list[str]) -> Agent:
    @tool(requires_approval=False)
    def scale(name: str) -> str:
        """Scale a deployment."""
        ran.append(name)
        return f"{name} scaled"

    calls = [tool_call("scale", name=n) for n in ("web", "api", "db")]
    runtime = FakeRuntime([tool_calls(*calls), reply("ok")])
    return Agent(tools=[scale], runtime=runtime, hooks=[hook], parallel_tools=True)


def test_a_call_a_hook_refuses_is_settled_before_the_batch_and_its_siblings_still_run():
    """docs/runs.md, "Tools side by side": checked first, one by one; the stream says the refused
    call's end, then each start of the batch, then each end."""
    ran: list[str] = []
    agent = scaling_agent(Freeze(refused="api"), ran)

    events = list(agent.run_stream("scale"))

    assert sorted(ran) == ["db", "web"]
    response = events[-1].response
    deployment = {c.id: c.input["name"] for c in response.executed_tool_calls}
    said = [
        (e.type, deployment[e.call_id if e.type == "tool_started" else e.call.id])
        for e in events
        if e.type in ("tool_started", "tool_finished")
    ]
    assert said == [
        ("tool_finished", "api"),
        ("tool_started", "web"),
        ("tool_started", "db"),
        ("tool_finished", "web"),
        ("tool_finished", "db"),
    ]
    assert [(c.input["name"], c.status) for c in response.executed_tool_calls] == [
        ("api", "failed"),
        ("web", "executed"),
        ("db", "executed"),
    ]


def test_a_hook_that_fails_while_the_batch_is_checked_runs_none_of_it():
    """Fail closed: a hook that raised before a call stops the whole batch, not only what follows."""
    ran: list[str] = []
    agent = scaling_agent(Freeze(broken="api"), ran)

    with pytest.raises(HookFailed):
        agent.run("scale", conversation_id="conv_h")

    assert ran == []
    calls = agent.conversation("conv_h").tool_calls.values()
    assert [c.status for c in calls] == [ToolCallStatus.FAILED] * 3
    assert all(c.error.startswith("not run: ") for c in calls)


def test_max_parallel_tools_must_be_at_least_one():
    with pytest.raises(ValueError, match="max_parallel_tools"):
        Agent(runtime=FakeRuntime([]), parallel_tools=True, max_parallel_tools=0)
