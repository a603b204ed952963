"""What the service records in the audit trail, and whose conversations a request may use."""

from __future__ import annotations

import dataclasses

import pytest

from dcaf_like import (
    Agent,
    AgentRequest,
    ApprovalAnswer,
    ApprovalMismatch,
    ApprovalPolicy,
    ConversationNotFound,
    ToolDecision,
    argument_in,
    deny,
)
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


def make_agent(cluster, *script, **kwargs) -> Agent:
    return Agent(tools=cluster.tools(), runtime=FakeRuntime(script), **kwargs)


def trail(agent: Agent, conversation_id: str | None = None) -> list[tuple[str, str, str, str]]:
    return [
        (r.outcome.value, r.decided_by, r.decider.value, r.entrance)
        for r in agent.repository.decision_records(conversation_id)
    ]


def test_a_turn_without_a_decision_writes_no_record(cluster):
    agent = make_agent(cluster, tool_calls("list_pods"), reply("web-2 is crashing."))

    agent.run("which pods are unhealthy?")  # an ungated tool ran: the policy let it, no one decided

    assert trail(agent) == []


def test_a_human_decision_is_recorded_with_who_how_and_the_fingerprint(cluster):
    agent = make_agent(cluster, tool_calls(tool_call("delete_pod", name="web-2")), reply("Deleted."))
    first = agent.run("delete web-2")
    call = first.pending_tool_calls[0]

    agent.approve(first.conversation_id, call.id, user="olga", edited_arguments={"name": "web-1"})

    [record] = agent.repository.decision_records(first.conversation_id)
    stored = agent.conversation(first.conversation_id)
    assert stored is not None
    assert (record.outcome.value, record.decided_by, record.decider.value, record.entrance) == (
        "edited",
        "olga",
        "human",
        "python",
    )
    assert (record.call_id, record.tool_name, record.fingerprint) == (
        call.id,
        "delete_pod",
        stored.tool_call(call.id).fingerprint,
    )


def test_a_refused_decision_is_recorded_and_changes_nothing_else(cluster):
    agent = make_agent(cluster, tool_calls(tool_call("delete_pod", name="web-2")))
    first = agent.run("delete web-2")
    call_id = first.pending_tool_calls[0].id
    version = agent.conversation(first.conversation_id).version  # type: ignore[union-attr]
    altered = ToolDecision(call_id, True, "delete_pod", {"name": "web-1", "namespace": "default"})

    with pytest.raises(ApprovalMismatch):
        agent.decide(first.conversation_id, [altered], user="mallory")

    assert trail(agent) == [("refused", "mallory", "human", "python")]
    assert "differ" in agent.repository.decision_records()[0].reason
    assert agent.conversation(first.conversation_id).version == version  # type: ignore[union-attr]
    assert cluster.deleted == []


def test_policy_denials_approver_answers_and_closed_windows_are_recorded_by_kind(cluster):
    policy = ApprovalPolicy([deny("protected", when=argument_in("namespace", "kube-system"))])
    denied = make_agent(
        cluster,
        tool_calls(tool_call("delete_pod", name="coredns", namespace="kube-system")),
        reply("I may not."),
        approval_policy=policy,
    )
    denied.run("delete coredns")
    asked = make_agent(
        cluster,
        tool_calls(tool_call("delete_pod", name="web-2")),
        reply("Deleted."),
        approver=lambda pending: ApprovalAnswer(approved=True),
    )
    asked.run("delete web-2")
    now = [1000.0]
    late = make_agent(
        cluster,
        tool_calls(tool_call("delete_pod", name="web-1")),
        reply("Moving on."),
        approval_ttl=60,
        clock=lambda: now[0],
    )
    first = late.run("delete web-1")
    now[0] += 61
    late.run("never mind", conversation_id=first.conversation_id)

    assert trail(denied) == [("rejected", "policy", "policy", "python")]
    assert trail(asked) == [("approved", "approver", "approver", "python")]
    assert trail(late) == [("rejected", "system", "system", "python")]


def test_a_request_with_an_owner_uses_only_that_owners_conversations(cluster):
    agent = make_agent(cluster, tool_calls(tool_call("delete_pod", name="web-2")), reply("Deleted."))
    started = agent.run_request(AgentRequest("delete web-2", user="bob", owner="bob"))
    call_id = started.pending_tool_calls[0].id
    approval = AgentRequest(
        conversation_id=started.conversation_id,
        decisions=(ToolDecision.approved(call_id),),
        user="alice",
        owner="alice",
    )

    with pytest.raises(ConversationNotFound):
        agent.run_request(approval)
    operator = agent.run_request(dataclasses.replace(approval, user="ops", owner="ops", sees_all=True))

    assert agent.conversation(started.conversation_id).owner == "bob"  # type: ignore[union-attr]
    assert operator.executed_tool_calls[0].id == call_id
    assert [r.decided_by for r in agent.repository.decision_records()] == ["ops"]
