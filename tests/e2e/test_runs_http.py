"""The life of a run over real HTTP: a client that goes away after approving does not stop the work
it approved (docs/runs.md, "A client that goes away"); time limits reach the wire (docs/runs.md,
"Time limits")."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user

from dcaf_like import Agent, ToolContext, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


def slow_restart() -> tuple[Any, threading.Event, threading.Event]:
    """An ``async def`` tool that runs until the test releases it, and notes if it was cancelled."""
    release, cancelled = threading.Event(), threading.Event()

    @tool
    async def restart_deployment(name: str) -> str:
        """Restart a deployment."""
        try:
            while not release.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return f"deployment {name} restarted"

    return restart_deployment, release, cancelled


def stored_call(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    """The call once it has an outcome (polled, bounded)."""
    deadline = time.monotonic() + 15
    while True:
        body = client.get(f"/api/conversations/{conversation_id}").json()
        [call] = body["tool_calls"]
        if call["status"] != "approved" or time.monotonic() > deadline:
            return {**call, "messages": body["messages"]}
        time.sleep(0.05)


@pytest.mark.parametrize("route", ["/api/chat-stream", "/api/chat"])
def test_a_client_that_goes_away_after_approving_does_not_stop_the_approved_work(start_server, route):
    restart_deployment, release, cancelled = slow_restart()
    runtime = FakeRuntime([tool_calls(tool_call("restart_deployment", name="web")), reply("Restarted web.")])
    client = start_server(Agent(tools=[restart_deployment], runtime=runtime))
    proposed = client.post("/api/chat", json={"messages": [user("restart web")]}).json()["data"]
    conversation_id, [pending] = proposed["conversation_id"], proposed["tool_calls"]
    body = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}

    if route == "/api/chat-stream":
        with client.stream("POST", route, json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert json.loads(next(lines))["type"] == "run_started"
            assert json.loads(next(lines))["type"] == "tool_started"
        # leaving the block closed the connection mid-stream
    else:
        with pytest.raises(httpx.ReadTimeout):
            client.post(route, json=body, timeout=httpx.Timeout(10, read=0.5))
    cancelled.wait(1)  # long enough for the server to notice the client left, were the run tied to it
    release.set()

    call = stored_call(client, conversation_id)
    assert not cancelled.is_set()
    assert (call["status"], call["output"]) == ("executed", "deployment web restarted")
    assert call["messages"][-1] == {**call["messages"][-1], "role": "assistant", "content": "Restarted web."}


def test_a_tool_past_its_time_limit_reaches_the_stream_as_a_failed_call_naming_the_limit(start_server):
    never = asyncio.Event()

    @tool(requires_approval=False, timeout=0.05)
    async def rollout_status(name: str) -> str:
        """Wait for a rollout to finish."""
        await never.wait()
        return "done"

    runtime = FakeRuntime([tool_calls(tool_call("rollout_status", name="web")), reply("The rollout hangs.")])
    client = start_server(Agent(tools=[rollout_status], runtime=runtime))

    with client.stream(
        "POST", "/api/chat-stream", json={"messages": [user("is web rolled out?")]}
    ) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]

    [finished] = [e for e in events if e["type"] == "tool_finished"]
    assert finished["tool_call"]["status"] == "failed"
    assert "the tool's time limit of 0.05 s" in finished["tool_call"]["error"]
    assert events[-1]["message"]["content"] == "The rollout hangs."


def test_a_turn_past_its_time_limit_says_so_and_the_conversation_goes_on(start_server):
    never = asyncio.Event()

    @tool(requires_approval=False)
    async def rollout_status(name: str) -> str:
        """Wait for a rollout to finish."""
        await never.wait()
        return "done"

    runtime = FakeRuntime([tool_calls(tool_call("rollout_status", name="web")), reply("Still rolling out.")])
    client = start_server(Agent(tools=[rollout_status], runtime=runtime, turn_timeout=0.2))

    first = client.post("/api/chat", json={"messages": [user("is web rolled out?")]}).json()

    assert first["meta"]["stop_reason"] == "turn_timeout"
    [failed] = first["data"]["executed_tool_calls"]
    assert failed["status"] == "failed"
    assert "the turn's time limit of 0.2 s" in failed["error"]
    conversation_id = first["data"]["conversation_id"]
    second = client.post("/api/chat", json={"messages": [user("and now?", conversation_id=conversation_id)]})
    assert second.status_code == 200
    assert second.json()["content"] == "Still rolling out."


def test_a_server_shutting_down_lets_a_run_whose_client_went_away_finish_and_save():
    from _server import serving

    from dcaf_like import InMemoryConversationRepository, create_app

    restart_deployment, release, cancelled = slow_restart()
    runtime = FakeRuntime([tool_calls(tool_call("restart_deployment", name="web")), reply("Restarted web.")])
    store = InMemoryConversationRepository()
    agent = Agent(tools=[restart_deployment], runtime=runtime, repository=store)
    with serving(create_app(agent)) as client:
        proposed = client.post("/api/chat", json={"messages": [user("restart web")]}).json()["data"]
        conversation_id, [pending] = proposed["conversation_id"], proposed["tool_calls"]
        body = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}
        with client.stream("POST", "/api/chat-stream", json=body) as response:
            lines = response.iter_lines()
            assert [json.loads(next(lines))["type"] for _ in range(2)] == ["run_started", "tool_started"]
        threading.Timer(0.5, release.set).start()  # the tool ends while the server shuts down
    # the block waited for the server's shutdown, which waited for the run

    call = store.get(conversation_id).tool_call(pending["id"])
    assert (call.status.value, call.result) == ("executed", "deployment web restarted")
    assert not cancelled.is_set()


def test_a_tools_progress_is_streamed_as_it_happens(start_server):
    @tool(requires_approval=False)
    def restart_pods(count: int, context: ToolContext) -> str:
        """Restart pods one by one."""
        for done in range(1, count + 1):
            context.progress(f"{done}/{count} pods restarted", fraction=done / count)
        return f"{count} pods restarted"

    runtime = FakeRuntime([tool_calls(tool_call("restart_pods", count=2)), reply("All restarted.")])
    client = start_server(Agent(tools=[restart_pods], runtime=runtime))

    with client.stream("POST", "/api/chat-stream", json={"messages": [user("restart the pods")]}) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]

    [started] = [e for e in events if e["type"] == "tool_started"]
    reports = [e for e in events if e["type"] == "tool_progress"]
    progress = {"type": "tool_progress", "id": started["id"], "name": "restart_pods"}
    reports = [{k: v for k, v in e.items() if k not in ("seq", "ts")} for e in reports]
    assert reports == [
        {**progress, "message": "1/2 pods restarted", "fraction": 0.5},
        {**progress, "message": "2/2 pods restarted", "fraction": 1.0},
    ]
    kinds = [e["type"] for e in events]
    assert kinds.index("tool_started") < kinds.index("tool_progress") < kinds.index("tool_finished")
