"""docs/approvals.md, "Grants", through the Python API: a grant approves the calls it covers as they
are proposed, for its lifetime by the agent's clock, until revoked; never a call the policy denies,
an irreversible one, or one whose rule asks for more approvers; each use is shown and audited."""

from __future__ import annotations

from pathlib import Path

import pytest

from dcaf_like import Agent, ApprovalPolicy, Identity, approvers, deny, tool
from dcaf_like.application.errors import MissingCapability, MissingScope
from dcaf_like.domain import DeciderKind, DecisionOutcome
from dcaf_like.domain.grant import GrantNotFound
from dcaf_like.helpdesk import protocol
from dcaf_like.stores.sqlite import SqliteConversationRepository
from dcaf_like.testing import FakeRuntime, ManualClock, tool_call

ALICE = Identity("alice", frozenset({"chat", "approve"}))
BOB = Identity("bob", frozenset({"chat", "approve", "admin"}))  # grants others' calls
CAROL = Identity("carol", frozenset({"chat"}))


class Cluster:
    def __init__(self) -> None:
        self.done: list[str] = []

        @tool(risk="reversible")
        def restart_pod(name: str, namespace: str) -> str:
            """Restart a pod."""
            self.done.append(f"restart {namespace}/{name}")
            return f"restarted {name}"

        @tool(risk="irreversible")
        def delete_pod(name: str, namespace: str) -> str:
            """Delete a pod."""
            self.done.append(f"delete {namespace}/{name}")
            return f"deleted {name}"

        @tool(approvers=approvers(2))
        def drain_node(name: str) -> str:
            """Drain a node."""
            self.done.append(f"drain {name}")
            return f"drained {name}"

        self.tools = [restart_pod, delete_pod, drain_node]


def agent_for(cluster: Cluster, clock: ManualClock, calls: int = 8, **kwargs) -> Agent:
    script = []
    for _ in range(calls):
        script += [tool_call("restart_pod", name="web-1", namespace="dev"), "Done."]
    return Agent(tools=cluster.tools, runtime=FakeRuntime(script), clock=clock, **kwargs)


def test_a_grant_approves_a_matching_call_as_it_is_proposed_and_says_so():
    """docs/approvals.md, "Grants": the call runs at once, shown as approved by the grant, audited."""
    cluster, clock = Cluster(), ManualClock()
    agent = agent_for(cluster, clock)
    grant = agent.grant(
        "restart_pod", requester="alice", arguments={"namespace": "dev"}, duration=1800, identity=BOB
    )

    response = agent.run("restart web-1", identity=ALICE)

    assert cluster.done == ["restart dev/web-1"]
    assert response.pending_tool_calls == ()
    [ran] = response.executed_tool_calls
    assert ran.approved_by_grant == f"grant {grant.id} from bob"
    assert protocol.executed_call(ran)["grant"] == {
        "id": grant.id,
        "granted_by": "bob",
        "approval": f"approved by grant {grant.id} from bob",
    }
    records = agent.repository.decision_records(None)
    made = [r for r in records if r.outcome is DecisionOutcome.GRANTED]
    used = [r for r in records if r.decider is DeciderKind.GRANT]
    assert [r.decided_by for r in made] == ["bob"]
    assert grant.id in made[0].reason
    assert [(r.outcome, r.decided_by) for r in used] == [(DecisionOutcome.APPROVED, grant.approval)]
    assert "restart_pod where namespace is dev, for alice" in used[0].reason


def test_a_grant_approves_for_its_lifetime_only_by_the_agents_clock():
    """docs/approvals.md, "Grants": past its end, a call waits for a person again."""
    cluster, clock = Cluster(), ManualClock()
    agent = agent_for(cluster, clock)
    agent.grant("restart_pod", requester="alice", duration=60, identity=BOB)

    assert agent.run("restart", identity=ALICE).pending_tool_calls == ()
    clock.advance(60)
    assert len(agent.run("restart", identity=ALICE).pending_tool_calls) == 1
    assert agent.grants() == []
    assert len(agent.grants(everything=True)) == 1


def test_a_revoked_grant_approves_nothing_from_the_next_turn_on():
    """docs/approvals.md, "Grants": revoked at once, recorded in the trail."""
    cluster, clock = Cluster(), ManualClock()
    agent = agent_for(cluster, clock)
    grant = agent.grant("restart_pod", requester="alice", duration=600, identity=BOB)
    revoked = agent.revoke_grant(grant.id, identity=ALICE)

    assert revoked.revoked_by == "alice"
    assert len(agent.run("restart", identity=ALICE).pending_tool_calls) == 1
    assert cluster.done == []
    assert agent.revoke_grant(grant.id, identity=BOB).revoked_by == "alice"  # once
    outcomes = [r.outcome for r in agent.repository.decision_records(None)]
    assert outcomes.count(DecisionOutcome.REVOKED) == 1


def test_a_grant_covers_only_its_requester_and_its_values():
    cluster, clock = Cluster(), ManualClock()
    agent = agent_for(cluster, clock)
    agent.grant("restart_pod", requester="alice", arguments={"namespace": "prod"}, duration=600, identity=BOB)
    assert len(agent.run("restart", identity=ALICE).pending_tool_calls) == 1  # namespace dev
    other = agent_for(cluster, clock)
    other.grant("restart_pod", requester="alice", duration=600, identity=BOB)
    assert len(other.run("restart", identity=BOB).pending_tool_calls) == 1  # bob asked, not alice


