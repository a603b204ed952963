"""Streaming events, the async API, and the sync/async parity of the loop."""

from __future__ import annotations

import asyncio

from dcaf_like import (
    Agent,
    ApprovalRequired,
    Done,
    ModelRateLimited,
    ReasoningDelta,
    RunFailed,
    RunStarted,
    TextDelta,
    ToolCallProposed,
    ToolFinished,
    ToolRejected,
    ToolStarted,
    tool,
)
from dcaf_like.testing import FakeRuntime, Step, fail, reply, tool_call, tool_calls


def event_types(events) -> list[str]:
    return [e.type for e in events]


def test_a_stream_yields_deltas_in_order_then_tool_events_then_suspends_on_approval(cluster):
    runtime = FakeRuntime(
        [
            tool_calls("list_pods"),
            Step(
                text="Deleting web-2 now.",
                chunks=("Deleting ", "web-2 ", "now."),
                calls=(tool_call("delete_pod", name="web-2"),),
                reasoning="web-2 crashes",
            ),
        ]
    )
    agent = Agent(tools=cluster.tools(), runtime=runtime)

    events = list(agent.run_stream("fix the cluster"))

    assert event_types(events) == [
        "run_started",
        "tool_call_proposed",
        "tool_started",
        "tool_finished",
        "reasoning_delta",
        "text_delta",
        "text_delta",
        "text_delta",
        "tool_call_proposed",
        "approval_required",
        "done",
    ]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Deleting web-2 now."
    assert isinstance(events[4], ReasoningDelta)
    assert events[0] == RunStarted(events[-1].response.conversation_id)
    proposed = [e for e in events if isinstance(e, ToolCallProposed)]
    assert [p.call.status for p in proposed] == ["approved", "pending"]
    [approval] = [e for e in events if isinstance(e, ApprovalRequired)]
    assert approval.calls[0].name == "delete_pod"
    done = events[-1]
    assert isinstance(done, Done)
    assert done.response.pending_tool_calls[0].id == approval.calls[0].id
    assert runtime.remaining == 0


def test_resuming_a_stream_after_approval_runs_the_call_then_streams_the_answer(cluster):
    runtime = FakeRuntime(
        [tool_calls(tool_call("delete_pod", name="web-2")), reply("Gone.", chunks=["Go", "ne."])]
    )
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    first = list(agent.run_stream("delete web-2"))[-1].response
    decision = {
        "role": "user",
        "content": "",
        "data": {"tool_calls": [{"id": first.pending_tool_calls[0].id, "execute": True}]},
    }

    events = list(agent.run_stream([decision], conversation_id=first.conversation_id))

    assert event_types(events) == [
        "run_started",
        "tool_started",
        "tool_finished",
        "text_delta",
        "text_delta",
        "done",
    ]
    assert isinstance(events[2], ToolFinished)
    assert events[2].call.output == 'pod "web-2" deleted'
    assert isinstance(events[1], ToolStarted)
    assert events[1].name == "delete_pod"


def test_a_failure_while_streaming_ends_the_stream_with_an_error_event(cluster):
    agent = Agent(tools=cluster.tools(), runtime=FakeRuntime([fail(ModelRateLimited("throttled"))]))

    events = list(agent.run_stream("hi"))

    [started, failed] = events  # the run had begun when the model failed
    assert isinstance(started, RunStarted)
    assert isinstance(failed, RunFailed)
    assert failed.type == "error"
    assert failed.kind == "ModelRateLimited"
    assert "throttled" in failed.error
    assert isinstance(failed.exception, ModelRateLimited)


def test_a_rejected_decision_is_announced_in_the_stream(cluster):
    agent = Agent(
        tools=cluster.tools(),
        runtime=FakeRuntime([tool_calls(tool_call("delete_pod", name="web-1")), reply("Left alone.")]),
    )
    first = agent.run("delete web-1")
    decision = {
        "role": "user",
        "content": "",
        "data": {"tool_calls": [{"id": first.pending_tool_calls[0].id, "rejection_reason": "no"}]},
    }

    events = list(agent.run_stream([decision], conversation_id=first.conversation_id))

    assert isinstance(events[1], ToolRejected)
    assert events[1].call.rejection_reason == "no"


