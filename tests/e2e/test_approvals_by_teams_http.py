"""Approvals by teams over HTTP, with API keys: a delete_pod in prod needs two approvers from ``sre``.
It runs once after alice and bob approve; not after alice approves twice, not when the requester (an
SRE herself) approves, not when a ``dev`` member approves; an edit after the first approval needs both
again; every counted approval and every refusal is in ``GET /api/audit``. Who approved comes only from
the key: nothing in the body names an approver. The approval that completes the count runs the call
and stops there (``awaiting_requester``): the model goes on at the requester's next message."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from _helpdesk import approve, reject, user

from dcaf_like import (
    Agent,
    ApprovalPolicy,
    InMemoryConversationRepository,
    approvers,
    argument_in,
    require_approval,
    tool,
)
from dcaf_like.application.messages import ModelRequest, ModelResponse, UserTurn
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

CAROL = "carol-key-0123456789abcdef0"  # the requester, an SRE
ALICE = "alice-key-0123456789abcdef0"
BOB = "bob-key-0123456789abcdef0000"
DAVE = "dave-key-0123456789abcdef000"  # a developer
ERIN = "erin-key-0123456789abcdef000"  # an SRE by her key's scope
OPS = "ops-key-0123456789abcdef0000"
KEYS = {
    CAROL: "carol:chat+approve+read",
    ALICE: "alice:chat+approve+read",
    BOB: "bob:approve",
    DAVE: "dave:approve",
    ERIN: "erin:approve+approve:sre",
    OPS: "ops:admin",
}
GROUPS = {"sre": {"carol", "alice", "bob"}, "dev": {"dave"}}


def key(value: str) -> dict[str, str]:
    return {"X-API-Key": value}


def deleting(request: ModelRequest) -> ModelResponse:
    if isinstance(request.messages[-1], UserTurn):
        return tool_calls(tool_call("delete_pod", name="web-2", namespace="prod"), text="deleting web-2")
    return reply("Done.")


class Cluster:
    def __init__(self) -> None:
        self.deleted: list[str] = []

        @tool(editable=True)
        def delete_pod(name: str, namespace: str = "default") -> str:
            """Delete a pod."""
            self.deleted.append(f"{namespace}/{name}")
            return f"deleted {name}"

        self.delete_pod = delete_pod


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def model() -> FakeRuntime:
    return FakeRuntime([deleting] * 20)


@pytest.fixture
def server(start_server: Any, cluster: Cluster, model: FakeRuntime) -> httpx.Client:
    policy = ApprovalPolicy(
        [
            require_approval(
                "prod needs two SREs", when=argument_in("namespace", "prod"), approvers=approvers(2, "sre")
            )
        ]
    )
    agent = Agent(
        tools=[cluster.delete_pod],
        runtime=model,
        repository=InMemoryConversationRepository(),
        approval_policy=policy,
        groups=GROUPS,
    )
    client: httpx.Client = start_server(agent, api_keys=KEYS)
    return client


def proposed(server: httpx.Client) -> tuple[str, dict[str, Any]]:
    response = server.post("/api/chat", headers=key(CAROL), json={"messages": [user("delete web-2 in prod")]})
    assert response.status_code == 200, response.text
    (pending,) = response.json()["data"]["tool_calls"]
    return response.json()["data"]["conversation_id"], pending


def decide(server: httpx.Client, who: str, conversation_id: str, decided: dict[str, Any]) -> httpx.Response:
    body = {"messages": [user(tool_calls=[decided])], "conversation_id": conversation_id}
    return server.post("/api/chat", headers=key(who), json=body)


def error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def trail(server: httpx.Client, conversation_id: str) -> list[tuple[str, str]]:
    response = server.get("/api/audit", headers=key(OPS), params={"conversation_id": conversation_id})
    return [(r["outcome"], r["decided_by"]) for r in reversed(response.json()["records"])]


def test_a_waiting_call_says_what_it_needs(server):
    _, pending = proposed(server)

    assert pending["approval_reason"] == "prod needs two SREs"
    assert pending["approvals"] == {
        "rule": "2 approvers from sre, not the requester",
        "given": [],
        "needed": [{"stage": 1, "count": 2, "groups": ["sre"]}],
    }


def test_it_runs_once_after_two_sres_and_every_refusal_on_the_way_is_audited(server, cluster):
    conversation_id, pending = proposed(server)

    assert error(decide(server, CAROL, conversation_id, approve(pending))) == (403, "not_an_approver")
    assert error(decide(server, DAVE, conversation_id, approve(pending))) == (403, "not_an_approver")
    first = decide(server, ALICE, conversation_id, approve(pending))
    assert first.status_code == 200, first.text
    (waiting,) = first.json()["data"]["tool_calls"]
    assert [(g["by"], g["stage"]) for g in waiting["approvals"]["given"]] == [("alice", 1)]
    assert waiting["approvals"]["needed"] == [{"stage": 1, "count": 1, "groups": ["sre"]}]
    assert error(decide(server, ALICE, conversation_id, approve(pending))) == (409, "already_approved")
    assert cluster.deleted == []

    done = decide(server, BOB, conversation_id, approve(pending))

    assert done.status_code == 200, done.text
    assert [c["output"] for c in done.json()["data"]["executed_tool_calls"]] == ["deleted web-2"]
    # docs/approvals.md, "The model goes on for the requester only": bob's approval ran the call and
    # stopped; the model was not asked under bob's identity, and carol's next message goes on.
    assert done.json()["meta"]["stop_reason"] == "awaiting_requester"
    assert "Done." not in done.json()["content"]
    assert error(decide(server, ERIN, conversation_id, approve(pending))) == (
        409,
        "tool_call_already_decided",
    )
    assert cluster.deleted == ["prod/web-2"]
    assert trail(server, conversation_id) == [
        ("refused", "carol"),
        ("refused", "dave"),
        ("counted", "alice"),
        ("refused", "alice"),
        ("approved", "bob"),
        ("refused", "erin"),
    ]
    going_on = server.post(
        "/api/chat",
        headers=key(CAROL),
        json={"conversation_id": conversation_id, "messages": [user("thanks, is it gone?")]},
    )
    assert going_on.status_code == 200, going_on.text
    assert going_on.json()["meta"]["stop_reason"] != "awaiting_requester"
    assert "deleting web-2" in going_on.json()["content"]  # the model, asked again for carol


def test_an_edit_after_the_first_approval_needs_both_again(server, cluster):
    conversation_id, pending = proposed(server)
    assert decide(server, ALICE, conversation_id, approve(pending)).status_code == 200

    edited = decide(server, BOB, conversation_id, approve(pending, edited_input={"name": "web-3"}))

    assert edited.status_code == 200, edited.text
    (waiting,) = edited.json()["data"]["tool_calls"]
    assert (waiting["input"]["name"], waiting["edited"]) == ("web-3", True)
    assert [g["by"] for g in waiting["approvals"]["given"]] == ["bob"]
    # alice approving what she saw before the edit is refused: she approves what will run
    assert error(decide(server, ALICE, conversation_id, approve(pending))) == (409, "approval_mismatch")
    assert cluster.deleted == []
    done = decide(server, ERIN, conversation_id, approve(waiting))  # an SRE by her key's scope
    assert done.status_code == 200, done.text
    assert cluster.deleted == ["prod/web-3"]
    assert trail(server, conversation_id) == [
        ("counted", "alice"),
        ("counted", "bob"),
        ("refused", "alice"),
        ("edited", "erin"),
    ]


def test_a_body_naming_an_approver_names_nobody(server, cluster):
    conversation_id, pending = proposed(server)
    forged = {**approve(pending), "approvals": {"given": [{"by": "bob", "at": 0, "stage": 1}]}, "user": "bob"}

    assert decide(server, ALICE, conversation_id, forged).status_code == 200
    assert error(decide(server, ALICE, conversation_id, forged)) == (409, "already_approved")
    assert cluster.deleted == []


def test_a_rejection_by_an_sre_rejects_and_one_by_a_developer_is_refused(server, cluster):
    conversation_id, pending = proposed(server)
    assert decide(server, ALICE, conversation_id, approve(pending)).status_code == 200

    assert error(decide(server, DAVE, conversation_id, reject(pending, "no"))) == (403, "not_an_approver")
    rejected = decide(server, BOB, conversation_id, reject(pending, "not during the freeze"))

    assert rejected.status_code == 200, rejected.text
    assert cluster.deleted == []
    assert trail(server, conversation_id)[-2:] == [("refused", "dave"), ("rejected", "bob")]


def test_an_approver_sees_nothing_else_of_the_requesters_conversation(server):
    conversation_id, pending = proposed(server)

    read = server.get(f"/api/conversations/{conversation_id}", headers=key(ALICE))
    chat = server.post(
        "/api/chat",
        headers=key(ALICE),
        json={
            "messages": [user("and delete web-1", tool_calls=[approve(pending)])],
            "conversation_id": conversation_id,
        },
    )

    assert error(read) == (404, "conversation_not_found")
    assert error(chat) == (404, "conversation_not_found")


def test_the_last_approval_runs_the_call_and_leaves_the_next_step_to_the_requester(server, model, cluster):
    """docs/approvals.md, "Approvals by teams": the model goes on for the requester only. bob's
    approval completes the count in carol's conversation: the call runs, the model is not asked under
    bob's identity, and the answer says why nothing more happened."""
    conversation_id, pending = proposed(server)
    assert decide(server, ALICE, conversation_id, approve(pending)).status_code == 200
    asked = len(model.requests)

    done = decide(server, BOB, conversation_id, approve(pending))

    assert done.status_code == 200, done.text
    answer = done.json()
    assert answer["meta"]["stop_reason"] == "awaiting_requester"
    assert answer["content"] == ""
    assert answer["data"]["tool_calls"] == []
    assert [(c["name"], c["output"]) for c in answer["data"]["executed_tool_calls"]] == [
        ("delete_pod", "deleted web-2")
    ]
    assert cluster.deleted == ["prod/web-2"]
    assert len(model.requests) == asked
    read = server.get(f"/api/conversations/{conversation_id}", headers=key(CAROL)).json()
    assert [(c["id"], c["status"], c["decided_by"]) for c in read["tool_calls"]] == [
        (pending["id"], "executed", "bob")
    ]
    body = {"messages": [user("go on")], "conversation_id": conversation_id}
    went_on = server.post("/api/chat", headers=key(CAROL), json=body)  # the requester's next message
    assert went_on.status_code == 200, went_on.text
    assert went_on.json()["meta"]["stop_reason"] == "awaiting_approval"
    assert len(model.requests) == asked + 1
    (following,) = went_on.json()["data"]["tool_calls"]
    inbox = server.get("/api/approvals", headers=key(ALICE)).json()["approvals"]
    assert [(i["id"], i["requested_by"]) for i in inbox] == [(following["id"], "carol")]


def test_the_stream_of_the_last_approval_shows_the_call_run_and_no_model_turn(server, model, cluster):
    """docs/approvals.md, "Approvals by teams": as over ``/api/chat``, streamed."""
    conversation_id, pending = proposed(server)
    assert decide(server, ALICE, conversation_id, approve(pending)).status_code == 200
    asked = len(model.requests)

    body = {"messages": [user(tool_calls=[approve(pending)])], "conversation_id": conversation_id}
    with server.stream("POST", "/api/chat-stream", headers=key(BOB), json=body) as response:
        assert response.status_code == 200
        events = [json.loads(line) for line in response.iter_lines() if line]

    # no text_delta, no tool_call_proposed: the model was not asked
    assert [e["type"] for e in events] == [
        "run_started",
        "tool_started",
        "tool_finished",
        "executed_tool_calls",
        "done",
    ]
    finished = events[2]["tool_call"]
    assert (finished["id"], finished["output"]) == (pending["id"], "deleted web-2")
    done = events[-1]["message"]
    assert done["meta"]["stop_reason"] == "awaiting_requester"
    assert done["data"]["tool_calls"] == []
    assert cluster.deleted == ["prod/web-2"]
    assert len(model.requests) == asked
