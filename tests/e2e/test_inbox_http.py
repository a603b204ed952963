"""``GET /api/approvals`` over HTTP, with API keys (docs/approvals.md, "One inbox"): the calls waiting
for the caller's decision across conversations, paged with an opaque cursor, each decided from what the
inbox says without reading its conversation."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from dcaf_like import (
    Agent,
    ApprovalPolicy,
    ConversationRepository,
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
READER = "reader-key-0123456789abcdef0"
KEYS = {
    CAROL: "carol:chat+approve+read",
    ALICE: "alice:chat+approve+read",
    BOB: "bob:approve",
    DAVE: "dave:approve",
    READER: "reader:read",
}


def key(value: str) -> dict[str, str]:
    return {"X-API-Key": value}


def deleting(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if isinstance(last, UserTurn):
        return tool_calls(tool_call("delete_pod", name=last.text.split()[-1], namespace="prod"))
    return reply("Done.")


class NoIndex(InMemoryConversationRepository):
    """A store of someone's own that keeps no index of waiting calls: the port's default refuses."""

    list_waiting = ConversationRepository.list_waiting
    alist_waiting = ConversationRepository.alist_waiting


def serve(start_server: Any, deleted: list[str], repository: Any = None) -> httpx.Client:
    @tool
    def delete_pod(name: str, namespace: str = "default") -> str:
        """Delete a pod."""
        deleted.append(name)
        return f"deleted {name}"

    two_sres = require_approval(
        "prod needs two SREs", when=argument_in("namespace", "prod"), approvers=approvers(2, "sre")
    )
    agent = Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([deleting] * 40),
        repository=InMemoryConversationRepository() if repository is None else repository,
        approval_policy=ApprovalPolicy([two_sres]),
        groups={"sre": {"carol", "alice", "bob"}, "dev": {"dave"}},
    )
    client: httpx.Client = start_server(agent, api_keys=KEYS)
    return client


def ask(server: httpx.Client, pod: str) -> str:
    body = {
        "messages": [{"role": "user", "content": f"delete {pod}"}],
        "platform_context": {"tenant_name": "acme"},
    }
    response = server.post("/api/chat", headers=key(CAROL), json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["data"]["conversation_id"])


def inbox(server: httpx.Client, who: str, **params: Any) -> httpx.Response:
    return server.get("/api/approvals", headers=key(who), params=params)


def decide(server: httpx.Client, who: str, item: dict[str, Any]) -> httpx.Response:
    decided = {"id": item["id"], "name": item["name"], "input": item["input"], "execute": True}
    body = {
        "conversation_id": item["conversation_id"],
        "platform_context": item["platform_context"],
        "messages": [{"role": "user", "content": "", "data": {"tool_calls": [decided]}}],
    }
    return server.post("/api/chat", headers=key(who), json=body)


@pytest.fixture
def deleted() -> list[str]:
    return []


def test_one_inbox_lists_every_call_waiting_for_the_caller_and_what_it_needs(start_server, deleted):
    server = serve(start_server, deleted)
    first, second = ask(server, "web-1"), ask(server, "web-2")

    listed = inbox(server, ALICE)

    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert [(i["conversation_id"], i["input"]["name"]) for i in body["approvals"]] == [
        (second, "web-2"),
        (first, "web-1"),
    ]
    assert body["next_cursor"] is None
    item = body["approvals"][0]
    assert (item["requested_by"], item["rule"], item["stage"], item["given"]) == (
        "carol",
        "2 approvers from sre, not the requester",
        1,
        [],
    )
    assert item["eligible"] == [{"stage": 1, "count": 2, "groups": ["sre"], "members": ["alice", "bob"]}]
    assert item["platform_context"] == {"tenant_name": "acme"}
    assert inbox(server, CAROL).json()["approvals"] == []  # the requester the rule keeps out
    assert inbox(server, DAVE).json()["approvals"] == []  # not in sre


def test_one_inbox_an_approver_decides_from_the_inbox_and_the_count_shows(start_server, deleted):
    server = serve(start_server, deleted)
    ask(server, "web-1")
    [item] = inbox(server, ALICE).json()["approvals"]

    assert decide(server, ALICE, item).status_code == 200
    assert inbox(server, ALICE).json()["approvals"] == []  # counted: nothing more for alice
    [waiting] = inbox(server, BOB).json()["approvals"]
    assert [(g["by"], g["stage"]) for g in waiting["given"]] == [("alice", 1)]
    assert waiting["eligible"] == [{"stage": 1, "count": 1, "groups": ["sre"], "members": ["bob"]}]
    done = decide(server, BOB, waiting)

    assert done.status_code == 200, done.text
    assert deleted == ["web-1"]
    assert inbox(server, BOB).json()["approvals"] == []


def test_one_inbox_pages_with_a_cursor_and_refuses_one_it_did_not_give(start_server, deleted):
    server = serve(start_server, deleted)
    asked = [ask(server, f"web-{i}") for i in range(5)]

    seen: list[str] = []
    cursor = None
    while True:
        page = inbox(server, ALICE, limit=2, **({"cursor": cursor} if cursor else {})).json()
        seen += [i["conversation_id"] for i in page["approvals"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert seen == asked[::-1]

    refused = inbox(server, ALICE, cursor="not-a-cursor")
    assert refused.status_code == 422
    assert (refused.json()["error"]["code"], refused.json()["error"]["field"]) == ("invalid_cursor", "cursor")


def test_one_inbox_needs_the_approve_scope(start_server, deleted):
    server = serve(start_server, deleted)

    refused = inbox(server, READER)

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "missing_scope"


def test_one_inbox_on_a_store_without_the_index_is_501_naming_the_capability(start_server, deleted):
    server = serve(start_server, deleted, NoIndex())

    refused = inbox(server, ALICE)

    assert refused.status_code == 501
    error = refused.json()["error"]
    assert error["code"] == "missing_capability"
    assert "list the calls waiting for approval" in error["message"]
