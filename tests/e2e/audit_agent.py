"""A dcaf_like agent for the audit's tests, served by ``dcaf-like serve`` as a real process.

Its runtime is a test double that answers from the request alone: a user message that mentions the
canary proposes ``audit_canary`` (a gated tool appending one line per run to ``$DCAF_AUDIT_LEDGER``);
after a tool result it says it is done."""

from __future__ import annotations

import os
import time
import uuid

from dcaf_like import (
    Agent,
    AgentRuntime,
    InMemoryConversationRepository,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ToolResult,
    tool,
)
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


class GoesOnRuntime(AgentRuntime):
    """A model that goes on after every decision, as a real one does: after a result it reads the
    canary's status, again and again, until the turn's step limit. Its answer after a decision waits
    (at most `patience` seconds) for a request to cancel the turn, so a client that asks for one gets
    the turn stopped whatever the machine's speed. The deliberate rejection it answers with a new
    proposal (one the audit never asked for, which it must reject before it ends)."""

    name = "goes-on"

    def __init__(self, repository: InMemoryConversationRepository, patience: float = 10) -> None:
        self.repository = repository
        self.patience = patience
        self.after_decisions = 0  # model calls made after a decision

    def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if not isinstance(last, ToolResult):
            if "canary" not in getattr(last, "text", ""):
                return ModelResponse(text="Nothing to do.")
            return _canary_call()
        self.after_decisions += 1
        if "rejected on purpose" in last.content:
            return _canary_call()
        asked = time.time()
        deadline = time.monotonic() + self.patience
        while time.monotonic() < deadline:
            if self.repository.cancel_requested(request.conversation_id, since=asked):
                break
            time.sleep(0.02)
        read = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "canary_status", {})
        return ModelResponse(text="", tool_calls=(read,), stop_reason="tool_use")


def _canary_call() -> ModelResponse:
    call = ModelToolCall(f"call_{uuid.uuid4().hex[:12]}", "audit_canary", ARGUMENTS)
    return ModelResponse(text="", tool_calls=(call,), stop_reason="tool_use")


def make_agent_that_goes_on(ledger: str) -> tuple[Agent, GoesOnRuntime]:
    repository = InMemoryConversationRepository()
    runtime = GoesOnRuntime(repository)

    @tool(requires_approval=False)
    def canary_status() -> str:
        """How the canary is."""
        return "fine"

    agent = Agent(
        tools=[canary_tool(ledger), canary_status], runtime=runtime, name="goes-on", repository=repository
    )
    return agent, runtime
