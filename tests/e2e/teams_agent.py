"""An agent for approvals by teams over several worker processes: "delete pod NAME" proposes
``delete_pod(name=NAME, namespace="prod")``, which needs two approvers from ``sre`` (the keys'
``approve:sre`` scope, or the group's names: alice, bob, and carol, who asks, so she is kept out as the
requester and not as an outsider); dave is in ``dev``. Each execution appends ``NAME`` to the file
``DCAF_TEST_LEDGER``. "which worker" runs ``worker()`` at once and answers ``Done: PID``: the worker
process that served the request."""

from __future__ import annotations

import os
from pathlib import Path

from dcaf_like import (
    Agent,
    ApprovalPolicy,
    ModelRequest,
    ToolResult,
    approvers,
    argument_in,
    require_approval,
    tool,
)
from dcaf_like.testing import RulesRuntime, tool_call


def answer(request: ModelRequest) -> object:
    last = request.messages[-1]
    if isinstance(last, ToolResult):
        return f"Done: {last.content}"
    words = getattr(last, "text", "").split()
    if words[:2] == ["delete", "pod"] and len(words) == 3:
        return tool_call("delete_pod", name=words[2], namespace="prod")
    if words == ["which", "worker"]:
        return tool_call("worker")
    return "Nothing to do."


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    @tool(editable=True)
    def delete_pod(name: str, namespace: str = "default") -> str:
        """Delete a pod."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{name}\n")
        return f'pod "{name}" deleted in {namespace}'

    @tool(requires_approval=False)
    def worker() -> str:
        """The worker process serving this request."""
        return str(os.getpid())

    two_sres = require_approval(
        "prod needs two SREs", when=argument_in("namespace", "prod"), approvers=approvers(2, "sre")
    )
    return Agent(
        tools=[delete_pod, worker],
        runtime=RulesRuntime(answer),  # type: ignore[arg-type]
        approval_policy=ApprovalPolicy([two_sres]),
        groups={"sre": {"alice", "bob", "carol"}, "dev": {"dave"}},
        name="ops",
    )