def test_a_grant_never_covers_a_call_the_policy_denies():
    """docs/approvals.md, "Grants": the policy's denial stands."""
    cluster, clock = Cluster(), ManualClock()
    policy = ApprovalPolicy([deny("no restarts today", tools=["restart_pod"])])
    agent = agent_for(cluster, clock, approval_policy=policy)
    agent.grant("restart_pod", requester="*", duration=600)
    response = agent.run("restart", identity=ALICE)
    assert cluster.done == []
    assert [c.name for c in response.rejected_tool_calls] == ["restart_pod"]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("delete_pod", {"name": "web-1", "namespace": "dev"}), ("drain_node", {"name": "n1"})],
)
def test_a_grant_never_covers_an_irreversible_call_nor_one_whose_rule_asks_more_approvers(name, arguments):
    """docs/approvals.md, "Grants": those wait for people, grant or none."""
    cluster, clock = Cluster(), ManualClock()
    agent = Agent(
        tools=cluster.tools, runtime=FakeRuntime([tool_call(name, **arguments), "Done."]), clock=clock
    )
    agent.grant(name, requester="*", duration=600)
    [waiting] = agent.run("do it", identity=ALICE).pending_tool_calls
    assert waiting.name == name
    assert waiting.approved_by_grant is None
    assert cluster.done == []


def test_granting_listing_and_revoking_need_the_approve_scope():
    agent = agent_for(Cluster(), ManualClock())
    with pytest.raises(MissingScope):
        agent.grant("restart_pod", requester="carol", duration=60, identity=CAROL)
    with pytest.raises(MissingScope):
        agent.grants(identity=CAROL)
    with pytest.raises(GrantNotFound):
        agent.revoke_grant("g_nope", identity=BOB)


def test_without_admin_an_approver_grants_only_their_own_calls():
    """docs/approvals.md, "Grants": under today's rule only a conversation's owner (or an admin)
    approves its calls, and a grant gives no one more."""
    cluster, clock = Cluster(), ManualClock()
    agent = agent_for(cluster, clock)
    with pytest.raises(MissingScope, match="admin"):
        agent.grant("restart_pod", requester="bob", duration=60, identity=ALICE)
    with pytest.raises(MissingScope, match="admin"):
        agent.grant("restart_pod", requester="*", duration=60, identity=ALICE)
    agent.grant("restart_pod", requester="alice", duration=60, identity=ALICE)
    assert agent.run("restart", identity=ALICE).pending_tool_calls == ()
    refused = [r for r in agent.repository.decision_records(None) if r.outcome is DecisionOutcome.REFUSED]
    assert [(r.decided_by, r.tool_name) for r in refused] == [("alice", "restart_pod")] * 2
    assert "admin" in refused[0].reason


def test_grants_are_kept_by_sqlite_across_agents_sharing_the_file(tmp_path: Path):
    """docs/approvals.md, "Grants": every worker's turns read the grants of the store they share."""
    cluster, clock = Cluster(), ManualClock()
    path = tmp_path / "grants.db"
    granting = agent_for(cluster, clock, repository=SqliteConversationRepository(path, clock=clock))
    grant = granting.grant("restart_pod", requester="alice", duration=600, identity=BOB)
    working = agent_for(cluster, clock, repository=SqliteConversationRepository(path, clock=clock))
    assert working.run("restart", identity=ALICE).pending_tool_calls == ()
    granting.revoke_grant(grant.id, identity=BOB)
    assert len(working.run("restart", identity=ALICE).pending_tool_calls) == 1
    assert [g.id for g in working.grants(everything=True)] == [grant.id]


def test_a_store_that_keeps_no_grants_refuses_them_by_name():
    """docs/approvals.md, "Grants": a store without the capability says so (HTTP 501)."""
    from dcaf_like.application.ports import ConversationStore

    class Plain(ConversationStore):
        def get(self, conversation_id):
            return None

        def save(self, conversation, expected_version):
            pass

    agent = agent_for(Cluster(), ManualClock(), repository=Plain())
    with pytest.raises(MissingCapability, match="keep standing grants"):
        agent.grant("restart_pod", requester="alice", duration=60)


def test_a_grant_is_never_in_force_without_its_record_in_the_trail():
    """docs/approvals.md, "Grants": the record is written first; a trail that cannot be written
    leaves no grant in force, and a grant that cannot be kept leaves a record of one that approves
    nothing."""
    from dcaf_like import InMemoryConversationRepository
    from dcaf_like.application.errors import StoreUnavailable

    class Failing(InMemoryConversationRepository):
        fails: str = ""

        def record_decisions(self, records):
            if self.fails == "trail":
                raise StoreUnavailable("the trail is down")
            super().record_decisions(records)

        def add_grant(self, grant):
            if self.fails == "grants":
                raise StoreUnavailable("the grants are down")
            super().add_grant(grant)

    store = Failing()
    agent = agent_for(Cluster(), ManualClock(), repository=store)

    store.fails = "trail"
    with pytest.raises(StoreUnavailable):
        agent.grant("restart_pod", requester="alice", duration=60)
    assert agent.grants(everything=True) == []

    store.fails = "grants"
    with pytest.raises(StoreUnavailable):
        agent.grant("restart_pod", requester="alice", duration=60)
    assert agent.grants(everything=True) == []
    [granted] = [r for r in store.decision_records() if r.outcome is DecisionOutcome.GRANTED]
    assert granted.tool_name == "restart_pod"
