"""Isolation between API keys, key scopes and the audit trail, attacked over HTTP on a live server.

Two keys, alice and bob: alice must not list, read, approve, reject, write into or delete bob's
conversations and A2A tasks, whatever the entrance; each attempt is answered as if the conversation did
not exist (404), and the tool did not run. A key without ``approve`` cannot decide; the operator's key
(``admin``) sees everything and reads the audit trail, which outlives a deleted conversation.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from _helpdesk import approve, reject, user

from dcaf_like import Agent, InMemoryConversationRepository
from dcaf_like.application.messages import ModelRequest, ModelResponse, UserTurn
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"
OPS = "ops-key-0123456789abcdef000"
CAROL = "carol-key-0123456789abcdef0"  # may chat and read, not approve
DAVE = "dave-key-0123456789abcdef00"  # may only read

KEYS = {ALICE: "alice", BOB: "bob", OPS: "ops:admin", CAROL: "carol:chat+read", DAVE: "dave:read"}


def key(value: str) -> dict[str, str]:
    return {"X-API-Key": value}


def deleting(request: ModelRequest) -> ModelResponse:
    """Asked by a user: propose deleting web-2; told a tool's result: say it is done."""
    if isinstance(request.messages[-1], UserTurn):
        return tool_calls(tool_call("delete_pod", name="web-2"), text="deleting web-2")
    return reply("Done.")


@pytest.fixture
def agent(cluster: Any) -> Agent:
    return Agent(
        tools=cluster.tools(),
        runtime=FakeRuntime([deleting] * 50),
        repository=InMemoryConversationRepository(),
    )


@pytest.fixture
def server(start_server: Any, agent: Agent) -> httpx.Client:
    client: httpx.Client = start_server(agent, api_keys=KEYS, a2a=True)
    return client


def bobs_pending(server: httpx.Client) -> tuple[str, dict[str, Any]]:
    proposed = server.post("/api/chat", headers=key(BOB), json={"messages": [user("delete web-2")]})
    assert proposed.status_code == 200, proposed.text
    (pending,) = proposed.json()["data"]["tool_calls"]
    return proposed.json()["data"]["conversation_id"], pending


def is_hidden(response: httpx.Response) -> bool:
    return response.status_code == 404 and response.json()["error"]["code"] == "conversation_not_found"


def stream_status(server: httpx.Client, headers: dict[str, str], body: dict[str, Any]) -> httpx.Response:
    response = server.post("/api/chat-stream", headers=headers, json=body)
    response.read()
    return response


# -- ownership ---------------------------------------------------------------------------------------


def test_alice_cannot_list_read_or_delete_bobs_conversation(server, cluster):
    conversation_id, _ = bobs_pending(server)
    mine = server.post("/api/chat", headers=key(ALICE), json={"messages": [user("delete web-2")]}).json()

    listed = server.get("/api/conversations", headers=key(ALICE)).json()["conversations"]
    read = server.get(f"/api/conversations/{conversation_id}", headers=key(ALICE))
    deleted = server.delete(f"/api/conversations/{conversation_id}", headers=key(ALICE))
    missing = server.get("/api/conversations/conv_nobody_has_this", headers=key(ALICE))

    assert [c["id"] for c in listed] == [mine["data"]["conversation_id"]]
    assert is_hidden(read)
    assert is_hidden(deleted)
    assert read.json()["error"]["message"] == missing.json()["error"]["message"].replace(
        "conv_nobody_has_this", conversation_id
    )  # told exactly what an unknown id is told
    assert server.get(f"/api/conversations/{conversation_id}", headers=key(BOB)).status_code == 200


