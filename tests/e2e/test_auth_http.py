"""API keys: every route but health and docs needs one; whoever approved a call is on record."""

from __future__ import annotations

import logging

import pytest
from _helpdesk import approve, user
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from dcaf_like import Agent
from dcaf_like.server.auth import caller_of
from dcaf_like.testing import FakeRuntime, tool_call

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"


@pytest.fixture
def client(start_server, cluster):
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), "Deleted web-2."])
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    client = start_server(agent, api_keys={ALICE: "alice", BOB: "bob"})
    client.agent = agent  # type: ignore[attr-defined]
    return client


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong-key-0123456789"}, {"X-API-Key": "x"}]
)
def test_a_request_without_a_valid_key_is_refused_and_runs_nothing(client, cluster, headers):
    for method, path in (("POST", "/api/chat"), ("POST", "/api/chat-stream"), ("GET", "/api/conversations")):
        response = client.request(method, path, headers=headers, json={"messages": [user("delete web-2")]})

        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.agent.runtime.requests == []
    assert cluster.deleted == []


def test_health_and_docs_stay_open(client):
    assert client.get("/health").status_code == 200
    assert client.get("/openapi.json").status_code == 200


def test_the_approvers_identity_is_recorded_on_the_call(client, cluster, caplog):
    caplog.set_level(logging.INFO, logger="dcaf_like")
    proposed = client.post("/api/chat", headers={"X-API-Key": BOB}, json={"messages": [user("delete web-2")]})
    conversation_id = proposed.json()["data"]["conversation_id"]
    (pending,) = proposed.json()["data"]["tool_calls"]

    approved = client.post(
        "/api/chat",
        headers={"Authorization": f"Bearer {BOB}"},
        json={"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]},
    )
    record = client.get(f"/api/conversations/{conversation_id}", headers={"X-API-Key": BOB}).json()

    assert approved.status_code == 200
    assert cluster.deleted == [("default", "web-2")]
    assert record["tool_calls"][0]["decided_by"] == "bob"
    for key in (ALICE, BOB):
        assert key not in caplog.text
        assert key not in approved.text


def test_keys_that_are_too_short_are_refused_at_start(cluster):
    from dcaf_like import create_app

    with pytest.raises(ValueError, match="too short"):
        create_app(Agent(tools=cluster.tools(), runtime=FakeRuntime()), api_keys={"short": "alice"})


def test_keys_can_come_from_the_environment(start_server, cluster, monkeypatch):
    monkeypatch.setenv("DCAF_API_KEYS", f"alice={ALICE}, bob={BOB}")
    client = start_server(Agent(tools=cluster.tools(), runtime=FakeRuntime(["hi"])))

    assert client.post("/api/chat", json={"messages": [user("hi")]}).status_code == 401
    allowed = client.post("/api/chat", headers={"X-API-Key": BOB}, json={"messages": [user("hi")]})
    assert allowed.status_code == 200


def test_a_websocket_route_added_to_the_app_needs_a_key_too(cluster):
    from dcaf_like import create_app

    app = create_app(Agent(tools=cluster.tools(), runtime=FakeRuntime()), api_keys={ALICE: "alice"})
    opened = []

    @app.websocket("/ws/feed")
    async def feed(socket: WebSocket) -> None:
        opened.append(True)
        await socket.accept()
        await socket.send_text(caller_of(socket).name)
        await socket.close()

    with TestClient(app) as http:
        for headers in ({}, {"X-API-Key": "wrong-key-0123456789abc"}):
            with (
                pytest.raises(WebSocketDisconnect) as refused,
                http.websocket_connect("/ws/feed", headers=headers),
            ):
                pass
            assert refused.value.code == 1008
        assert opened == []
        with http.websocket_connect("/ws/feed", headers={"X-API-Key": ALICE}) as socket:
            assert socket.receive_text() == "alice"
