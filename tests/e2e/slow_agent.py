"""An agent for tests that kill a server while an approved tool runs.

Its model is the scripted OpenAI-compatible server at ``DCAF_TEST_OPENAI_URL``. ``restart_deployment``
(approval required) appends a line to the file ``DCAF_TEST_LEDGER`` when it starts, then takes a minute.
Leases last ``DCAF_TEST_LEASE`` seconds, so a killed worker's claim runs out soon.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dcaf_like import Agent, tool
from dcaf_like.runtimes.openai_chat import OpenAIRuntime


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    @tool
    def restart_deployment(name: str) -> str:
        """Restart a deployment and wait for it to be ready."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} started {name}\n")
        time.sleep(60)
        return f"deployment {name} restarted"

    runtime = OpenAIRuntime("test-model", base_url=os.environ["DCAF_TEST_OPENAI_URL"], max_retries=0)
    lease = float(os.environ["DCAF_TEST_LEASE"])
    return Agent(tools=[restart_deployment], runtime=runtime, name="ops", lease_ttl=lease)