def test_alice_pages_through_her_own_conversations_among_bobs(server, cluster):
    """docs/api.md, "Conversations": a caller who sees only its own conversations pages through
    them with the cursor; none of bob's appears on any page, and each of alice's appears once."""
    started: dict[str, list[str]] = {ALICE: [], BOB: []}
    for n in range(9):
        who = ALICE if n % 3 == 0 else BOB
        turn = server.post("/api/chat", headers=key(who), json={"messages": [user("hi")]}).json()
        started[who].append(turn["data"]["conversation_id"])

    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = server.get("/api/conversations", headers=key(ALICE), params=params).json()
        seen += [c["id"] for c in page["conversations"]]
        if (cursor := page["next_cursor"]) is None:
            break

    assert seen == started[ALICE][::-1]


@pytest.mark.parametrize("route", ["/api/chat", "/api/chat-stream"])
@pytest.mark.parametrize("attempt", ["approve", "edit", "reject", "write"])
def test_alice_cannot_decide_or_write_in_bobs_conversation(server, cluster, route, attempt):
    conversation_id, pending = bobs_pending(server)
    decisions = {
        "approve": [approve(pending)],
        "edit": [approve(pending, edited_input={"name": "web-1", "namespace": "default"})],
        "reject": [reject(pending, "mine now")],
        "write": [],
    }[attempt]
    text = "hello bob" if attempt == "write" else ""
    body = {"messages": [user(text, conversation_id=conversation_id, tool_calls=decisions)]}

    response = stream_status(server, key(ALICE), body)

    assert is_hidden(response), response.text
    assert cluster.deleted == []
    stored = server.get(f"/api/conversations/{conversation_id}", headers=key(BOB)).json()
    assert stored["tool_calls"][0]["status"] == "pending"
    assert [m["content"] for m in stored["messages"]] == ["delete web-2", "deleting web-2"]
    assert server.get("/api/audit", headers=key(OPS)).json()["records"] == []


# -- stopping a run (docs/runs.md, "Cancelling a run") -------------------------------------------


def test_alice_cannot_stop_bobs_run_and_nothing_is_written(server, agent):
    """docs/runs.md, "Who may cancel"; docs/operations.md, the ownership list."""
    conversation_id, _ = bobs_pending(server)

    response = server.post(f"/api/conversations/{conversation_id}/cancel", headers=key(ALICE))

    assert is_hidden(response), response.text
    assert not agent.repository.cancel_requested(conversation_id, since=0)


def test_a_key_without_chat_cannot_stop_a_run_and_the_refusal_is_audited(server, agent):
    conversation_id, _ = bobs_pending(server)

    response = server.post(f"/api/conversations/{conversation_id}/cancel", headers=key(DAVE))

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_scope"
    assert not agent.repository.cancel_requested(conversation_id, since=0)
    (record,) = server.get("/api/audit", headers=key(OPS)).json()["records"]
    assert (record["outcome"], record["decided_by"], record["conversation_id"], record["entrance"]) == (
        "refused",
        "dave",
        conversation_id,
        "http",
    )
    assert "'chat' scope" in record["reason"]


@pytest.mark.parametrize("bad_id", ["x" * 3000, 'conv "quoted"', "conv with spaces", "conv;drop"])
@pytest.mark.parametrize(("method", "suffix"), [("POST", "/cancel"), ("GET", ""), ("DELETE", "")])
def test_a_conversation_route_naming_an_id_no_conversation_can_have_is_422_and_writes_nothing(
    server, agent, bad_id, method, suffix
):
    response = server.request(method, f"/api/conversations/{bad_id}{suffix}", headers=key(BOB))

    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert not agent.repository.cancel_requested(bad_id, since=0)


def test_a_key_without_chat_cannot_delete_a_conversation_and_the_refusal_is_audited(server):
    """docs/operations.md: a refused delete joins the audit trail, as a refused cancel does."""
    conversation_id, _ = bobs_pending(server)

    response = server.delete(f"/api/conversations/{conversation_id}", headers=key(DAVE))

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_scope"
    assert server.get(f"/api/conversations/{conversation_id}", headers=key(BOB)).status_code == 200
    (record,) = server.get("/api/audit", headers=key(OPS)).json()["records"]
    assert (record["outcome"], record["decided_by"], record["conversation_id"]) == (
        "refused",
        "dave",
        conversation_id,
    )
    assert record["reason"].startswith("delete refused:")


