"""docs/protocol.md, "Resuming a stream": a client whose stream dropped reads the rest of the run from
``GET /api/conversations/{id}/events?after=N``, each line once, on a live server."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
from _helpdesk import user

from dcaf_like import Agent, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"


def gated_agent(*more: Any) -> tuple[Agent, threading.Event]:
    """An agent whose one tool (no approval needed) waits until the test lets it finish."""
    gate = threading.Event()

    @tool(requires_approval=False)
    def check_web() -> str:
        """Check the web deployment."""
        if not gate.wait(timeout=20):
            raise RuntimeError("the test never opened the gate")
        return "web is healthy"

    runtime = FakeRuntime(
        [
            tool_calls(tool_call("check_web"), text="Checking."),
            reply("Web is healthy.", chunks=["Web is ", "healthy."]),
            *more,
        ]
    )
    return Agent(tools=[check_web], runtime=runtime), gate


def lines_of(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.iter_lines() if line]


def read_until_tool_started(
    client: httpx.Client, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Start a streamed run and drop its connection once its tool started: the lines seen until then."""
    seen: list[dict[str, Any]] = []
    body = {"messages": [user("is web healthy?")]}
    with client.stream("POST", "/api/chat-stream", json=body, headers=headers) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                seen.append(json.loads(line))
                if seen[-1]["type"] == "tool_started":
                    break  # the connection closes here, mid-run
    return seen


def test_resuming_a_stream_a_dropped_stream_resumed_after_its_last_seq_gets_the_rest_once(start_server):
    agent, gate = gated_agent()
    client = start_server(agent)

    seen = read_until_tool_started(client)
    started = seen[0]
    assert started["type"] == "run_started"
    conversation_id, last = started["conversation_id"], seen[-1]["seq"]
    gate.set()  # the run, which went on without its client, ends now
    with client.stream(
        "GET",
        f"/api/conversations/{conversation_id}/events",
        params={"after": last, "run": started["request_id"]},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        rest = lines_of(response)

    whole = seen + rest
    assert [line["seq"] for line in whole] == list(range(len(whole)))  # nothing twice, nothing missing
    assert [line["type"] for line in rest] == [
        "tool_finished",
        "executed_tool_calls",
        "text_delta",
        "text_delta",
        "done",
    ]
    assert rest[-1]["message"]["content"] == "Checking.\n\nWeb is healthy."


def test_resuming_a_stream_a_reader_that_comes_while_the_run_goes_on_follows_it_to_its_end(start_server):
    agent, gate = gated_agent()
    client = start_server(agent)
    seen = read_until_tool_started(client)
    conversation_id = seen[0]["conversation_id"]

    followed: list[dict[str, Any]] = []
    with client.stream(
        "GET", f"/api/conversations/{conversation_id}/events", params={"after": -1}
    ) as response:
        for line in response.iter_lines():
            if line:
                followed.append(json.loads(line))
                if followed[-1]["type"] == "tool_started":
                    gate.set()  # the run is still waiting on its tool while this reader reads

    assert [line["type"] for line in followed][: len(seen)] == [line["type"] for line in seen]
    assert [line["seq"] for line in followed] == list(range(len(followed)))
    assert followed[-1]["type"] == "done"


def test_resuming_a_stream_is_the_owners_alone_and_says_when_nothing_is_kept(start_server):
    agent, gate = gated_agent(reply("Hello."))
    client = start_server(agent, api_keys={ALICE: "alice", BOB: "bob"})
    gate.set()
    seen = read_until_tool_started(client, headers={"X-API-Key": ALICE})
    conversation_id = seen[0]["conversation_id"]
    path = f"/api/conversations/{conversation_id}/events"

    bobs = client.get(path, headers={"X-API-Key": BOB})
    assert bobs.status_code == 404
    assert bobs.json()["error"]["code"] == "conversation_not_found"

    another_run = client.get(path, params={"run": "not-this-run"}, headers={"X-API-Key": ALICE})
    assert another_run.status_code == 404
    assert another_run.json()["error"]["code"] == "run_events_not_kept"

    bad = client.get(path, params={"after": -2}, headers={"X-API-Key": ALICE})
    assert bad.status_code == 422

    plain = client.post("/api/chat", json={"messages": [user("hi")]}, headers={"X-API-Key": ALICE})
    never_streamed = f"/api/conversations/{plain.json()['data']['conversation_id']}/events"
    unkept = client.get(never_streamed, headers={"X-API-Key": ALICE})
    assert unkept.status_code == 404
    assert unkept.json()["error"]["code"] == "run_events_not_kept"
