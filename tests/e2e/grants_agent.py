"""An agent for standing grants over several worker processes: "restart NAME NAMESPACE" proposes
``restart_pod`` (reversible), "delete NAME NAMESPACE" ``delete_pod`` (irreversible); the namespace
``frozen`` is denied by the policy. Each execution appends ``VERB NAMESPACE/NAME`` to the file
``DCAF_TEST_LEDGER``."""

from __future__ import annotations

import os
from pathlib import Path

from dcaf_like import Agent, ApprovalPolicy, ModelRequest, ToolResult, argument_in, deny, tool
from dcaf_like.testing import RulesRuntime, tool_call


def answer(request: ModelRequest) -> object:
    last = request.messages[-1]
    if isinstance(last, ToolResult):
        return f"Done: {last.content}"
    words = getattr(last, "text", "").split()
    if len(words) == 3 and words[0] in ("restart", "delete"):
        return tool_call(f"{words[0]}_pod", name=words[1], namespace=words[2])
    return "Nothing to do."


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    def done(line: str) -> None:
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{line}\n")

    @tool(risk="reversible")
    def restart_pod(name: str, namespace: str) -> str:
        """Restart a pod."""
        done(f"restart {namespace}/{name}")
        return f"restarted {name}"

    @tool(risk="irreversible")
    def delete_pod(name: str, namespace: str) -> str:
        """Delete a pod."""
        done(f"delete {namespace}/{name}")
        return f"deleted {name}"

    return Agent(
        tools=[restart_pod, delete_pod],
        runtime=RulesRuntime(answer),  # type: ignore[arg-type]
        approval_policy=ApprovalPolicy([deny("frozen", when=argument_in("namespace", "frozen"))]),
        name="ops",
    )