def test_the_owner_and_the_operator_may_stop_a_run_and_an_unknown_id_is_404(server, agent):
    conversation_id, _ = bobs_pending(server)

    by_owner = server.post(f"/api/conversations/{conversation_id}/cancel", headers=key(BOB))
    by_operator = server.post(f"/api/conversations/{conversation_id}/cancel", headers=key(OPS))
    unknown = server.post("/api/conversations/conv_nobody_has_this/cancel", headers=key(BOB))

    assert (by_owner.status_code, by_operator.status_code) == (202, 202)
    assert by_owner.json() == {"conversation_id": conversation_id, "cancel_requested": True}
    assert agent.repository.cancel_requested(conversation_id, since=0)
    assert unknown.status_code == 404
    assert not agent.repository.cancel_requested("conv_nobody_has_this", since=0)


def test_alice_cannot_reach_bobs_a2a_tasks_on_any_route(server, cluster):
    waiting = server.post(
        "/a2a/tasks/send", headers=key(BOB), json={"message": "fix the crashing pod"}
    ).json()
    [pending] = waiting["tool_calls"]
    approval = {"tool_calls": [{"id": pending["id"], "execute": True}]}

    rest_get = server.get(f"/a2a/tasks/{waiting['id']}", headers=key(ALICE))
    rest_send = server.post(
        "/a2a/tasks/send", headers=key(ALICE), json={"task_id": waiting["id"], "data": approval}
    )
    by_context = server.post(
        "/a2a/tasks/send", headers=key(ALICE), json={"context_id": waiting["context_id"], "data": approval}
    )
    new_task_in_context = server.post(
        "/a2a/tasks/send", headers=key(ALICE), json={"context_id": waiting["context_id"], "message": "hi"}
    )
    rpc = {
        method: rpc_call(server, ALICE, method, params)
        for method, params in (
            ("tasks/get", {"id": waiting["id"]}),
            ("tasks/cancel", {"id": waiting["id"]}),
            ("message/send", a2a_message(approval, task_id=waiting["id"], context_id=waiting["context_id"])),
            ("message/send", a2a_message(approval, context_id=waiting["context_id"])),
        )
    }

    assert rest_get.status_code == rest_send.status_code == 404
    assert rest_get.json()["error"]["code"] == "task_not_found"
    assert by_context.status_code == new_task_in_context.status_code == 404
    for method, answer in rpc.items():
        assert answer["error"]["code"] == -32001, (method, answer)  # A2A's TaskNotFoundError
    assert cluster.deleted == []
    task = server.get(f"/a2a/tasks/{waiting['id']}", headers=key(BOB)).json()
    assert task["status"] == "input-required"
    stored = server.get(f"/api/conversations/{waiting['context_id']}", headers=key(BOB)).json()
    assert len(stored["messages"]) == 2
    assert len(stored["tool_calls"]) == 1


