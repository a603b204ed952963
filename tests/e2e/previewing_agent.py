"""An agent for tests of previews over real server processes.

"scale NAME to N" proposes ``scale``, whose preview shows the replicas before -> after, read from the
file named by ``DCAF_TEST_CLUSTER`` (one line ``NAME REPLICAS`` per deployment), and which runs only
if that preview still holds (``recheck=True``). A run appends a line to the file; so a test changes
the world between the approval and the run by writing to it.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from dcaf_like import Agent, AgentRuntime, ModelRequest, ModelResponse, ModelToolCall, ToolResult, tool

_SCALE = re.compile(r"scale (?P<name>[\w.-]+) to (?P<replicas>\d+)")


class RuleRuntime(AgentRuntime):
    name = "rules"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            return ModelResponse(text=f"Done: {last.content}")
        match = _SCALE.search(getattr(last, "text", ""))
        if match is None:
            return ModelResponse(text="Nothing to do.")
        arguments = {"name": match["name"], "replicas": int(match["replicas"])}
        call = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "scale", arguments)
        return ModelResponse(text="", tool_calls=(call,), stop_reason="tool_use")


def make_agent() -> Agent:
    cluster = Path(os.environ["DCAF_TEST_CLUSTER"])

    def replicas_of(name: str) -> int:
        found = [line.split()[1] for line in cluster.read_text().splitlines() if line.split()[0] == name]
        return int(found[-1]) if found else 0

    def show(name: str, replicas: int) -> str:
        now = replicas_of(name)
        return f"--- {name}\n+++ {name}\n@@ spec @@\n-replicas: {now}\n+replicas: {replicas}\n"

    @tool(preview=show, recheck=True, risk="reversible")
    def scale(name: str, replicas: int) -> str:
        """Scale a deployment."""
        with cluster.open("a", encoding="utf-8") as out:
            out.write(f"{name} {replicas}\n")
        return f"{name} scaled to {replicas}"

    return Agent(tools=[scale], name="ops", runtime=RuleRuntime())
