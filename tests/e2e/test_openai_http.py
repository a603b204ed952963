"""An Agent on OpenAIRuntime (the real openai SDK, the local OpenAI-compatible server), served over HTTP."""

from __future__ import annotations

import json

import pytest
from _helpdesk import approve, user

from dcaf_like import Agent
from dcaf_like.runtimes.openai_chat import OpenAIRuntime
from dcaf_like.testing import OpenAICompatibleServer

pytest.importorskip("openai", reason="the openai extra is not installed: pip install -e '.[openai]'")


def test_an_approval_round_trip_over_http(cluster, start_server):
    server = OpenAICompatibleServer().start()
    runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=0)
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    client = start_server(agent)
    server.call([("delete_pod", {"name": "web-2"})], text="web-2 is crash-looping.")
    server.reply("Deleted web-2.", chunks=["Deleted ", "web-2."])

    proposed = client.post("/api/chat", json={"messages": [user("fix web-2")]}).json()
    (pending,) = proposed["data"]["tool_calls"]
    decision = user(conversation_id=proposed["data"]["conversation_id"], tool_calls=[approve(pending)])
    with client.stream("POST", "/api/chat-stream", json={"messages": [decision]}) as stream:
        lines = [line for line in stream.iter_lines() if line]

    assert proposed["content"] == "web-2 is crash-looping."
    assert cluster.deleted == [("default", "web-2")]
    events = [json.loads(line) for line in lines]
    deltas = [e["text"] for e in events if e["type"] == "text_delta"]
    assert deltas == ["Deleted ", "web-2."]
    assert events[-1]["type"] == "done"
    tool_message = next(m for m in server.requests[-1]["messages"] if m["role"] == "tool")
    assert tool_message["content"] == 'pod "web-2" deleted'
    server.stop()


@pytest.mark.parametrize("route", ["/api/chat", "/api/chat-stream"])
def test_a_model_that_answers_nothing_is_a_model_error_on_every_route(start_server, route):
    """Issue 34: an empty 200 was a 502 on /api/chat but an empty successful answer on the stream."""
    with OpenAICompatibleServer() as server:
        agent = Agent(runtime=OpenAIRuntime("test-model", base_url=server.base_url, max_retries=0))
        client = start_server(agent)
        server.answer_nothing()

        response = client.post(route, json={"messages": [user("which pods run?")]})

    if route == "/api/chat":
        assert response.status_code == 502, response.text
        error = response.json()["error"]
    else:
        events = [json.loads(line) for line in response.text.splitlines() if line]
        assert events[-1]["type"] == "error", events
        error = events[-1]["error"]
    assert error["code"] == "model_error"
