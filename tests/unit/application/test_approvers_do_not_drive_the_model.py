"""A team approver's decision in someone else's conversation runs the calls it approved and never asks
the model again: the next step is proposed by, and judged by the policy as, the requester
(docs/approvals.md, "Approvals by teams")."""

from __future__ import annotations

import pytest

from dcaf_like import Agent, ApprovalPolicy, Identity, anyone_but, approvers, deny, require_approval, tool
from dcaf_like.domain import NotAnApprover
from dcaf_like.testing import FakeRuntime, tool_call

ALICE, BOB, CAROL = (Identity(n, frozenset({"chat", "approve"})) for n in ("alice", "bob", "carol"))


def test_the_next_call_after_a_teams_approval_is_the_requesters_and_the_requester_stays_out():
    ran: list[str] = []

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        ran.append(name)
        return "deleted " + name

    policy = ApprovalPolicy([require_approval("two SREs", approvers=approvers(2, "sre"))])
    runtime = FakeRuntime([tool_call("delete_pod", name="a"), tool_call("delete_pod", name="b"), "done"])
    agent = Agent(
        tools=[delete_pod], approval_policy=policy, groups={"sre": {"alice", "bob", "carol"}}, runtime=runtime
    )
    first = agent.run("delete a then b", identity=ALICE)
    cid, call = first.conversation_id, first.pending_tool_calls[0].id
    agent.approve(cid, call, identity=BOB)
    approved = agent.approve(cid, call, identity=CAROL)

    assert ran == ["a"]
    assert approved.stop_reason == "awaiting_requester"
    assert approved.pending_tool_calls == ()

    went_on = agent.run("go on", conversation_id=cid, identity=ALICE)  # the requester's next request
    second = went_on.pending_tool_calls[0].id
    assert agent.repository.get(cid).tool_call(second).requested_by == "alice"
    with pytest.raises(NotAnApprover, match="requester"):
        agent.approve(cid, second, identity=ALICE)


def test_an_approvers_decision_does_not_let_the_model_act_as_the_approver():
    ran: list[str] = []

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        ran.append("delete " + name)
        return "deleted"

    @tool(requires_approval=False)
    def scale(replicas: int) -> str:
        """Scale."""
        ran.append(f"scale {replicas}")
        return "scaled"

    policy = ApprovalPolicy(
        [
            require_approval("sre", tools=["delete_pod"], approvers=approvers(1, "sre")),
            deny("only ops scales", tools=["scale"], when=anyone_but("ops")),
        ]
    )
    runtime = FakeRuntime([tool_call("delete_pod", name="a"), tool_call("scale", replicas=0), "done", "x"])
    agent = Agent(tools=[delete_pod, scale], approval_policy=policy, groups={"sre": {"ops"}}, runtime=runtime)
    first = agent.run("delete a then scale to 0", identity=ALICE)
    agent.approve(
        first.conversation_id,
        first.pending_tool_calls[0].id,
        identity=Identity("ops", frozenset({"approve"})),
    )

    assert ran == ["delete a"]
    agent.run("go on", conversation_id=first.conversation_id, identity=ALICE)
    assert ran == ["delete a"]  # judged as alice: denied