def test_the_owner_and_the_operator_still_reach_the_conversation(server, cluster):
    conversation_id, pending = bobs_pending(server)

    approved = server.post(
        "/api/chat",
        headers=key(OPS),
        json={"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]},
    )
    everything = server.get("/api/conversations", headers=key(OPS)).json()["conversations"]

    assert approved.status_code == 200
    assert cluster.deleted == [("default", "web-2")]
    assert conversation_id in [c["id"] for c in everything]
    record = server.get(f"/api/conversations/{conversation_id}", headers=key(BOB)).json()
    assert record["tool_calls"][0]["decided_by"] == "ops"


# -- scopes ------------------------------------------------------------------------------------------


def test_a_key_without_approve_cannot_decide_even_its_own_calls(server, cluster):
    proposed = server.post("/api/chat", headers=key(CAROL), json={"messages": [user("delete web-2")]}).json()
    conversation_id = proposed["data"]["conversation_id"]
    (pending,) = proposed["data"]["tool_calls"]
    decision = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}

    answers = [
        server.post("/api/chat", headers=key(CAROL), json=decision),
        stream_status(server, key(CAROL), decision),
        server.post(
            "/a2a/tasks/send",
            headers=key(CAROL),
            json={"context_id": conversation_id, "data": {"tool_calls": [approve(pending)]}},
        ),
    ]

    for answer in answers:
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "missing_scope"
        assert "approve" in answer.json()["error"]["message"]
    assert cluster.deleted == []
    stored = server.get(f"/api/conversations/{conversation_id}", headers=key(CAROL)).json()
    assert stored["tool_calls"][0]["status"] == "pending"
    # docs/operations.md: every refused decision is in the audit trail, this one too
    trail = server.get("/api/audit", headers=key(OPS), params={"conversation_id": conversation_id}).json()
    assert sorted((r["outcome"], r["call_id"], r["decided_by"], r["entrance"]) for r in trail["records"]) == [
        ("refused", pending["id"], "carol", "a2a"),
        ("refused", pending["id"], "carol", "http"),
        ("refused", pending["id"], "carol", "stream"),
    ]
    assert all("'approve' scope" in r["reason"] for r in trail["records"])


def test_a_key_without_read_cannot_list_or_read(start_server, cluster):
    agent = Agent(tools=cluster.tools(), runtime=FakeRuntime(["hi"]))
    server = start_server(agent, api_keys={ALICE: "alice:chat"})
    conversation_id = server.post("/api/chat", headers=key(ALICE), json={"messages": [user("hi")]}).json()[
        "data"
    ]["conversation_id"]

    for path in ("/api/conversations", f"/api/conversations/{conversation_id}", "/api/audit"):
        refused = server.get(path, headers=key(ALICE))
        assert refused.status_code == 403, path
        assert refused.json()["error"]["code"] == "missing_scope"


def test_keys_with_scopes_come_from_the_environment(start_server, cluster, monkeypatch):
    monkeypatch.setenv("DCAF_API_KEYS", f"alice={ALICE}, ops:admin+chat={OPS}")
    server = start_server(Agent(tools=cluster.tools(), runtime=FakeRuntime(["hi"])))
    server.post("/api/chat", headers=key(ALICE), json={"messages": [user("hi")]})

    assert server.get("/api/audit", headers=key(ALICE)).status_code == 403
    assert server.get("/api/audit", headers=key(OPS)).status_code == 200
    assert len(server.get("/api/conversations", headers=key(OPS)).json()["conversations"]) == 1


@pytest.mark.parametrize(
    ("holder", "problem"),
    [("alice:chat+fly", "unknown scopes"), ("policy", "names a decider"), ("al ice", "identity")],
)
def test_a_bad_key_configuration_is_refused_at_start(cluster, holder, problem):
    from dcaf_like import create_app

    with pytest.raises(ValueError, match=problem):
        create_app(Agent(tools=cluster.tools(), runtime=FakeRuntime()), api_keys={ALICE: holder})


# -- the audit trail ---------------------------------------------------------------------------------


def test_every_decision_is_in_the_audit_trail_which_outlives_the_conversation(server, cluster):
    conversation_id, pending = bobs_pending(server)
    forged = {**pending, "id": "tc_forged"}
    refused = server.post(
        "/api/chat",
        headers=key(BOB),
        json={"messages": [user(conversation_id=conversation_id, tool_calls=[approve(forged)])]},
    )
    approved = stream_status(
        server,
        key(BOB),
        {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]},
    )
    assert (refused.status_code, approved.status_code) == (404, 200)
    assert server.delete(f"/api/conversations/{conversation_id}", headers=key(BOB)).status_code == 204

    trail = server.get("/api/audit", headers=key(OPS), params={"conversation_id": conversation_id})
    bobs_try = server.get("/api/audit", headers=key(BOB))

    assert trail.status_code == 200
    records = trail.json()["records"]
    assert [(r["outcome"], r["call_id"], r["entrance"]) for r in records] == [
        ("approved", pending["id"], "stream"),
        ("refused", "tc_forged", "http"),
    ]
    assert {(r["decided_by"], r["decider"], r["conversation_id"]) for r in records} == {
        ("bob", "human", conversation_id)
    }
    assert records[0]["tool_name"] == "delete_pod"
    assert len(records[0]["fingerprint"]) == 64
    assert bobs_try.status_code == 403
    assert server.get(f"/api/conversations/{conversation_id}", headers=key(OPS)).status_code == 404


