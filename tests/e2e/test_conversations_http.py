"""The conversation routes over real HTTP: list per agent, read whole, delete."""

from __future__ import annotations

from _helpdesk import approve, user

from dcaf_like import Agent
from dcaf_like.testing import FakeRuntime, tool_call


def ops_agent(cluster, *, name="ops", repository=None, script=None) -> Agent:
    runtime = FakeRuntime(script or [tool_call("delete_pod", name="web-2"), "Deleted web-2."])
    return Agent(tools=cluster.tools(), runtime=runtime, name=name, repository=repository)


def test_a_pending_conversation_is_listed_and_read_whole_without_credentials(start_server, cluster):
    client = start_server(ops_agent(cluster))
    turn = client.post(
        "/api/chat",
        json={
            "messages": [user("delete web-2", session={"cluster": "prod"})],
            "platform_context": {"tenant": "acme", "api_token": "tok-123456"},
        },
    ).json()
    conversation_id = turn["data"]["conversation_id"]

    listed = client.get("/api/conversations")
    whole = client.get(f"/api/conversations/{conversation_id}")

    assert listed.status_code == 200
    (summary,) = listed.json()["conversations"]
    assert summary["id"] == conversation_id
    assert summary["pending_tool_calls"] == 1
    assert summary["messages"] == 2
    assert summary["last_message"] == ""
    assert summary["title"] == "delete web-2"
    assert whole.status_code == 200
    body = whole.json()
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    assert body["messages"][0]["content"] == "delete web-2"
    (call,) = body["tool_calls"]
    assert (call["name"], call["input"], call["status"]) == (
        "delete_pod",
        {"name": "web-2", "namespace": "default"},
        "pending",
    )
    assert body["messages"][1]["tool_call_ids"] == [call["id"]]
    assert body["session"] == {"cluster": "prod"}
    assert "tok-123456" not in whole.text
    assert "tok-123456" not in listed.text


def test_reading_a_decided_call_shows_who_decided_and_the_outcome(start_server, cluster):
    client = start_server(ops_agent(cluster))
    turn = client.post("/api/chat", json={"messages": [user("delete web-2")]}).json()
    conversation_id = turn["data"]["conversation_id"]
    (pending,) = turn["data"]["tool_calls"]
    client.post(
        "/api/chat",
        json={"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]},
    )

    body = client.get(f"/api/conversations/{conversation_id}").json()

    (call,) = body["tool_calls"]
    assert call["status"] == "executed"
    assert call["output"] == 'pod "web-2" deleted'
    assert call["decided_by"] == "user"
    assert call["decided_at"] is not None
    assert body["messages"][-1]["content"] == "Deleted web-2."


def test_a_deleted_conversation_is_gone_and_its_calls_cannot_be_approved(start_server, cluster):
    client = start_server(ops_agent(cluster))
    turn = client.post("/api/chat", json={"messages": [user("delete web-2")]}).json()
    conversation_id = turn["data"]["conversation_id"]
    (pending,) = turn["data"]["tool_calls"]

    deleted = client.delete(f"/api/conversations/{conversation_id}")
    again = client.delete(f"/api/conversations/{conversation_id}")
    read = client.get(f"/api/conversations/{conversation_id}")
    approval = client.post(
        "/api/chat",
        json={"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]},
    )

    assert deleted.status_code == 204
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "conversation_not_found"
    assert read.status_code == 404
    assert read.json()["error"]["conversation_id"] == conversation_id
    assert approval.status_code == 404
    assert cluster.deleted == []
    assert client.get("/api/conversations").json() == {"conversations": [], "errors": [], "next_cursor": None}


def test_a_conversation_is_titled_by_its_first_user_message_cut_short(start_server, cluster):
    client = start_server(ops_agent(cluster))
    question = "please look at   every pod in the prod namespace and tell me which ones keep crashing today"
    client.post("/api/chat", json={"messages": [user(question)]})

    (summary,) = client.get("/api/conversations").json()["conversations"]

    assert summary["title"] == "please look at every pod in the prod namespace and tell me\u2026"
    assert len(summary["title"]) <= 60


def test_each_agent_lists_only_its_own_conversations_in_a_shared_store(start_server, cluster, tmp_path):
    store = f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    ops = start_server(ops_agent(cluster, name="ops", repository=store, script=["ops here"]))
    billing = start_server(ops_agent(cluster, name="billing", repository=store, script=["billing here"]))
    ops_id = ops.post("/api/chat", json={"messages": [user("hi")]}).json()["data"]["conversation_id"]
    billing_id = billing.post("/api/chat", json={"messages": [user("hi")]}).json()["data"]["conversation_id"]

    assert [c["id"] for c in ops.get("/api/conversations").json()["conversations"]] == [ops_id]
    assert [c["id"] for c in billing.get("/api/conversations").json()["conversations"]] == [billing_id]
    assert ops.get(f"/api/conversations/{billing_id}").status_code == 404
    assert ops.delete(f"/api/conversations/{billing_id}").status_code == 404


def test_the_list_limit_is_validated_and_applied(start_server, cluster):
    client = start_server(ops_agent(cluster, script=["one", "two", "three"]))
    ids = [
        client.post("/api/chat", json={"messages": [user("hi")]}).json()["data"]["conversation_id"]
        for _ in range(3)
    ]

    limited = client.get("/api/conversations", params={"limit": 2})
    invalid = client.get("/api/conversations", params={"limit": 0})

    assert [c["id"] for c in limited.json()["conversations"]] == ids[::-1][:2]
    assert invalid.status_code == 422
    assert invalid.json()["error"]["field"] == "query.limit"


def pages(client, **params):
    """Every page of the list, following `next_cursor` until it is null."""
    found, cursor = [], None
    while True:
        body = client.get("/api/conversations", params={**params, **({"cursor": cursor} if cursor else {})})
        assert body.status_code == 200, body.text
        found.append([c["id"] for c in body.json()["conversations"]])
        cursor = body.json()["next_cursor"]
        if cursor is None:
            return found


def test_the_list_is_paged_with_a_cursor_and_a_bad_cursor_is_a_422(start_server, cluster):
    """docs/api.md, "Conversations": each page starts where the last ended; the last page's
    `next_cursor` is null; a cursor the list did not give is refused, not read as "from the start"."""
    client = start_server(ops_agent(cluster, script=["answer"] * 7))
    ids = [
        client.post("/api/chat", json={"messages": [user("hi")]}).json()["data"]["conversation_id"]
        for _ in range(7)
    ]

    listed = pages(client, limit=3)

    assert listed == [ids[::-1][:3], ids[::-1][3:6], ids[::-1][6:]]
    for bad in ("not-a-cursor", "WzEsMl0", "W10", "x" * 2000):
        refused = client.get("/api/conversations", params={"cursor": bad})
        assert refused.status_code == 422, bad
        assert refused.json()["error"]["code"] in {"invalid_cursor", "invalid_request"}


def test_a_function_agent_has_no_conversation_routes(start_server):
    def echo(messages, context):
        return "hi"

    client = start_server(echo)

    response = client.get("/api/conversations")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_wrong_method_on_a_conversation_names_every_allowed_method(start_server, cluster):
    client = start_server(ops_agent(cluster))

    response = client.put("/api/conversations/conv-1")

    assert response.status_code == 405
    assert {m.strip() for m in response.headers["allow"].split(",")} >= {"GET", "DELETE"}
    assert response.json()["error"]["code"] == "method_not_allowed"
