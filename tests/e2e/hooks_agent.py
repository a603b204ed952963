"""An agent with hooks, for tests that serve it as a real process (``dcaf-like serve``).

"delete pod NAME [in NAMESPACE]" proposes ``delete_pod`` (it waits for approval); after its result the
model reports it. Its hooks, one sync and one async of each kind, write to the ledger file named by
``DCAF_TEST_LEDGER``: ``audit`` (sync) appends each call that ran; ``freeze`` (async) vetoes any call in
the ``prod`` namespace; ``tripwire`` (sync) raises before a call on a pod named ``boom``, and is told
of the turn's failure (``on_error``).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from dcaf_like import (
    Agent,
    AgentRuntime,
    Hook,
    HookContext,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ToolCallInfo,
    ToolResult,
    Veto,
    tool,
)


class RuleRuntime(AgentRuntime):
    name = "rules"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            return ModelResponse(text=f"Done: {last.content}")
        words = getattr(last, "text", "").split()
        if words[:2] != ["delete", "pod"]:
            return ModelResponse(text="Nothing to do.")
        arguments = {"name": words[2], "namespace": words[4] if len(words) > 4 else "default"}
        call = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "delete_pod", arguments)
        return ModelResponse(tool_calls=(call,), stop_reason="tool_use")


class Audit(Hook):
    name = "audit"

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    def after_tool(self, context: HookContext, call: ToolCallInfo) -> None:
        with self.ledger.open("a", encoding="utf-8") as out:
            out.write(f"audit {call.name} {call.status} {call.arguments['name']}\n")


class Freeze(Hook):
    name = "freeze"

    async def before_tool(self, context: HookContext, call: ToolCallInfo) -> Veto | None:
        await asyncio.sleep(0)  # a real await: this hook runs on the server's event loop
        if call.arguments.get("namespace") == "prod":
            return Veto("prod is frozen this week")
        return None


class Tripwire(Hook):
    name = "tripwire"

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    def before_tool(self, context: HookContext, call: ToolCallInfo) -> None:
        if call.arguments["name"] == "boom":
            raise RuntimeError("tripped reading /srv/secret/ops.yaml")

    def on_error(self, context: HookContext, error: Exception) -> None:
        with self.ledger.open("a", encoding="utf-8") as out:
            out.write(f"on_error {type(error).__name__} {context.conversation_id}\n")


def make_agent() -> Agent:
    ledger = Path(os.environ["DCAF_TEST_LEDGER"])

    @tool
    def delete_pod(name: str, namespace: str = "default") -> str:
        """Delete a pod."""
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"ran delete_pod {namespace}/{name}\n")
        return f'pod "{name}" deleted'

    hooks = [Audit(ledger), Freeze(), Tripwire(ledger)]
    return Agent(tools=[delete_pod], name="hooked", runtime=RuleRuntime(), hooks=hooks)
