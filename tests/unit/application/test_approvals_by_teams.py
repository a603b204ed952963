"""Approvals by teams through the Python API: a call whose tool (or the policy) names its approvers runs
once, when the last of them approves; every counted approval and every refusal is in the audit trail;
a partial approval is stored, and shown on the call's view."""

from __future__ import annotations

import threading

import pytest

from dcaf_like import (
    Agent,
    AlreadyApproved,
    ApprovalAnswer,
    ApprovalPolicy,
    ConcurrencyConflict,
    ContextChanged,
    Identity,
    InMemoryConversationRepository,
    NotAnApprover,
    ToolCallAlreadyDecided,
    ToolContext,
    ToolDecision,
    approvers,
    argument_in,
    context_in,
    require_approval,
    tool,
)
from dcaf_like.testing import FakeRuntime, tool_call

GROUPS = {"sre": {"alice", "bob"}, "dev": {"dave"}}
PROD = {"tenant_name": "prod"}


def person(name: str) -> Identity:
    return Identity(name, frozenset({"chat", "approve"}))


CAROL, ALICE, BOB, DAVE = person("carol"), person("alice"), person("bob"), person("dave")


class Cluster:
    def __init__(self) -> None:
        self.deleted: list[str] = []

        @tool(editable=True, approvers=approvers(2, "sre"))
        def delete_pod(name: str, namespace: str = "default") -> str:
            """Delete a pod."""
            self.deleted.append(name)
            return f"deleted {name}"

        self.delete_pod = delete_pod


def make_agent(cluster: Cluster, **kwargs) -> Agent:
    script = [tool_call("delete_pod", name="web-2", namespace="prod"), "Deleted."]
    return Agent(tools=[cluster.delete_pod], runtime=FakeRuntime(script), groups=GROUPS, **kwargs)


def outcomes(agent: Agent, conversation_id: str) -> list[tuple[str, str]]:
    """Oldest first."""
    return [
        (r.outcome.value, r.decided_by) for r in reversed(agent.repository.decision_records(conversation_id))
    ]


def test_a_call_runs_once_when_two_distinct_members_of_its_group_approved():
    cluster = Cluster()
    agent = make_agent(cluster)
    proposed = agent.run("delete web-2", identity=CAROL, platform_context=PROD)
    conversation_id, call_id = proposed.conversation_id, proposed.pending_tool_calls[0].id
    assert (
        proposed.pending_tool_calls[0].approval_reason
        == "delete_pod needs 2 approvers from sre, not the requester"
    )

    first = agent.approve(conversation_id, call_id, identity=ALICE, platform_context=PROD)

    (waiting,) = first.pending_tool_calls
    assert cluster.deleted == []
    assert [(a.by, a.stage) for a in waiting.approvals] == [("alice", 0)]
    assert [(n.count, sorted(n.groups)) for n in waiting.still_needed] == [(1, ["sre"])]
    stored = agent.conversation(conversation_id)
    assert stored is not None
    assert [a.by for a in stored.tool_calls[call_id].approvals] == ["alice"]

    done = agent.approve(conversation_id, call_id, identity=BOB, platform_context=PROD)

    assert cluster.deleted == ["web-2"]
    assert done.executed_tool_calls[0].output == "deleted web-2"
    assert outcomes(agent, conversation_id) == [("counted", "alice"), ("approved", "bob")]


@pytest.mark.parametrize(
    ("who", "refusal"),
    [(ALICE, AlreadyApproved), (CAROL, NotAnApprover), (DAVE, NotAnApprover), (None, NotAnApprover)],
    ids=["alice-again", "the-requester", "a-dev", "nobody"],
)
def test_a_second_approval_that_does_not_count_is_refused_and_audited_and_nothing_runs(who, refusal):
    cluster = Cluster()
    agent = make_agent(cluster)
    proposed = agent.run("delete web-2", identity=CAROL, platform_context=PROD)
    conversation_id, call_id = proposed.conversation_id, proposed.pending_tool_calls[0].id
    agent.approve(conversation_id, call_id, identity=ALICE, platform_context=PROD)

    with pytest.raises(refusal):
        agent.approve(conversation_id, call_id, identity=who, platform_context=PROD)

    assert cluster.deleted == []
    assert outcomes(agent, conversation_id)[-1] == ("refused", who.name if who else "user")
    stored = agent.conversation(conversation_id)
    assert stored is not None
    assert [a.by for a in stored.tool_calls[call_id].approvals] == ["alice"]


