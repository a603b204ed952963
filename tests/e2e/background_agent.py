"""An agent whose `drain_node` runs on a Celery worker (docs/runs.md, "Tools on a job engine").

The broker and result backend are ``DCAF_TEST_BROKER_URL``, the queue ``DCAF_TEST_QUEUE``. ``drain_node``
appends a line to the file ``DCAF_TEST_LEDGER`` when it starts, reports its progress, then waits for
the file ``DCAF_TEST_RELEASE`` (a node that takes as long as the test wants), and appends a line when
it ends, or when it stops on a cancel (it looks while it waits). Leases last
``DCAF_TEST_LEASE`` seconds. The model is the scripted OpenAI-compatible server at
``DCAF_TEST_OPENAI_URL`` when it is set (API servers the test restarts), else a ``FakeRuntime``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dcaf_like import Agent, AgentRuntime, ToolContext, tool
from dcaf_like.jobs.celery import CeleryExecutor
from dcaf_like.runtimes.openai_chat import OpenAIRuntime
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])
    release = Path(os.environ["DCAF_TEST_RELEASE"])

    @tool(background=True)
    def drain_node(node: str, context: ToolContext) -> str:
        """Evict every pod of a node."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} started {node}\n")
        context.progress(f"evicting the pods of {node}", fraction=0.5)
        while not release.exists():  # the test says when the drain is over
            if context.cancelled:
                with ledger.open("a", encoding="utf-8") as out:
                    out.write(f"{os.getpid()} stopped {node}\n")
                context.check_cancelled()
            time.sleep(0.05)
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} finished {node}\n")
        return f"{node} drained"

    broker = os.environ["DCAF_TEST_BROKER_URL"]
    executor = CeleryExecutor(broker, backend=broker, queue=os.environ["DCAF_TEST_QUEUE"])
    script = [
        tool_calls(tool_call("drain_node", node="n1")),
        reply("n1 is drained."),
        tool_calls(tool_call("drain_node", node="n2")),
        reply("n2 is drained."),
    ]
    lease = float(os.environ["DCAF_TEST_LEASE"])
    runtime: AgentRuntime = FakeRuntime(script)
    if url := os.environ.get("DCAF_TEST_OPENAI_URL"):
        runtime = OpenAIRuntime("test-model", base_url=url, max_retries=0)
    return Agent(tools=[drain_node], runtime=runtime, name="ops", executor=executor, lease_ttl=lease)
