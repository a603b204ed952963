"""Tools side by side over HTTP (docs/runs.md, "Tools side by side"): the stream a client reads."""

from __future__ import annotations

import asyncio
import json

from fastapi.testclient import TestClient

from dcaf_like import Agent, create_app, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

#: Seconds a tool waits for its sibling: a bound for a hang, never reached side by side.
BOUND = 10


def test_the_stream_says_each_start_then_each_end_in_proposal_order_of_tools_that_met():
    arrived: dict[str, asyncio.Event] = {}

    @tool(requires_approval=False)
    async def pod_logs(pod: str, other: str) -> str:
        """Read a pod's logs; ends once the other pod's read has begun."""
        arrived.setdefault(pod, asyncio.Event()).set()
        await asyncio.wait_for(arrived.setdefault(other, asyncio.Event()).wait(), BOUND)
        return f"logs of {pod}"

    runtime = FakeRuntime(
        [
            tool_calls(
                tool_call("pod_logs", pod="web-1", other="web-2"),
                tool_call("pod_logs", pod="web-2", other="web-1"),
            ),
            reply("Both read."),
        ]
    )
    agent = Agent(tools=[pod_logs], runtime=runtime, parallel_tools=True)

    with TestClient(create_app(agent)) as client:
        answer = client.post("/api/chat-stream", json={"messages": [{"role": "user", "content": "logs"}]})

    events = [json.loads(line) for line in answer.text.splitlines() if line]
    proposed = [e["tool_call"]["id"] for e in events if e["type"] == "tool_call_proposed"]
    tools = [
        (e["type"], e["id"] if e["type"] == "tool_started" else e["tool_call"]["id"])
        for e in events
        if e["type"] in ("tool_started", "tool_finished")
    ]
    first, second = proposed
    assert tools == [
        ("tool_started", first),
        ("tool_started", second),
        ("tool_finished", first),
        ("tool_finished", second),
    ]
    finished = [e["tool_call"] for e in events if e["type"] == "tool_finished"]
    assert [(c["status"], c["output"]) for c in finished] == [
        ("executed", "logs of web-1"),
        ("executed", "logs of web-2"),
    ]
    assert events[-1]["type"] == "done"
    assert [e["seq"] for e in events] == list(range(len(events)))
