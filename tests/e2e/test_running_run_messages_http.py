"""docs/runs.md, "A message into a running run", over a live server: a message sent while a turn runs
is queued, read by the model at the turn's next step and shown in the stream; one sent while calls
wait is queued, approves nothing, and is read once they are decided."""

from __future__ import annotations

import json
import threading
from typing import Any

from _helpdesk import approve, user

from dcaf_like import Agent, tool
from dcaf_like.application.messages import ModelRequest, ModelResponse, ToolResult, UserTurn
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


def user_texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if isinstance(m, UserTurn)]


def test_a_message_into_a_running_run_is_read_at_its_next_step_and_shown_in_the_stream(start_server):
    gate = threading.Event()

    @tool(requires_approval=False)
    def check_web() -> str:
        """Check the web deployment."""
        if not gate.wait(timeout=20):
            raise RuntimeError("the test never opened the gate")
        return "web is healthy"

    def answer(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        assert isinstance(last, UserTurn), "the model is asked after the queued message"
        return reply(f"Web is healthy; about {last.text!r}: api is healthy too.")

    runtime = FakeRuntime([tool_calls(tool_call("check_web"), text="Checking."), answer])
    client = start_server(Agent(tools=[check_web], runtime=runtime))

    lines: list[dict[str, Any]] = []
    queued: dict[str, Any] = {}
    with client.stream("POST", "/api/chat-stream", json={"messages": [user("is web healthy?")]}) as stream:
        for raw in stream.iter_lines():
            if not raw:
                continue
            lines.append(json.loads(raw))
            if lines[-1]["type"] == "tool_started":  # the turn runs: its tool waits on the gate
                conversation_id = lines[0]["conversation_id"]
                sent = client.post(
                    "/api/chat", json={"messages": [user("and api?", conversation_id=conversation_id)]}
                )
                queued = {"status": sent.status_code, **sent.json()}
                gate.set()

    assert queued["status"] == 200
    assert queued["meta"]["stop_reason"] == "queued"
    assert queued["content"] == ""
    assert [line["type"] for line in lines] == [
        "run_started",
        "text_delta",
        "tool_call_proposed",
        "tool_started",
        "tool_finished",
        "executed_tool_calls",
        "user_message",
        "text_delta",
        "done",
    ]
    assert lines[6]["content"] == "and api?"
    assert user_texts(runtime.requests[-1]) == ["is web healthy?", "and api?"]
    assert isinstance(runtime.requests[-1].messages[-2], ToolResult)  # the call's result, then the message
    stored = client.get(f"/api/conversations/{conversation_id}").json()
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == [
        "is web healthy?",
        "and api?",
    ]


def test_a_message_into_a_running_run_while_calls_wait_is_queued_approves_nothing_and_is_read_after(
    start_server, cluster
):
    runtime = FakeRuntime(
        [tool_calls(tool_call("delete_pod", name="web-2"), text="I will delete web-2."), reply("Done, both.")]
    )
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    proposed = client.post("/api/chat", json={"messages": [user("delete web-2")]}).json()
    conversation_id, [pending] = proposed["data"]["conversation_id"], proposed["data"]["tool_calls"]

    queued = client.post(
        "/api/chat", json={"messages": [user("then web-3", conversation_id=conversation_id)]}
    )

    assert queued.status_code == 200
    body = queued.json()
    assert body["meta"]["stop_reason"] == "queued"
    assert [c["id"] for c in body["data"]["tool_calls"]] == [pending["id"]]
    assert cluster.deleted == []  # a message approves nothing
    assert len(runtime.requests) == 1
    stored = client.get(f"/api/conversations/{conversation_id}").json()
    assert [q["content"] for q in stored["queued"]] == ["then web-3"]

    decided = client.post(
        "/api/chat", json={"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}
    )

    assert decided.status_code == 200
    assert decided.json()["content"] == "Done, both."
    assert cluster.deleted == [("default", "web-2")]
    assert user_texts(runtime.requests[-1]) == ["delete web-2", "then web-3"]
    assert client.get(f"/api/conversations/{conversation_id}").json()["queued"] == []
