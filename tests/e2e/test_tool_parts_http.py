"""Images and files a tool returns, over HTTP: the responses list them with the call by what they are
(kind, media type, size, name), never their bytes; the call's ``output`` stays its text."""

from __future__ import annotations

import json

from _helpdesk import approve, user
from _parts import PANEL_B64, PANEL_SHOWN, render_panel

from dcaf_like import Agent, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


@tool
def restart(pod: str) -> str:
    """Restart a pod."""
    return f"restarted {pod}"


def test_the_response_and_the_stored_conversation_list_a_tools_image_without_its_bytes(start_server):
    model = FakeRuntime(
        [tool_calls(tool_call("render_panel", panel="latency")), reply("p99 is up.")], accepts={"image"}
    )
    client = start_server(Agent(tools=[render_panel], runtime=model))

    answer = client.post("/api/chat", json={"messages": [user("is latency up?")]})

    assert answer.status_code == 200, answer.text
    [ran] = answer.json()["data"]["executed_tool_calls"]
    assert (ran["output"], ran["attachments"]) == ("panel latency", [PANEL_SHOWN])
    assert PANEL_B64 not in answer.text
    conversation = client.get(f"/api/conversations/{answer.json()['data']['conversation_id']}")
    [stored] = conversation.json()["tool_calls"]
    assert (stored["output"], stored["attachments"]) == ("panel latency", [PANEL_SHOWN])
    assert PANEL_B64 not in conversation.text
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("ExecutedToolCallOut", "ToolCallRecord"):  # the OpenAPI says so too
        assert schemas[name]["properties"]["attachments"]["items"] == {
            "$ref": "#/components/schemas/AttachmentOut"
        }


def test_a_streamed_turn_lists_the_image_with_the_finished_call(start_server):
    model = FakeRuntime(
        [tool_calls(tool_call("render_panel", panel="cpu")), reply("Flat.")], accepts={"image"}
    )
    client = start_server(Agent(tools=[render_panel], runtime=model))

    streamed = client.post("/api/chat-stream", json={"messages": [user("cpu?")]})

    lines = [json.loads(line) for line in streamed.text.splitlines() if line]
    [finished] = [line["tool_call"] for line in lines if line["type"] == "tool_finished"]
    assert finished["attachments"] == [PANEL_SHOWN]
    assert PANEL_B64 not in streamed.text


def test_a_call_that_returned_no_image_lists_none(start_server):
    model = FakeRuntime([tool_calls(tool_call("restart", pod="web-1")), reply("Restarted.")])
    client = start_server(Agent(tools=[restart], runtime=model))
    proposed = client.post("/api/chat", json={"messages": [user("restart web-1")]}).json()
    [pending] = proposed["data"]["tool_calls"]

    answer = client.post(
        "/api/chat",
        json={
            "messages": [
                user(tool_calls=[approve(pending)], conversation_id=proposed["data"]["conversation_id"])
            ]
        },
    )

    [ran] = answer.json()["data"]["executed_tool_calls"]
    assert ran["output"] == "restarted web-1"
    assert "attachments" not in ran
    conversation = client.get(f"/api/conversations/{proposed['data']['conversation_id']}").json()
    assert conversation["tool_calls"][0]["attachments"] == []
