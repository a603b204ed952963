"""docs/approvals.md, "What the approver sees": a tool's declared risk goes with each of its calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dcaf_like import Agent, tool
from dcaf_like.application.notifications import ApprovalNotice, ApprovalNotifier
from dcaf_like.domain import Conversation, DomainError, ToolInput
from dcaf_like.helpdesk import protocol
from dcaf_like.notifiers.webhook import ApprovalWebhook
from dcaf_like.server.conversations import conversation_record
from dcaf_like.stores._codec import decode, encode
from dcaf_like.testing import FakeRuntime, reply, tool_call


class RecordingNotifier(ApprovalNotifier):
    def __init__(self) -> None:
        self.notices: list[ApprovalNotice] = []

    def approval_required(self, notice: ApprovalNotice) -> None:
        self.notices.append(notice)


@tool(risk="irreversible")
def terminate_instance(instance: str) -> str:
    """Terminate an instance and its disks."""
    return f"terminated {instance}"


@tool
def stop_instance(instance: str) -> str:
    """Stop an instance."""
    return f"stopped {instance}"


def test_a_tools_risk_is_on_its_calls_view_record_wire_form_and_notice():
    """docs/approvals.md, "What the approver sees": the risk in data.tool_calls, the conversation's
    record and the webhook's payload; a tool that declares none shows none."""
    notifier = RecordingNotifier()
    runtime = FakeRuntime([tool_call("terminate_instance", instance="i-1"), reply("ok")])
    agent = Agent(tools=[terminate_instance, stop_instance], runtime=runtime, approval_notifier=notifier)

    first = agent.run("terminate i-1")
    [call] = first.pending_tool_calls

    assert call.risk == "irreversible"
    assert protocol.pending_call(call)["risk"] == "irreversible"
    [waiting] = notifier.notices[0].calls
    assert waiting.risk == "irreversible"
    body = json.loads(ApprovalWebhook("https://example.com/hook", secret="s" * 32).body(notifier.notices[0]))
    assert body["calls"][0]["risk"] == "irreversible"
    conversation = agent.repository.get(first.conversation_id)
    assert conversation is not None
    assert conversation_record(conversation)["tool_calls"][0]["risk"] == "irreversible"

    undeclared = Agent(
        tools=[stop_instance], runtime=FakeRuntime([tool_call("stop_instance", instance="i-2")])
    )
    [plain] = undeclared.run("stop i-2").pending_tool_calls
    assert plain.risk is None
    assert "risk" not in protocol.pending_call(plain)  # the seed's form, for a tool that declares none


@pytest.mark.parametrize("risk", ["read", "reversible", "irreversible", "costly"])
def test_a_tool_declares_one_of_the_known_risks_or_its_own(risk: str):
    @tool(risk=risk)
    def act() -> str:
        """Act."""
        return ""

    assert act.risk == risk


@pytest.mark.parametrize("risk", ["", "two\nlines", "x" * 65, 3])
def test_a_risk_that_is_not_a_short_printable_word_is_refused_when_the_tool_is_defined(risk: Any):
    with pytest.raises(DomainError, match="risk"):

        @tool(risk=risk)
        def act() -> str:
            """Act."""
            return ""


def test_a_calls_risk_is_stored_and_a_call_stored_without_one_reads_as_undeclared():
    """docs/approvals.md, "What the approver sees": conversations stored before risks load unchanged."""
    c = Conversation.start("conv", at=0.0)
    c.add_user_message("go", at=1.0)
    c.add_assistant_message("", at=2.0)
    risky = c.request_tool_call("t", ToolInput.of({}), requires_approval=True, risk="irreversible", at=3.0)
    plain = c.request_tool_call("t", ToolInput.of({}), requires_approval=True, at=3.0)

    stored = encode(c)
    loaded = decode(stored, "conv")

    assert loaded.tool_calls[risky.id.value].risk == "irreversible"
    assert loaded.tool_calls[plain.id.value].risk is None
    assert stored.count('"risk"') == 1  # written only when declared: older readers see what they knew
