"""An agent for tests over several worker processes, on the test kit's RulesRuntime: "delete pod NAME"
proposes ``delete_pod`` (approval required); after its result the model reports it. Each execution
appends ``NAME`` to the file ``DCAF_TEST_LEDGER``."""

from __future__ import annotations

import os
from pathlib import Path

from dcaf_like import Agent, ModelRequest, ToolResult, tool
from dcaf_like.testing import RulesRuntime, tool_call


def answer(request: ModelRequest) -> object:
    last = request.messages[-1]
    if isinstance(last, ToolResult):
        return f"Done: {last.content}"
    words = getattr(last, "text", "").split()
    if words[:2] == ["delete", "pod"] and len(words) == 3:
        return tool_call("delete_pod", name=words[2])
    return "Nothing to do."


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{name}\n")
        return f'pod "{name}" deleted'

    return Agent(tools=[delete_pod], runtime=RulesRuntime(answer), name="ops")  # type: ignore[arg-type]
