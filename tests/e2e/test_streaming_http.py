"""``/api/chat-stream``: NDJSON events in the order things happen, each on the wire as it exists."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from _helpdesk import approve, user

from dcaf_like import Agent, AgentRuntime, ModelCompleted, ModelRequest, ModelResponse, TextDelta
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


def stream(client: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with client.stream("POST", "/api/chat-stream", json={"messages": messages}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        assert response.headers["x-accel-buffering"] == "no"
        return [json.loads(line) for line in response.iter_lines() if line]


def unstamped(event: dict[str, Any]) -> dict[str, Any]:
    """An event without the order every line carries (``seq``, ``ts``)."""
    return {k: v for k, v in event.items() if k not in ("seq", "ts")}


def test_a_run_starts_with_run_started_and_numbers_and_times_every_line(start_server, cluster):
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("list_pods"), text="Looking."),
            reply("Three pods.", chunks=["Three ", "pods."]),
            reply("Still three."),
        ]
    )
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))

    events = stream(client, [user("list the pods")])
    again = stream(client, [user("and now?", conversation_id=events[-1]["conversation_id"])])

    for run in (events, again):
        assert run[0]["type"] == "run_started"
        assert run[0]["conversation_id"] == run[-1]["conversation_id"]
        assert [e["seq"] for e in run] == list(range(len(run)))  # from 0, no gap: each run its own
        times = [datetime.fromisoformat(e["ts"]) for e in run]
        assert all(t.tzinfo is not None and t.utcoffset() == timedelta(0) for t in times)
        assert times == sorted(times)
        assert abs(times[0] - datetime.now(UTC)) < timedelta(minutes=5)
    assert run[-1]["type"] == "done"


def test_a_proposal_streams_text_then_the_calls_that_wait_then_done(start_server, cluster):
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("list_pods"), tool_call("delete_pod", name="web-2"), text="Looking."),
        ]
    )
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))

    events = stream(client, [user("clean up default")])

    types = [e["type"] for e in events]
    assert types == [
        "run_started",
        "text_delta",
        "tool_call_proposed",
        "tool_call_proposed",
        "tool_started",
        "tool_finished",
        "executed_tool_calls",
        "approval_required",
        "tool_calls",
        "done",
    ]
    assert events[1]["text"] == "Looking."
    assert events[6]["executed_tool_calls"][0]["name"] == "list_pods"
    [waiting] = events[8]["tool_calls"]
    assert waiting == {**waiting, "name": "delete_pod", "execute": False}
    assert events[-1]["message"]["data"]["tool_calls"] == events[8]["tool_calls"]
    assert cluster.deleted == []


def test_an_approval_streams_the_execution_then_the_answer_in_chunks(start_server, cluster):
    runtime = FakeRuntime(
        [tool_call("delete_pod", name="web-2"), reply("Deleted web-2.", chunks=["Deleted ", "web-2."])]
    )
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    done = stream(client, [user("delete web-2")])[-1]
    [pending] = done["message"]["data"]["tool_calls"]

    decision = user("", tool_calls=[approve(pending)], conversation_id=done["conversation_id"])
    events = stream(client, [decision])

    types = [e["type"] for e in events]
    assert types == [
        "run_started",
        "tool_started",
        "tool_finished",
        "executed_tool_calls",
        "text_delta",
        "text_delta",
        "done",
    ]
    assert events[3]["executed_tool_calls"][0]["output"] == 'pod "web-2" deleted'
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == "Deleted web-2."
    assert events[-1]["message"]["content"] == "Deleted web-2."


class GatedRuntime(AgentRuntime):
    """Streams one delta, then waits until the test has seen it before finishing."""

    name = "gated"

    def __init__(self) -> None:
        self.seen = threading.Event()
        self.waited_in_vain = False

    def invoke(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("the stream endpoint must stream")

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        yield TextDelta("first ")
        self.waited_in_vain = not self.seen.wait(timeout=10)
        yield TextDelta("second")
        yield ModelCompleted(ModelResponse(text="first second"))


def test_each_event_reaches_the_client_before_the_next_exists(start_server):
    runtime = GatedRuntime()
    client = start_server(Agent(runtime=runtime))
    received = []

    with client.stream("POST", "/api/chat-stream", json={"messages": [user("hi")]}) as response:
        for line in response.iter_lines():
            if not line:
                continue
            event = json.loads(line)
            received.append(event)
            if event.get("text") == "first ":
                runtime.seen.set()

    assert not runtime.waited_in_vain, "the first delta was held back until the run went on"
    assert [e["type"] for e in received] == ["run_started", "text_delta", "text_delta", "done"]


def test_reasoning_streams_as_its_own_event(start_server):
    runtime = FakeRuntime([reply("42", reasoning="six times seven")])
    client = start_server(Agent(runtime=runtime))

    events = stream(client, [user("answer?")])

    assert unstamped(events[1]) == {"type": "reasoning_delta", "text": "six times seven"}
    assert unstamped(events[2]) == {"type": "text_delta", "text": "42"}