def test_a2a_decisions_and_cancels_are_audited_with_their_entrance(server, cluster):
    first = server.post("/a2a/tasks/send", headers=key(BOB), json={"message": "fix it"}).json()
    [pending] = first["tool_calls"]
    rejection = {"tool_calls": [{"id": pending["id"], "execute": False, "rejection_reason": "not today"}]}
    server.post("/a2a/tasks/send", headers=key(BOB), json={"task_id": first["id"], "data": rejection})
    second = server.post("/a2a/tasks/send", headers=key(BOB), json={"message": "fix it"}).json()
    canceled = rpc_call(server, BOB, "tasks/cancel", {"id": second["id"]})

    assert canceled["result"]["status"]["state"] == "canceled"
    records = server.get("/api/audit", headers=key(OPS)).json()["records"]
    assert [(r["outcome"], r["entrance"], r["decided_by"], r["reason"]) for r in records] == [
        ("rejected", "a2a", "bob", "the task was canceled"),
        ("rejected", "a2a", "bob", "not today"),
    ]


# -- helpers -----------------------------------------------------------------------------------------


def a2a_message(data: dict[str, Any], **ids: str) -> dict[str, Any]:
    return {
        "message": {
            "kind": "message",
            "messageId": "m-" + json.dumps(ids, sort_keys=True),
            "role": "user",
            "parts": [{"kind": "data", "data": data}],
            **{"taskId" if name == "task_id" else "contextId": value for name, value in ids.items()},
        }
    }


