"""An agent whose tools end every way a tool can, for the tests of what metrics and logs say: a
``def`` that fails (``check_disk``), an ``async def`` past its time limit (``probe_endpoint``), one that
runs until it is stopped (``snapshot_volume``: writes ``started <volume>`` to ``DCAF_TEST_LEDGER``) and
one that needs approval and works (``restart_service``). Its model is the scripted OpenAI-compatible
server at ``DCAF_TEST_OPENAI_URL``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from dcaf_like import Agent, tool
from dcaf_like.runtimes.openai_chat import OpenAIRuntime


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    @tool(requires_approval=False)
    def check_disk(host: str) -> str:
        """Check a host's disks."""
        raise RuntimeError(f"no route to {host}")

    @tool(requires_approval=False, timeout=0.5)
    async def probe_endpoint(url: str) -> str:
        """Probe an endpoint (it never answers)."""
        await asyncio.sleep(60)
        return f"{url} answered"

    @tool(requires_approval=False)
    async def snapshot_volume(volume: str) -> str:
        """Snapshot a volume, a minute."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"started {volume}\n")
        await asyncio.sleep(60)
        return f"snapshot of {volume} completed"

    @tool
    def restart_service(name: str) -> str:
        """Restart a service."""
        return f"{name} restarted"

    runtime = OpenAIRuntime("test-model", base_url=os.environ["DCAF_TEST_OPENAI_URL"], max_retries=0)
    tools = [check_disk, probe_endpoint, snapshot_volume, restart_service]
    return Agent(tools=tools, runtime=runtime, name="ops")