def test_an_edit_after_the_first_approval_needs_both_again():
    cluster = Cluster()
    agent = make_agent(cluster)
    proposed = agent.run("delete web-2", identity=CAROL, platform_context=PROD)
    conversation_id, call_id = proposed.conversation_id, proposed.pending_tool_calls[0].id
    agent.approve(conversation_id, call_id, identity=ALICE, platform_context=PROD)

    edited = agent.approve(
        conversation_id, call_id, identity=BOB, platform_context=PROD, edited_arguments={"name": "web-3"}
    )

    (waiting,) = edited.pending_tool_calls
    assert (waiting.input["name"], waiting.edited, [a.by for a in waiting.approvals]) == (
        "web-3",
        True,
        ["bob"],
    )
    assert cluster.deleted == []
    agent.approve(conversation_id, call_id, identity=ALICE, platform_context=PROD)
    assert cluster.deleted == ["web-3"]
    assert outcomes(agent, conversation_id) == [("counted", "alice"), ("counted", "bob"), ("edited", "alice")]


def test_a_partial_approval_is_bound_to_the_context_the_call_was_proposed_in():
    cluster = Cluster()
    agent = make_agent(cluster)
    proposed = agent.run("delete web-2", identity=CAROL, platform_context=PROD)
    conversation_id, call_id = proposed.conversation_id, proposed.pending_tool_calls[0].id

    with pytest.raises(ContextChanged):
        agent.approve(conversation_id, call_id, identity=ALICE, platform_context={"tenant_name": "dev"})

    assert outcomes(agent, conversation_id) == [("refused", "alice")]


def test_a_rejection_by_a_member_rejects_the_call_and_one_by_an_outsider_is_refused():
    cluster = Cluster()
    agent = make_agent(cluster)
    proposed = agent.run("delete web-2", identity=CAROL, platform_context=PROD)
    conversation_id, call_id = proposed.conversation_id, proposed.pending_tool_calls[0].id
    agent.approve(conversation_id, call_id, identity=ALICE, platform_context=PROD)

    with pytest.raises(NotAnApprover):
        agent.reject(conversation_id, call_id, "no", identity=DAVE, platform_context=PROD)
    rejected = agent.reject(conversation_id, call_id, "not now", identity=BOB, platform_context=PROD)

    assert not rejected.pending_tool_calls
    assert cluster.deleted == []
    assert outcomes(agent, conversation_id)[-2:] == [("refused", "dave"), ("rejected", "bob")]


def test_a_policy_rule_on_the_context_names_approvers_and_the_approver_callback_is_not_asked():
    deleted: list[str] = []

    @tool
    def scale(deployment: str, replicas: int) -> str:
        """Scale a deployment."""
        deleted.append(deployment)
        return "scaled"

    policy = ApprovalPolicy(
        [
            require_approval(
                "prod needs an SRE", when=context_in("tenant_name", "prod"), approvers=approvers(1, "sre")
            )
        ]
    )
    asked: list[str] = []
    agent = Agent(
        tools=[scale],
        runtime=FakeRuntime([tool_call("scale", deployment="api", replicas=3), "Scaled."] * 2),
        approval_policy=policy,
        groups=GROUPS,
        approver=lambda pending: asked.append(pending.call_id) or True,
    )

    in_dev = agent.run("scale api", identity=CAROL, platform_context={"tenant_name": "dev"})
    in_prod = agent.run("scale api", identity=CAROL, platform_context=PROD)

    assert in_dev.executed_tool_calls
    assert len(asked) == 1
    (waiting,) = in_prod.pending_tool_calls  # the prod rule: it waits for an SRE
    assert len(asked) == 1
    agent.approve(in_prod.conversation_id, waiting.id, identity=BOB, platform_context=PROD)
    assert deleted == ["api", "api"]


