"""A dcaf_like agent for the audit's tests, served by ``dcaf-like serve`` as a real process.

Its runtime is a test double that answers from the request alone: a user message that mentions the
canary proposes ``audit_canary`` (a gated tool appending one line per run to ``$DCAF_AUDIT_LEDGER``);
after a tool result it says it is done."""

from __future__ import annotations

import os
import uuid

from dcaf_like import Agent, AgentRuntime, ModelRequest, ModelResponse, ModelToolCall, ToolResult
from dcaf_like.audit import canary_tool

ARGUMENTS = {"target": "web-2", "count": 1, "labels": {"team": "audit", "tier": 2}}


class CanaryRuntime(AgentRuntime):
    name = "canary-rules"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            return ModelResponse(text="Done.")
        if "canary" not in getattr(last, "text", ""):
            return ModelResponse(text="Nothing to do.")
        call = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "audit_canary", ARGUMENTS)
        return ModelResponse(text="", tool_calls=(call,), stop_reason="tool_use")


def make_agent() -> Agent:
    return Agent(
        tools=[canary_tool(os.environ["DCAF_AUDIT_LEDGER"])], runtime=CanaryRuntime(), name="audited"
    )
