"""An agent for tests that run several real server processes on one store.

Its runtime is a test double that answers from the request alone (no script position to lose when a
process dies): "delete pod NAME in NAMESPACE" proposes ``delete_pod``; after tool results it reports
them. Every execution of ``delete_pod`` appends a line to the ledger file named by
``DCAF_TEST_LEDGER``, so a test counts executions across processes. "rotate the password of USER" proposes
``rotate_password`` with a password the model makes up, an argument marked secret; the ledger records it.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from dcaf_like import Agent, AgentRuntime, ModelRequest, ModelResponse, ModelToolCall, ToolResult, tool

_ROTATE = re.compile(r"rotate the password of (?P<user>[\w.-]+)")
_DELETE = re.compile(r"delete (?:the )?pod (?P<name>[\w.-]+)(?: in (?:namespace )?(?P<ns>[\w-]+))?")


class RuleRuntime(AgentRuntime):
    name = "rules"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            results = [m.content for m in request.messages if isinstance(m, ToolResult)]
            return ModelResponse(text=f"Done: {results[-1]}")
        if rotate := _ROTATE.search(getattr(last, "text", "")):
            arguments = {"user": rotate["user"], "new_password": f"pw-{uuid.uuid4().hex}"}
            call = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "rotate_password", arguments)
            return ModelResponse(text="", tool_calls=(call,), stop_reason="tool_use")
        match = _DELETE.search(getattr(last, "text", ""))
        if match is None:
            return ModelResponse(text="Nothing to do.")
        arguments = {"name": match["name"], "namespace": match["ns"] or "default"}
        call = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "delete_pod", arguments)
        return ModelResponse(text="", tool_calls=(call,), stop_reason="tool_use")


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    @tool
    def delete_pod(name: str, namespace: str = "default") -> str:
        """Delete a pod."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} {namespace}/{name}\n")
        return f'pod "{name}" deleted'

    @tool(secret=["new_password"], editable=True)
    def rotate_password(user: str, new_password: str) -> str:
        """Set a user's password."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} password {user} {new_password}\n")
        return f"password of {user} changed"

    tools = [delete_pod, rotate_password]
    return Agent(tools=tools, system="You operate Kubernetes.", name="ops", runtime=RuleRuntime())
