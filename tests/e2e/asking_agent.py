"""An agent for tests of questions across real server processes.

Its runtime answers from the request alone (no script position to lose when a process dies): "scale
NAME to zero" proposes ``scale`` (no approval needed), which asks the user to confirm before it acts;
after a tool result it reports it. Every run of ``scale`` past its question appends a line to the
ledger file named by ``DCAF_TEST_LEDGER``, so a test counts executions across processes.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from dcaf_like import (
    Agent,
    AgentRuntime,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ToolContext,
    ToolResult,
    tool,
)

_SCALE = re.compile(r"scale (?P<name>[\w.-]+) to zero")


class RuleRuntime(AgentRuntime):
    name = "rules"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            return ModelResponse(text=f"Done: {last.content}")
        match = _SCALE.search(getattr(last, "text", ""))
        if match is None:
            return ModelResponse(text="Nothing to do.")
        call = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "scale", {"name": match["name"]})
        return ModelResponse(text="", tool_calls=(call,), stop_reason="tool_use")


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    @tool(requires_approval=False)
    def scale(name: str, context: ToolContext) -> str:
        """Scale a deployment to zero, once the user confirmed it."""
        if not context.ask(f"Scale {name} to zero?", kind="confirmation"):
            return f"{name} left as it is"
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} {name}\n")
        return f"{name} scaled to zero"

    return Agent(tools=[scale], name="ops", runtime=RuleRuntime())
