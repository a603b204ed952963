"""Which runtime answered, over HTTP: in the response's meta, the stream's done event, the stored
message and the model-call metrics."""

from __future__ import annotations

import json

import pytest
from _helpdesk import user

from dcaf_like import Agent, FallbackRuntime, ModelRateLimited
from dcaf_like.testing import FakeRuntime, fail

parser = pytest.importorskip("prometheus_client.parser", reason="the metrics extra is not installed")


def named(name: str, script: list) -> FakeRuntime:
    runtime = FakeRuntime(script)
    runtime.name = name
    return runtime


def model_calls(client, runtime: str) -> float:
    text = client.get("/metrics").text
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dcaf_model_calls_total" and sample.labels == {
                "runtime": runtime,
                "outcome": "ok",
            }:
                return sample.value
    return 0.0


def test_the_runtime_that_answered_is_in_the_meta_the_done_event_the_stored_message_and_the_metrics(
    start_server,
):
    throttled = [fail(ModelRateLimited("throttled", runtime="primary-e2e"))] * 2
    runtime = FallbackRuntime([named("primary-e2e", throttled), named("backup-e2e", ["first", "second"])])
    client = start_server(Agent(runtime=runtime), metrics=True)
    before = model_calls(client, "backup-e2e")

    answered = client.post("/api/chat", json={"messages": [user("hi")]}).json()
    conversation_id = answered["data"]["conversation_id"]
    body = {"messages": [user("again", conversation_id=conversation_id)]}
    with client.stream("POST", "/api/chat-stream", json=body) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]
    stored = client.get(f"/api/conversations/{conversation_id}").json()

    assert answered["meta"]["runtime"] == "fallback(primary-e2e, backup-e2e)"
    assert answered["meta"]["answered_by"] == "backup-e2e"
    assert events[-1]["type"] == "done"
    assert events[-1]["message"]["meta"]["answered_by"] == "backup-e2e"
    assert [(m["role"], m["runtime"]) for m in stored["messages"]] == [
        ("user", None), ("assistant", "backup-e2e"), ("user", None), ("assistant", "backup-e2e")
    ]  # fmt: skip
    assert model_calls(client, "backup-e2e") - before == 2
    assert model_calls(client, "fallback(primary-e2e, backup-e2e)") == 0