def rpc_call(server: httpx.Client, api_key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = server.post(
        "/a2a", headers=key(api_key), json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


# -- every entrance, from the app itself (issue 34) -----------------------------------------------------

#: Routes that read or change no conversation, with why. A route not here must be in ENTRANCES.
NO_CONVERSATION = {
    ("GET", "/openapi.json"): "the API's description",
    ("GET", "/docs"): "the API's description",
    ("GET", "/docs/oauth2-redirect"): "the API's description",
    ("GET", "/redoc"): "the API's description",
    ("GET", "/.well-known/agent-card.json"): "the agent's card",
    ("GET", "/.well-known/agent.json"): "the agent's card",
    ("GET", "/health"): "a probe",
    ("GET", "/ready"): "a probe",
    ("GET", "/"): "the chat page's files (it uses the routes below)",
    ("GET", "/ui/app.js"): "the chat page's files",
    ("GET", "/ui/app.css"): "the chat page's files",
    ("GET", "/ui/inbox.js"): "the chat page's files",
    ("GET", "/metrics"): "counts only, admin only",
    ("GET", "/mcp"): "the agent's ungated tools; no conversation is read or written",
    ("POST", "/mcp"): "the agent's ungated tools; no conversation is read or written",
    ("DELETE", "/mcp"): "an MCP session",
    ("GET", "/api/grants"): "standing grants (approve keys): no conversation is read or written",
    ("POST", "/api/grants"): "standing grants (approve keys): no conversation is read or written",
    (
        "DELETE",
        "/api/grants/{grant_id}",
    ): "standing grants (approve keys): no conversation is read or written",
}


def _alice_tries(server: httpx.Client, method: str, path: str, conversation_id: str, pending: dict) -> bool:
    """Alice's attempt on bob's conversation through one entrance; True if she was refused as if it did
    not exist (or, for the list, if it is not listed)."""
    task_id = f"{conversation_id}~1"
    target = path.replace("{conversation_id}", conversation_id).replace("{task_id}", task_id)
    writing = {"messages": [user("mine now", conversation_id=conversation_id, tool_calls=[approve(pending)])]}
    if (method, path) == ("GET", "/api/conversations"):
        listed = server.get(target, headers=key(ALICE)).json()["conversations"]
        return conversation_id not in [c["id"] for c in listed]
    if (method, path) == ("GET", "/api/approvals"):  # bob's call is under today's rule: bob's to decide
        waiting = server.get(target, headers=key(ALICE)).json()["approvals"]
        return conversation_id not in [item["conversation_id"] for item in waiting]
    if (method, path) in (("GET", "/api/audit"), ("GET", "/api/audit/export")):  # the operator's only
        return server.get(target, headers=key(ALICE)).status_code == 403
    if (method, path) == ("POST", "/a2a"):
        answer = rpc_call(server, ALICE, "message/send", a2a_message({}, context_id=conversation_id))
        return "error" in answer
    if path == "/a2a/tasks/send":
        body: dict[str, Any] = {"context_id": conversation_id, "message": "mine now"}
        return server.post(target, headers=key(ALICE), json=body).status_code == 404
    if path in ("/api/chat", "/api/chat-stream"):
        return stream_status(server, key(ALICE), writing).status_code == 404
    return server.request(method, target, headers=key(ALICE)).status_code == 404


ENTRANCES = {
    ("POST", "/api/chat"),
    ("POST", "/api/chat-stream"),
    ("GET", "/api/conversations"),
    ("GET", "/api/conversations/{conversation_id}"),
    ("DELETE", "/api/conversations/{conversation_id}"),
    ("POST", "/api/conversations/{conversation_id}/cancel"),
    ("GET", "/api/conversations/{conversation_id}/events"),
    ("GET", "/api/audit"),
    ("GET", "/api/audit/export"),
    ("GET", "/api/approvals"),
    ("POST", "/a2a"),
    ("POST", "/a2a/tasks/send"),
    ("GET", "/a2a/tasks/{task_id}"),
}


def _routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, routers included (HEAD left out: GET's twin)."""
    found: set[tuple[str, str]] = set()

    def walk(routes: list[Any]) -> None:
        for route in routes:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                walk(inner.routes)
                continue
            for method in getattr(route, "methods", None) or ():
                if method != "HEAD":
                    found.add((method, route.path))

    walk(app.routes)
    return found


def test_every_route_of_the_app_is_an_entrance_in_the_table_or_says_why_it_touches_no_conversation():
    """A new route cannot be added without joining the ownership table below."""
    from dcaf_like import create_app

    agent = Agent(runtime=FakeRuntime([]), repository=InMemoryConversationRepository())
    app = create_app(agent, api_keys=KEYS, a2a=True, mcp=True, metrics=True)

    unlisted = _routes(app) - ENTRANCES - set(NO_CONVERSATION)
    assert not unlisted, (
        f"routes in no row of the entrance table (tests/e2e/test_ownership_http.py): {unlisted}"
    )


@pytest.mark.parametrize(("method", "path"), sorted(ENTRANCES))
def test_through_every_entrance_another_identity_finds_nothing_and_changes_nothing(
    server, cluster, agent, method, path
):
    conversation_id, pending = bobs_pending(server)
    version = agent.repository.get(conversation_id).version

    assert _alice_tries(server, method, path, conversation_id, pending), f"{method} {path} let alice in"

    stored = agent.repository.get(conversation_id)
    assert stored is not None
    assert stored.version == version
    assert [c.status.value for c in stored.tool_calls.values()] == ["pending"]
    assert cluster.deleted == []
    assert not agent.repository.cancel_requested(conversation_id, since=0)