def test_concurrent_final_approvals_run_the_tool_once_and_the_others_are_told():
    cluster = Cluster()
    repository = InMemoryConversationRepository()
    agent = make_agent(cluster, repository=repository)
    proposed = agent.run("delete web-2", identity=CAROL, platform_context=PROD)
    conversation_id, call_id = proposed.conversation_id, proposed.pending_tool_calls[0].id
    agent.approve(conversation_id, call_id, identity=ALICE, platform_context=PROD)
    finals = [person(f"sre-{n}") for n in range(8)]
    crowd = Agent(  # the same tool and store, its group holding the crowd: eight final approvals at once
        tools=[cluster.delete_pod],
        runtime=FakeRuntime(["Deleted."] * 8),
        repository=repository,
        groups={"sre": {"alice", *(p.name for p in finals)}},
    )
    start = threading.Barrier(len(finals))
    results: list[object] = []

    def approve(who: Identity) -> None:
        start.wait()
        try:
            crowd.decide(
                conversation_id, [ToolDecision.approved(call_id)], identity=who, platform_context=PROD
            )
            results.append("ran")
        except (ConcurrencyConflict, ToolCallAlreadyDecided) as exc:
            results.append(type(exc).__name__)

    threads = [threading.Thread(target=approve, args=(who,)) for who in finals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert cluster.deleted == ["web-2"]
    assert results.count("ran") == 1
    assert set(results) - {"ran"} <= {"ConcurrencyConflict", "ToolCallAlreadyDecided"}


def test_an_approver_callbacks_edit_into_a_team_rule_leaves_the_call_waiting_for_the_team():
    cluster = Cluster()
    policy = ApprovalPolicy(
        [
            require_approval(
                "prod needs an SRE", when=argument_in("namespace", "prod"), approvers=approvers(1, "sre")
            )
        ]
    )

    @tool(editable=True)
    def restart(name: str, namespace: str = "dev") -> str:
        """Restart a deployment."""
        cluster.deleted.append(f"{namespace}/{name}")
        return "restarted"

    agent = Agent(
        tools=[restart],
        runtime=FakeRuntime([tool_call("restart", name="api"), "Restarted."]),
        approval_policy=policy,
        groups=GROUPS,
        approver=lambda pending: ApprovalAnswer(True, edited_arguments={"namespace": "prod"}),
    )

    waiting = agent.run("restart api", identity=CAROL)

    assert cluster.deleted == []
    assert [c.input for c in waiting.pending_tool_calls] == [{"name": "api", "namespace": "dev"}]
    agent.approve(waiting.conversation_id, waiting.pending_tool_calls[0].id, identity=BOB)
    assert cluster.deleted == ["dev/api"]


def test_the_call_runs_with_the_credentials_of_the_approval_that_completes_it():
    """docs/approvals.md, "Approvals by teams": credentials are never stored, so the last approver's
    request supplies them; its non-secret context must still be the proposal's."""
    seen: list[str] = []

    @tool(approvers=approvers(2, "sre"))
    def delete_pod(name: str, context: ToolContext) -> str:
        """Delete a pod."""
        seen.append(context.platform_context.get("duplo_token"))
        return f"deleted {name}"

    agent = Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([tool_call("delete_pod", name="web-2"), "Deleted."]),
        groups=GROUPS,
    )
    proposed = agent.run("delete web-2", identity=CAROL, platform_context={**PROD, "duplo_token": "carol-t"})
    conversation_id, call_id = proposed.conversation_id, proposed.pending_tool_calls[0].id
    agent.approve(
        conversation_id, call_id, identity=ALICE, platform_context={**PROD, "duplo_token": "alice-t"}
    )
    with pytest.raises(ContextChanged):
        agent.approve(conversation_id, call_id, identity=BOB)  # no context: not the proposal's

    agent.approve(conversation_id, call_id, identity=BOB, platform_context={**PROD, "duplo_token": "bob-t"})

    assert seen == ["bob-t"]
