"""docs/operations.md, "Metrics": `dcaf_jobs_total` counts the jobs of background tools a worker took,
by outcome; the tool a job ran counts in `dcaf_tool_executions_total` as any tool does."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")

from prometheus_client import REGISTRY

from dcaf_like import Agent, ToolDecision, ToolJob, tool
from dcaf_like.telemetry.prometheus import MetricsTracer
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


class KeptJobs:
    queue_ttl = 600.0

    def __init__(self) -> None:
        self.jobs: list[ToolJob] = []

    def submit(self, job: ToolJob) -> None:
        self.jobs.append(job)

    async def asubmit(self, job: ToolJob) -> None:
        self.jobs.append(job)


def jobs(outcome: str) -> float:
    return REGISTRY.get_sample_value("dcaf_jobs_total", {"outcome": outcome}) or 0.0


def executions(outcome: str) -> float:
    labels = {"tool": "rotate_certificates", "outcome": outcome}
    return REGISTRY.get_sample_value("dcaf_tool_executions_total", labels) or 0.0


@tool(background=True)
def rotate_certificates(cluster: str) -> str:
    """Rotate a cluster's certificates."""
    return f"{cluster} rotated"


def test_jobs_are_counted_by_outcome() -> None:
    model = FakeRuntime([tool_calls(tool_call("rotate_certificates", cluster="prod")), reply("Rotated.")])
    kept = KeptJobs()
    agent = Agent(tools=[rotate_certificates], runtime=model, executor=kept)
    agent = agent.configured(tracer=MetricsTracer)
    asked = agent.run("rotate prod")
    agent.decide(asked.conversation_id, [ToolDecision(asked.pending_tool_calls[0].id, True)])
    executed, refused, ok = jobs("executed"), jobs("refused"), executions("ok")

    agent.jobs.run(kept.jobs[0])
    agent.jobs.run(kept.jobs[0])  # delivered again: refused

    assert (jobs("executed"), jobs("refused")) == (executed + 1, refused + 1)
    assert executions("ok") == ok + 1