async def test_the_async_api_runs_the_same_approval_flow(cluster):
    runtime = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-1")), reply("Deleted.")])
    agent = Agent(tools=cluster.tools(), runtime=runtime)

    first = await agent.arun("delete web-1")
    second = await agent.adecide(first.conversation_id, [_approve(first.pending_tool_calls[0].id)])

    assert second.text == "Deleted."
    assert cluster.deleted == [("default", "web-1")]


async def test_the_async_stream_yields_the_same_events_as_the_sync_stream(cluster):
    def script():
        return [tool_calls("list_pods"), reply("All fine.", chunks=["All ", "fine."])]

    sync_events = list(Agent(tools=cluster.tools(), runtime=FakeRuntime(script())).run_stream("status?"))
    async_events = [
        e async for e in Agent(tools=cluster.tools(), runtime=FakeRuntime(script())).arun_stream("status?")
    ]

    assert event_types(async_events) == event_types(sync_events)
    assert async_events[-1].response.text == sync_events[-1].response.text == "All fine."


async def test_async_tools_run_in_both_apis():
    calls = []

    @tool(requires_approval=False)
    async def ping(host: str) -> str:
        """Ping a host."""
        await asyncio.sleep(0)
        calls.append(host)
        return f"{host} is up"

    def script():
        return [tool_calls(tool_call("ping", host="db")), reply("ok")]

    sync_response = await asyncio.to_thread(Agent(tools=[ping], runtime=FakeRuntime(script())).run, "ping db")
    async_response = await Agent(tools=[ping], runtime=FakeRuntime(script())).arun("ping db")

    assert sync_response.executed_tool_calls[0].output == "db is up"
    assert async_response.executed_tool_calls[0].output == "db is up"
    assert calls == ["db", "db"]


def test_a_sync_run_works_inside_a_running_event_loop():
    @tool(requires_approval=False)
    async def ping(host: str) -> str:
        return f"{host} is up"

    agent = Agent(tools=[ping], runtime=FakeRuntime([tool_calls(tool_call("ping", host="db")), reply("ok")]))

    async def main():
        return agent.run("ping db")

    assert asyncio.run(main()).executed_tool_calls[0].output == "db is up"


def _approve(call_id):
    from dcaf_like import ToolDecision

    return ToolDecision.approved(call_id)


class Recording(FakeRuntime):
    """Notes which of the runtime's four ways of answering each model call took."""

    def __init__(self, script):
        super().__init__(script)
        self.asked: list[str] = []

    def invoke(self, request):
        self.asked.append("invoke")
        return super().invoke(request)

    def stream(self, request):
        self.asked.append("stream")
        return super().stream(request)

    async def ainvoke(self, request):
        self.asked.append("ainvoke")
        return super().invoke(request)

    async def astream(self, request):
        self.asked.append("astream")
        for event in super().stream(request):
            yield event


def test_only_a_streamed_run_asks_the_model_to_stream_in_either_colour(cluster):
    def run(how):
        runtime = Recording([tool_calls("list_pods"), reply("All fine.")])
        agent = Agent(tools=cluster.tools(), runtime=runtime)
        how(agent)
        return runtime.asked

    async def astream(agent):
        return [e async for e in agent.arun_stream("status?")]

    assert run(lambda a: a.run("status?")) == ["invoke", "invoke"]
    assert run(lambda a: list(a.run_stream("status?"))) == ["stream", "stream"]
    assert run(lambda a: asyncio.run(a.arun("status?"))) == ["ainvoke", "ainvoke"]
    assert run(lambda a: asyncio.run(astream(a))) == ["astream", "astream"]
