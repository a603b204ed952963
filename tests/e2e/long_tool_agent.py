"""An agent for tests that stop a long tool: ``snapshot_volume`` (no approval) is an ``async def`` that
writes ``started <volume>`` to the file ``DCAF_TEST_LEDGER``, then takes a minute, then writes
``finished <volume>``; ``snapshot_volume_blocking`` is the same as a plain ``def`` that never looks at
a cancel, ``copy_volume_in_steps`` a plain ``def`` that looks between its steps, and ``drain_node``
one that reports progress, waits for a cancel, then until the file ``<ledger>.release`` exists (so a
test can look at "stopping" as long as it needs), then stops. Its model is the scripted
OpenAI-compatible server at ``DCAF_TEST_OPENAI_URL``."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from dcaf_like import Agent, ToolContext, tool
from dcaf_like.runtimes.openai_chat import OpenAIRuntime


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    def write(line: str) -> None:
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{line}\n")

    @tool(requires_approval=False)
    async def snapshot_volume(volume: str) -> str:
        """Snapshot an EBS volume and wait until the snapshot completes."""
        write(f"started {volume}")
        await asyncio.sleep(60)
        write(f"finished {volume}")
        return f"snapshot of {volume} completed"

    @tool(requires_approval=False)
    def snapshot_volume_blocking(volume: str) -> str:
        """The same as a plain def tool (boto3 waits this way)."""
        write(f"started {volume}")
        time.sleep(60)
        write(f"finished {volume}")
        return f"snapshot of {volume} completed"

    @tool(requires_approval=False)
    def copy_volume_in_steps(volume: str, context: ToolContext) -> str:
        """Copy a volume block by block, a minute in all (docs/runs.md, "Stopping a running tool")."""
        write(f"started {volume}")
        for block in range(600):
            context.check_cancelled()  # a human's Stop ends the copy here
            time.sleep(0.1)
            write(f"copied block {block}")
        write(f"finished {volume}")
        return f"copy of {volume} completed"

    @tool(requires_approval=False)
    def drain_node(node: str, context: ToolContext) -> str:
        """Evict every pod of a node."""
        write(f"started {node}")
        context.progress("evicting pods", fraction=0.2)
        release = ledger.with_suffix(".release")
        for _ in range(1200):  # a minute at most
            if context.cancelled and release.exists():
                break
            time.sleep(0.05)
        context.check_cancelled()
        write(f"finished {node}")
        return f"{node} drained"

    runtime = OpenAIRuntime("test-model", base_url=os.environ["DCAF_TEST_OPENAI_URL"], max_retries=0)
    return Agent(
        tools=[snapshot_volume, snapshot_volume_blocking, copy_volume_in_steps, drain_node],
        runtime=runtime,
        name="ops",
    )
