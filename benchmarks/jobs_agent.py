"""The agent of benchmarks/jobs.py: ``drain_node`` sleeps ``DCAF_BENCH_TOOL_SECONDS`` (a long tool),
on the job engine named by ``DCAF_BENCH_BROKER_URL`` and ``DCAF_BENCH_QUEUE`` when ``background``,
else in process. Its model proposes one drain per message, then answers."""

from __future__ import annotations

import os
import time

from dcaf_like import Agent, ModelRequest, ModelResponse, ModelToolCall, ToolResult, tool
from dcaf_like.application.ports import AgentRuntime


class Draining(AgentRuntime):
    """Proposes ``drain_node`` for the node named last in the message; answers once it ran."""

    name = "draining"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            return ModelResponse(text="drained")
        node = getattr(last, "text", "n0").split()[-1]
        return ModelResponse(tool_calls=(ModelToolCall(f"call-{node}", "drain_node", {"node": node}),))


def make_agent(background: bool = True) -> Agent:
    seconds = float(os.environ.get("DCAF_BENCH_TOOL_SECONDS", "1"))

    @tool(background=background)
    def drain_node(node: str) -> str:
        """Evict every pod of a node."""
        time.sleep(seconds)
        return f"{node} drained"

    executor = None
    if background:
        from dcaf_like.jobs.celery import CeleryExecutor

        broker = os.environ.get("DCAF_BENCH_BROKER_URL", "redis://127.0.0.1:6379/13")
        executor = CeleryExecutor(broker, queue=os.environ.get("DCAF_BENCH_QUEUE", "dcaf-bench"))
    return Agent(tools=[drain_node], runtime=Draining(), name="ops", executor=executor)
