"""One inbox (docs/approvals.md, "One inbox"): ``Agent.waiting_approvals`` lists the calls waiting for
an identity's decision across conversations, as the decision itself would judge who may decide."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dcaf_like import (
    Agent,
    ApprovalPolicy,
    ConversationRepository,
    Identity,
    InMemoryConversationRepository,
    MissingCapability,
    approvers,
    argument_in,
    require_approval,
    tool,
)
from dcaf_like.application.cursors import InvalidCursor
from dcaf_like.application.dto import AgentRequest
from dcaf_like.application.errors import MissingScope
from dcaf_like.application.inbox import ListWaitingApprovals
from dcaf_like.application.messages import ModelRequest, ModelResponse, UserTurn
from dcaf_like.testing import FakeRuntime, ManualClock, reply, tool_call, tool_calls


def person(name: str, *scopes: str) -> Identity:
    return Identity(name, frozenset(scopes or ("chat", "approve")))


CAROL, ALICE, BOB, DAVE = (person(n) for n in ("carol", "alice", "bob", "dave"))
ADMIN = person("ops", "admin")


@tool(editable=True)
def delete_pod(name: str, namespace: str = "default") -> str:
    """Delete a pod."""
    return f"deleted {name}"


def deleting(namespace: str) -> Callable[[ModelRequest], ModelResponse]:
    """A model that proposes a delete for each user message and says done after a call's result."""

    def answer(request: ModelRequest) -> ModelResponse:
        if isinstance(request.messages[-1], UserTurn):
            return tool_calls(tool_call("delete_pod", name="web-2", namespace=namespace))
        return reply("Done.")

    return answer


def make_agent(clock: ManualClock | None = None, **options: object) -> Agent:
    two_sres = require_approval(
        "prod needs two SREs", when=argument_in("namespace", "prod"), approvers=approvers(2, "sre")
    )
    return Agent(
        tools=[delete_pod],
        approval_policy=ApprovalPolicy([two_sres]),
        groups={"sre": {"carol", "alice", "bob"}, "dev": {"dave"}},
        runtime=FakeRuntime([deleting("prod")] * 40),
        clock=clock or ManualClock(),
        **options,  # type: ignore[arg-type]
    )


def propose(agent: Agent, clock: ManualClock, who: Identity = CAROL) -> tuple[str, str]:
    clock.advance(1)
    response = agent.run("delete a pod in prod", identity=who)
    return response.conversation_id, response.pending_tool_calls[0].id


def test_one_inbox_lists_calls_from_every_conversation_newest_first():
    clock = ManualClock()
    agent = make_agent(clock)
    first, second = propose(agent, clock), propose(agent, clock)

    page = agent.waiting_approvals(identity=ALICE)

    assert [(i.call.conversation_id, i.call.call_id) for i in page.items] == [second, first]
    assert page.next_cursor is None
    item = page.items[0]
    assert (item.call.name, item.call.requested_by, item.stage, item.rule) == (
        "delete_pod",
        "carol",
        0,
        "2 approvers from sre, not the requester",
    )
    (eligible,) = item.eligible
    assert (eligible.count, eligible.groups, eligible.members) == (2, frozenset({"sre"}), {"alice", "bob"})


def test_one_inbox_leaves_out_the_requester_a_rule_keeps_out_and_other_groups():
    clock = ManualClock()
    agent = make_agent(clock)
    propose(agent, clock)

    assert agent.waiting_approvals(identity=CAROL).items == []  # she asked: the rule keeps her out
    assert agent.waiting_approvals(identity=DAVE).items == []  # a developer: not in sre
    scoped = Identity("erin", frozenset({"approve", "approve:sre"}))  # an SRE by her key's scope
    assert len(agent.waiting_approvals(identity=scoped).items) == 1


def test_one_inbox_shows_approvals_so_far_and_drops_the_call_for_who_counted():
    clock = ManualClock()
    agent = make_agent(clock)
    conversation_id, call_id = propose(agent, clock)
    agent.approve(conversation_id, call_id, identity=ALICE)

    assert agent.waiting_approvals(identity=ALICE).items == []  # counted already
    (item,) = agent.waiting_approvals(identity=BOB).items
    assert [(a.by, a.stage) for a in item.call.approvals] == [("alice", 0)]
    (eligible,) = item.eligible
    assert (eligible.count, eligible.members) == (1, {"bob"})


def test_one_inbox_drops_a_call_once_decided_and_one_whose_window_closed():
    clock = ManualClock()
    agent = make_agent(clock, approval_ttl=60)
    decided = propose(agent, clock)
    propose(agent, clock)
    agent.reject(*decided, "not today", identity=ALICE)

    assert len(agent.waiting_approvals(identity=BOB).items) == 1
    clock.advance(61)
    assert agent.waiting_approvals(identity=BOB).items == []


def test_one_inbox_under_todays_rule_lists_only_the_callers_own_conversations():
    clock = ManualClock()
    agent = Agent(tools=[delete_pod], runtime=FakeRuntime([deleting("default")] * 4), clock=clock)
    mine = AgentRequest("delete web-2", identity=ALICE, owner="alice")  # as a server with keys asks
    theirs = AgentRequest("delete web-3", identity=BOB, owner="bob")
    asked = [agent.run_request(request) for request in (mine, theirs)]
    inbox = ListWaitingApprovals(agent.repository, {}, clock)

    listed = inbox.blocking(identity=ALICE, owner="alice").items

    assert [i.call.conversation_id for i in listed] == [asked[0].conversation_id]
    assert len(inbox.blocking(identity=ADMIN, owner="ops").items) == 2
    # the Python API decides in any conversation, and so lists them all
    assert len(agent.waiting_approvals(identity=ALICE).items) == 2
    assert len(agent.waiting_approvals().items) == 2


def test_one_inbox_pages_with_an_opaque_cursor():
    clock = ManualClock()
    agent = make_agent(clock)
    proposed = [propose(agent, clock) for _ in range(5)]

    seen, cursor = [], None
    while True:
        page = agent.waiting_approvals(identity=ALICE, cursor=cursor, limit=2)
        seen += [(i.call.conversation_id, i.call.call_id) for i in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == proposed[::-1]


@pytest.mark.parametrize("cursor", ["", "not base64 at all!", "W10", "eyJhIjoxfQ", "WyJ4IiwiYSIsImIiXQ"])
def test_one_inbox_refuses_a_cursor_it_did_not_give(cursor):
    agent = make_agent()

    with pytest.raises(InvalidCursor):
        agent.waiting_approvals(identity=ALICE, cursor=cursor)


def test_one_inbox_needs_the_approve_scope():
    agent = make_agent()

    with pytest.raises(MissingScope):
        agent.waiting_approvals(identity=person("reader", "read"))


def test_one_inbox_on_a_store_without_the_index_names_the_missing_capability():
    class NoIndex(InMemoryConversationRepository):
        list_waiting = ConversationRepository.list_waiting  # the port's defaults: no index
        alist_waiting = ConversationRepository.alist_waiting

    agent = make_agent(repository=NoIndex())

    with pytest.raises(MissingCapability, match="list the calls waiting for approval"):
        agent.waiting_approvals(identity=ALICE)
