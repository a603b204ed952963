"""One vocabulary for a call over HTTP (ADR 20): the /api/chat response, the stream's events and the
conversation read back name a call's arguments and reasons alike, for a call proposed, edited and run,
and for a rejected one; a conversation stored under the old names reads in the new ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _helpdesk import approve, reject, user

from dcaf_like import Agent, InMemoryConversationRepository, ToolCallView
from dcaf_like.stores._codec import decode
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

PROPOSED = {"name": "web-1", "namespace": "default"}
RAN = {"name": "web-2", "namespace": "default"}
OTHER = {"name": "web-3", "namespace": "default"}
WAITING = {
    "input": PROPOSED,
    "proposed_input": PROPOSED,
    "edited": False,
    "approval_reason": "delete_pod requires approval",
}
EDITED = {
    "input": RAN,
    "proposed_input": PROPOSED,
    "edited": True,
    "approval_reason": "delete_pod requires approval",
}
REJECTED = {
    "input": OTHER,
    "proposed_input": OTHER,
    "edited": False,
    "approval_reason": "restart_pod requires approval",
    "rejection_reason": "not now",
}
STORED_BEFORE = Path(__file__).parents[1] / "unit" / "stores" / "stored" / "conversation_v1_main.json"


def named(call: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
    return {name: call.get(name, "<absent>") for name in like}


def ops_agent(cluster) -> Agent:
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("delete_pod", name="web-1"), tool_call("restart_pod", name="web-3")),
            reply("Deleted web-2; left web-3."),
        ]
    )
    return Agent(tools=cluster.tools(), runtime=runtime)


def decided(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    delete, restart = pending
    return [approve(delete, edited_input={"name": "web-2"}), reject(restart, "not now")]


def stream(client: Any, message: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("POST", "/api/chat-stream", json={"messages": [message]}) as response:
        assert response.status_code == 200
        return [json.loads(line) for line in response.iter_lines() if line]


def test_the_chat_response_and_the_conversation_read_back_name_a_call_alike(start_server, cluster):
    client = start_server(ops_agent(cluster))
    first = client.post("/api/chat", json={"messages": [user("delete web-1, restart web-3")]}).json()
    conversation_id = first["data"]["conversation_id"]
    waiting = client.get(f"/api/conversations/{conversation_id}").json()["tool_calls"]

    done = client.post(
        "/api/chat",
        json={
            "messages": [
                user(conversation_id=conversation_id, tool_calls=decided(first["data"]["tool_calls"]))
            ]
        },
    ).json()
    stored = {c["name"]: c for c in client.get(f"/api/conversations/{conversation_id}").json()["tool_calls"]}

    assert named(first["data"]["tool_calls"][0], WAITING) == named(waiting[0], WAITING) == WAITING
    assert (
        named(done["data"]["executed_tool_calls"][0], EDITED) == named(stored["delete_pod"], EDITED) == EDITED
    )
    assert named(done["data"]["rejected_tool_calls"][0], REJECTED) == REJECTED
    assert named(stored["restart_pod"], REJECTED) == REJECTED
    assert cluster.deleted == [("default", "web-2")]
    # The deprecated aliases, still sent; edited_input is never a call's arguments in a response.
    assert (first["data"]["tool_calls"][0]["reason"], done["data"]["rejected_tool_calls"][0]["reason"]) == (
        "delete_pod requires approval",
        "not now",
    )
    assert stored["delete_pod"]["reason"] == "delete_pod requires approval"
    assert "edited_input" not in {*stored["delete_pod"], *done["data"]["executed_tool_calls"][0]}


def test_the_stream_names_a_call_as_the_response_does(start_server, cluster):
    client = start_server(ops_agent(cluster))
    first = stream(client, user("delete web-1, restart web-3"))
    [waiting] = [e for e in first if e["type"] == "tool_calls"]
    proposed = [e["tool_call"] for e in first if e["type"] == "tool_call_proposed"]
    conversation_id = first[-1]["conversation_id"]

    events = stream(client, user(conversation_id=conversation_id, tool_calls=decided(waiting["tool_calls"])))

    assert named(waiting["tool_calls"][0], WAITING) == named(proposed[0], WAITING) == WAITING
    by_type = {e["type"]: e for e in events}
    assert named(by_type["tool_finished"]["tool_call"], EDITED) == EDITED
    assert named(by_type["executed_tool_calls"]["executed_tool_calls"][0], EDITED) == EDITED
    assert named(by_type["tool_rejected"]["tool_call"], REJECTED) == REJECTED
    data = by_type["done"]["message"]["data"]
    assert named(data["executed_tool_calls"][0], EDITED) == EDITED
    assert named(data["rejected_tool_calls"][0], REJECTED) == REJECTED


def test_a_conversation_stored_under_the_old_names_reads_back_in_the_new_ones(start_server):
    # Written before ADR 20: its calls' reasons are stored as policy_reason and decision_note.
    data = json.loads(STORED_BEFORE.read_text(encoding="utf-8"))
    data["id"] = "conv-stored-before"
    assert {"policy_reason", "decision_note"} <= data["tool_calls"][2].keys()
    store = InMemoryConversationRepository()
    store.save(decode(json.dumps(data), "conv-stored-before"), 0)
    client = start_server(Agent(runtime=FakeRuntime([]), repository=store))

    body = client.get("/api/conversations/conv-stored-before").json()

    calls = {c["name"]: c for c in body["tool_calls"]}
    assert (calls["tool_reject"]["rejection_reason"], calls["tool_reject"]["approval_reason"]) == (
        "not now\t(please)",
        "asks first",
    )
    assert calls["tool_wait"]["approval_reason"] == "asks first"
    assert calls["tool_edit"]["edited"] is True
    assert calls["tool_edit"]["input"] == {"name": "web-2"}
    assert calls["tool_edit"]["proposed_input"]["name"] == "web-edit"


def documented_reason() -> dict[str, str]:
    """docs/protocol.md's table of what the deprecated ``reason`` is, list by list: the new name it
    stands for (``approval_reason``, ``rejection_reason``) or ``not sent``."""
    text = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text(encoding="utf-8")
    table = text.split("#### The deprecated `reason`", 1)[1].split("| Where |", 1)[1].split("\n\n", 1)[0]
    rows = [line.strip("| ").split(" | ") for line in table.splitlines()[2:]]
    return {where: meaning.split("`")[1] if "`" in meaning else meaning for where, meaning in rows}


def meaning_of_reason(call: dict[str, Any]) -> str:
    if "reason" not in call:
        return "not sent"
    [name] = [n for n in ("approval_reason", "rejection_reason") if call.get(n) == call["reason"]]
    return name


def test_the_deprecated_reason_means_in_each_list_what_the_protocol_says(start_server, cluster):
    from dcaf_like.helpdesk.protocol import pending_command

    agent = ops_agent(cluster)
    client = start_server(agent)
    first = stream(client, user("delete web-1, restart web-3"))
    [waiting] = [e for e in first if e["type"] == "tool_calls"]
    proposed = next(e["tool_call"] for e in first if e["type"] == "tool_call_proposed")
    conversation_id = first[-1]["conversation_id"]
    waits = ToolCallView.of(agent.conversation(conversation_id).tool_call(waiting["tool_calls"][0]["id"]))
    events = {
        e["type"]: e
        for e in stream(
            client, user(conversation_id=conversation_id, tool_calls=decided(waiting["tool_calls"]))
        )
    }
    data = events["done"]["message"]["data"]
    stored = {c["name"]: c for c in client.get(f"/api/conversations/{conversation_id}").json()["tool_calls"]}

    seen = {
        "`data.tool_calls[]`": meaning_of_reason(waiting["tool_calls"][0]),
        "the stream's `tool_call_proposed`": meaning_of_reason(proposed),
        "`data.cmds[]`": meaning_of_reason(pending_command(waits, ["kubectl", "get", "pods"])),
        "`data.rejected_tool_calls[]`": meaning_of_reason(data["rejected_tool_calls"][0]),
        "the stream's `tool_rejected`": meaning_of_reason(events["tool_rejected"]["tool_call"]),
        "`GET /api/conversations/{id}`'s `tool_calls[]`": meaning_of_reason(stored["restart_pod"]),
        "`data.executed_tool_calls[]`": meaning_of_reason(data["executed_tool_calls"][0]),
        "the stream's `tool_finished`": meaning_of_reason(events["tool_finished"]["tool_call"]),
    }
    assert seen == documented_reason()
