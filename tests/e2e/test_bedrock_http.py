"""An Agent on BedrockRuntime (real boto3, the local Converse server) served over HTTP: the approval
round trip, streamed through ConverseStream's event-stream framing."""

from __future__ import annotations

import json

import pytest
from _helpdesk import approve, user

from dcaf_like import Agent
from dcaf_like.runtimes.bedrock import BedrockRuntime
from dcaf_like.testing import BedrockConverseServer

pytest.importorskip("boto3", reason="the bedrock extra is not installed: pip install -e '.[bedrock]'")


def test_an_approval_round_trip_streams_over_http(cluster, start_server):
    with BedrockConverseServer() as server:
        client = server.client()
        agent = Agent(tools=cluster.tools(), runtime=BedrockRuntime("amazon.nova-lite-v1:0", client=client))
        http = start_server(agent)
        server.call([("delete_pod", {"name": "web-2"})], text="web-2 is crash-looping.")
        server.reply("Deleted web-2.", chunks=["Deleted ", "web-2."])

        with http.stream("POST", "/api/chat-stream", json={"messages": [user("fix web-2")]}) as stream:
            proposed = [json.loads(line) for line in stream.iter_lines() if line]
        done = proposed[-1]["message"]
        (pending,) = done["data"]["tool_calls"]
        decision = user(conversation_id=done["data"]["conversation_id"], tool_calls=[approve(pending)])
        with http.stream("POST", "/api/chat-stream", json={"messages": [decision]}) as stream:
            events = [json.loads(line) for line in stream.iter_lines() if line]

    assert [e["text"] for e in proposed if e["type"] == "text_delta"] == ["web-2 is crash-looping."]
    assert cluster.deleted == [("default", "web-2")]
    assert [e["text"] for e in events if e["type"] == "text_delta"] == ["Deleted ", "web-2."]
    assert events[-1]["type"] == "done"
