"""OpenTelemetry spans for a turn, each model call, each tool and each decision (SDK in-memory exporter)."""

from __future__ import annotations

import pytest

from dcaf_like import Agent, ModelRateLimited, tool
from dcaf_like.testing import FakeRuntime, fail, tool_call, tool_calls

sdk = pytest.importorskip(
    "opentelemetry.sdk.trace", reason="opentelemetry-sdk is a dev dependency: make install"
)
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from dcaf_like.telemetry.otel import OpenTelemetryTracer  # noqa: E402


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, OpenTelemetryTracer(provider)


def by_name(finished, name):
    return [s for s in finished if s.name == name]


def test_a_turn_its_model_calls_tools_and_decisions_are_spans_under_it(spans, cluster):
    exporter, tracer = spans

    @tool(requires_approval=False)
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("disk full")

    runtime = FakeRuntime(
        [tool_calls("list_pods", "broken"), tool_call("delete_pod", name="web-2"), "Deleted web-2."]
    )
    agent = Agent(tools=[*cluster.tools(), broken], runtime=runtime, tracer=tracer, name="ops")
    secret = "s3cr3t-token-value"

    first = agent.run("clean up", platform_context={"api_token": secret})
    agent.approve(first.conversation_id, first.pending_tool_calls[0].id, user="alice")

    finished = exporter.get_finished_spans()
    turns = by_name(finished, "dcaf.turn")
    assert len(turns) == 2
    assert all(t.attributes["dcaf.conversation_id"] == first.conversation_id for t in turns)
    assert turns[0].attributes["dcaf.pending_approvals"] == 1
    assert turns[0].attributes["dcaf.agent"] == "ops"
    models = by_name(finished, "dcaf.model")
    assert len(models) == 3
    assert models[0].attributes["dcaf.tool_calls"] == 2
    tools = {s.attributes["dcaf.tool"]: s for s in by_name(finished, "dcaf.tool")}
    assert set(tools) == {"list_pods", "broken", "delete_pod"}
    assert tools["broken"].status.status_code.name == "ERROR"
    assert "disk full" in tools["broken"].status.description
    assert tools["list_pods"].status.status_code.name == "UNSET"
    [decision] = by_name(finished, "dcaf.decision")
    assert decision.attributes["dcaf.decision"] == "approve"
    assert decision.attributes["dcaf.decided_by"] == "alice"
    assert decision.attributes["dcaf.tool"] == "delete_pod"
    turn_ids = {t.context.span_id for t in turns}
    for child in [*models, *tools.values(), decision]:
        assert child.parent is not None
        assert child.parent.span_id in turn_ids
    assert all(secret not in str(dict(s.attributes or {})) for s in finished)


def test_a_failed_model_call_and_a_refused_decision_mark_their_spans(spans, cluster):
    exporter, tracer = spans
    runtime = FakeRuntime([fail(ModelRateLimited("slow down", runtime="fake"))])
    agent = Agent(tools=cluster.tools(), runtime=runtime, tracer=tracer)

    with pytest.raises(ModelRateLimited):
        agent.run("hi")
    with pytest.raises(Exception, match="tc_never"):
        agent.approve("conv-none", "tc_never")

    finished = exporter.get_finished_spans()
    [model] = by_name(finished, "dcaf.model")
    assert model.status.status_code.name == "ERROR"
    assert all(t.status.status_code.name == "ERROR" for t in by_name(finished, "dcaf.turn"))
    [decision] = by_name(finished, "dcaf.decision")
    assert decision.status.status_code.name == "ERROR"


async def test_async_turns_are_traced_too(spans, cluster):
    exporter, tracer = spans
    agent = Agent(tools=cluster.tools(), runtime=FakeRuntime(["hello"]), tracer=tracer)

    await agent.arun("hi")

    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["dcaf.model", "dcaf.turn"]


def test_without_a_configured_sdk_the_default_tracer_builds_no_spans():
    # In a fresh interpreter: no test's tracer provider is set there, as none is in a user's process.
    import subprocess
    import sys

    code = (
        "from dcaf_like.telemetry.otel import OpenTelemetryTracer\n"
        "from dcaf_like.application.tracing import NO_SPAN\n"
        "print(OpenTelemetryTracer().start('dcaf.turn', {}) is NO_SPAN)\n"
    )

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert result.stdout.strip() == "True"
