"""docs/protocol.md, "A call's outcome", on a live server: the response's executed calls, the stream's
``tool_finished`` and the stored conversation say how each call ended and how long it ran."""

from __future__ import annotations

import json

from _helpdesk import user

from dcaf_like import Agent, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


@tool(requires_approval=False)
def check(name: str) -> str:
    """Check a deployment."""
    if name == "broken":
        raise RuntimeError("the API answered 500")
    return f"{name} is healthy"


def agent() -> Agent:
    proposals = tool_calls(
        tool_call("check", name="web"), tool_call("check", name="broken"), tool_call("nope")
    )
    runtime = FakeRuntime([proposals, reply("Done."), proposals, reply("Done.")])
    return Agent(tools=[check], runtime=runtime)


def test_a_calls_outcome_is_on_the_response_the_stream_and_the_stored_conversation(start_server):
    client = start_server(agent())

    data = client.post("/api/chat", json={"messages": [user("check")]}).json()["data"]
    with client.stream("POST", "/api/chat-stream", json={"messages": [user("again")]}) as response:
        lines = [json.loads(line) for line in response.iter_lines() if line]
    stored = client.get(f"/api/conversations/{data['conversation_id']}").json()

    def outcomes(calls: list[dict]) -> dict[str, str]:
        return {c["input"].get("name", c["name"]): c["outcome"] for c in calls}

    expected = {"web": "success", "broken": "error", "nope": "not_found"}
    executed = {c["input"].get("name", c["name"]): c for c in data["executed_tool_calls"]}
    assert outcomes(data["executed_tool_calls"]) == expected
    assert isinstance(executed["web"]["execution_time"], float)
    assert isinstance(executed["broken"]["execution_time"], float)
    assert executed["nope"]["execution_time"] is None  # it never ran
    assert outcomes([line["tool_call"] for line in lines if line["type"] == "tool_finished"]) == expected
    assert outcomes(stored["tool_calls"]) == expected
    [web] = [c for c in stored["tool_calls"] if c["input"].get("name") == "web"]
    assert web["execution_time"] == executed["web"]["execution_time"]
