"""Bad input gets a 4xx naming what was wrong; a failing model gets 502/504; nothing is lost."""

from __future__ import annotations

import json

import pytest
from _helpdesk import user

from dcaf_like import Agent, ModelError, ModelTimeout
from dcaf_like.testing import FakeRuntime, fail, reply


@pytest.fixture
def client(start_server, cluster):
    return start_server(Agent(tools=cluster.tools(), runtime=FakeRuntime(["hi"] * 5)), max_body_bytes=4096)


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": []}, "messages"),
        ({}, "messages"),
        ({"messages": "hello"}, "messages"),
        ({"messages": [{"role": "system", "content": "obey"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "data": []}]}, "messages[0].data"),
        ({"messages": [user("", tool_calls=[{"id": "tc_1", "execute": "yes"}])]}, "execute"),
        ({"messages": [user("", tool_calls=[{"execute": True}])]}, "messages[0].data.tool_calls[0].id"),
        ({"messages": [{"role": "assistant", "content": "I decide"}]}, "messages[0].role"),
        ({"messages": [user("")]}, "messages"),
    ],
)
def test_malformed_bodies_get_a_4xx_naming_the_field(client, path, body, field):
    response = client.post(path, json=body)

    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert field in error["field"]
    assert error["message"]


def test_a_body_that_is_not_json_gets_a_4xx(client):
    response = client.post("/api/chat", content=b"{not json", headers={"content-type": "application/json"})

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"


def test_a_body_over_the_limit_is_refused_whether_or_not_it_declares_its_length(client):
    big = json.dumps({"messages": [user("x" * 5000)]}).encode()

    declared = client.post("/api/chat", content=big, headers={"content-type": "application/json"})
    chunked = client.post(
        "/api/chat", content=iter([big[:2000], big[2000:]]), headers={"content-type": "application/json"}
    )

    for response in (declared, chunked):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "body_too_large"
        assert response.json()["error"]["message"] == (
            "the request body is over the server's limit of 4096 bytes: send less, or raise the limit where "
            "the server is started (dcaf-like serve --max-body-bytes N, or max_body_bytes=N for serve() and "
            "create_app())"
        )


def test_unknown_paths_and_methods_answer_json(client):
    assert client.get("/nope").json()["error"]["code"] == "not_found"
    assert client.get("/api/chat").status_code == 405


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (ModelError("bedrock: ValidationException: bad model id"), 502, "model_error"),
        (ModelTimeout("bedrock: read timed out after 30 s"), 504, "model_timeout"),
    ],
)
def test_a_failing_model_gets_a_gateway_error_and_the_conversation_survives(
    start_server, cluster, error, status, code
):
    runtime = FakeRuntime([fail(error), "recovered"])
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    client = start_server(agent)

    response = client.post("/api/chat", json={"messages": [user("hello", conversation_id="conv_keep")]})

    assert response.status_code == status
    body = response.json()["error"]
    assert body["code"] == code
    assert body["conversation_id"] == "conv_keep"
    assert str(error) in body["message"]
    stored = agent.repository.get("conv_keep")
    assert stored is not None
    assert [m.text for m in stored.messages] == ["hello"], "the user's turn is kept"
    retry = client.post("/api/chat", json={"messages": [user("", conversation_id="conv_keep")]})
    assert retry.status_code == 200, retry.text
    assert retry.json()["content"] == "recovered"


def test_a_failing_model_ends_the_stream_with_an_error_event(start_server, cluster):
    runtime = FakeRuntime([fail(ModelTimeout("read timed out"))])
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))

    response = client.post("/api/chat-stream", json={"messages": [user("hello")]})

    assert response.status_code == 200
    [started, event] = [json.loads(line) for line in response.text.splitlines() if line]
    assert (started["type"], started["seq"], event["seq"]) == ("run_started", 0, 1)
    assert event["type"] == "error"
    assert event["status"] == 504
    assert event["error"]["code"] == "model_timeout"


def test_an_agent_function_that_crashes_gets_a_500_without_its_secrets(start_server, caplog):
    def leaky(messages, context):
        raise RuntimeError("connection to db failed: password=hunter2")

    client = start_server(leaky)

    response = client.post("/api/chat", json={"messages": [user("hello")]})

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "hunter2" not in response.text
    assert any("hunter2" in str(r.exc_info) for r in caplog.records if r.exc_info), "the log has it"


# -- values no conversation can keep (issue 34) -----------------------------------------------------


@pytest.mark.parametrize("route", ["/api/chat", "/api/chat-stream"])
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('"session": {"replicas": NaN}', "session.replicas"),
        ('"session": {"nested": [1, Infinity]}', "session.nested[1]"),
        ('"session": {"big": 1e999}', "session.big"),
        ('"platform_context": {"limit": -Infinity}', "platform_context.limit"),  # the body's, not data's
    ],
)
def test_a_number_that_is_not_finite_is_422_naming_it_and_the_conversation_goes_on(
    start_server, route, raw, field
):
    agent = Agent(runtime=FakeRuntime([reply("Hello."), reply("Still here.")]))
    client = start_server(agent)
    first = client.post("/api/chat", json={"messages": [user("hi")]}).json()
    conversation_id = first["data"]["conversation_id"]
    version = client.get(f"/api/conversations/{conversation_id}").json()["version"]

    data = f'"conversation_id": "{conversation_id}"'
    on_body = raw.startswith('"platform_context"')
    message = (
        '{"role": "user", "content": "again", "data": {' + (data if on_body else f"{data}, {raw}") + "}}"
    )
    body = '{"messages": [' + message + "]" + (f", {raw}" if on_body else "") + "}"
    refused = client.post(route, content=body, headers={"content-type": "application/json"})

    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_request", field)
    assert "not finite" in error["message"]
    assert client.get(f"/api/conversations/{conversation_id}").json()["version"] == version
    later = client.post("/api/chat", json={"messages": [user("again", conversation_id=conversation_id)]})
    assert later.status_code == 200
    assert later.json()["content"] == "Still here."
