"""How a tool's run ended, said once (issue 35; docs/operations.md, "Logs" and "Metrics"): the metric's
``outcome`` label is ``ok``, ``error``, ``timeout``, ``cancelled`` or ``interrupted`` (a tool that ran
past its limit is not ``ok``), and each but ``ok`` logs one WARNING line naming the tool, the call, the
conversation, the worker, the error's class and the duration, never an argument or an error's text."""

from __future__ import annotations

import asyncio
import logging

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")

from prometheus_client import REGISTRY

from dcaf_like import Agent, tool
from dcaf_like.telemetry.prometheus import MetricsTracer
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

SECRET_ARGUMENT = "s3cr3t-volume-name"


def executions(tool_name: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value("dcaf_tool_executions_total", {"tool": tool_name, "outcome": outcome})
    return value or 0.0


def run_once(tool_function, *, timeout: float | None = None) -> None:
    name = tool_function.__name__
    made = tool(requires_approval=False, timeout=timeout)(tool_function)
    runtime = FakeRuntime([tool_calls(tool_call(name, volume=SECRET_ARGUMENT)), reply("Done.")])
    agent = Agent(tools=[made], runtime=runtime)
    agent = agent.configured(tracer=MetricsTracer)
    asyncio.run(agent.arun("go"))


def test_a_failing_tool_counts_as_error_and_logs_one_warning_without_its_arguments(caplog):
    def snapshot_failing(volume: str) -> str:
        """Snapshot a volume."""
        raise RuntimeError(f"no such volume {volume}")

    before = executions("snapshot_failing", "error")
    with caplog.at_level(logging.WARNING, logger="dcaf_like"):
        run_once(snapshot_failing)

    assert executions("snapshot_failing", "error") == before + 1
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tool snapshot_failing")]
    assert line.startswith("tool snapshot_failing error (call=")
    assert "error=RuntimeError" in line
    assert "conversation=conv_" in line
    assert "worker=" in line
    assert SECRET_ARGUMENT not in line


def test_a_tool_past_its_time_limit_counts_as_timeout_not_ok(caplog):
    async def snapshot_slow(volume: str) -> str:
        """Snapshot a volume, slowly."""
        await asyncio.Event().wait()
        return "never"

    before_timeout, before_ok = executions("snapshot_slow", "timeout"), executions("snapshot_slow", "ok")
    with caplog.at_level(logging.WARNING, logger="dcaf_like"):
        run_once(snapshot_slow, timeout=0.01)

    assert executions("snapshot_slow", "timeout") == before_timeout + 1
    assert executions("snapshot_slow", "ok") == before_ok
    assert any(r.getMessage().startswith("tool snapshot_slow timeout (") for r in caplog.records)


def test_a_quick_tool_counts_as_ok_and_logs_nothing(caplog):
    def snapshot_quick(volume: str) -> str:
        """Snapshot a volume at once."""
        return "done"

    before = executions("snapshot_quick", "ok")
    with caplog.at_level(logging.WARNING, logger="dcaf_like"):
        run_once(snapshot_quick)

    assert executions("snapshot_quick", "ok") == before + 1
    assert not [r for r in caplog.records if r.getMessage().startswith("tool snapshot_quick")]


def turns(outcome: str) -> float:
    return REGISTRY.get_sample_value("dcaf_turns_total", {"outcome": outcome}) or 0.0


def test_a_turn_a_shutdown_stops_counts_its_tool_and_itself_as_interrupted_not_completed(caplog):
    """A server past its shutdown grace cancels the turn's task (docs/deployment.md): neither the
    tool nor the turn ended well, and the metrics say so."""
    started = asyncio.Event()

    @tool(requires_approval=False)
    async def snapshot_stopped(volume: str) -> str:
        """Snapshot a volume, a minute."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    runtime = FakeRuntime([tool_calls(tool_call("snapshot_stopped", volume=SECRET_ARGUMENT)), reply("Done.")])
    agent = Agent(tools=[snapshot_stopped], runtime=runtime)
    agent = agent.configured(tracer=MetricsTracer)
    before = turns("interrupted"), turns("completed"), executions("snapshot_stopped", "interrupted")

    async def main() -> None:
        turn = asyncio.ensure_future(agent.arun("go"))
        await started.wait()
        turn.cancel()  # as Runs.stop does past the grace period
        with pytest.raises(asyncio.CancelledError):
            await turn

    with caplog.at_level(logging.WARNING, logger="dcaf_like"):
        asyncio.run(main())

    after = turns("interrupted"), turns("completed"), executions("snapshot_stopped", "interrupted")
    assert after == (before[0] + 1, before[1], before[2] + 1)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tool snapshot_stopped")]
    assert line.startswith("tool snapshot_stopped interrupted (call=")
