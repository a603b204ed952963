"""The sweep of reminders and escalations (docs/approvals.md, "Escalation"): what is due is read off
the index of waiting calls, claimed by a save, and sent once, however many sweeps race for it."""

from __future__ import annotations

import asyncio

import pytest

from dcaf_like import (
    Agent,
    ApprovalPolicy,
    ConcurrencyConflict,
    Identity,
    InMemoryConversationRepository,
    approvers,
    require_approval,
    tool,
)
from dcaf_like.application.notifications import ApprovalNotice, ApprovalNotifier
from dcaf_like.domain import Conversation, Trusted
from dcaf_like.testing import FakeRuntime, ManualClock, tool_call

RULE = approvers(1, "leads", remind_after=600, escalate_after=1800, escalate_to="oncall")


class RecordingNotifier(ApprovalNotifier):
    def __init__(self) -> None:
        self.notices: list[ApprovalNotice] = []

    def approval_required(self, notice: ApprovalNotice) -> None:
        self.notices.append(notice)


@tool
def delete_pod(name: str) -> str:
    """Delete a pod."""
    return f"deleted {name}"


def agent(clock: ManualClock, notifier: ApprovalNotifier | None, rule=RULE, repository=None) -> Agent:
    return Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([tool_call("delete_pod", name=f"web-{n}") for n in range(5)]),
        approval_policy=ApprovalPolicy([require_approval("a lead decides", approvers=rule)]),
        groups={"leads": {"lee"}, "oncall": {"olga"}},
        approval_notifier=notifier,
        clock=clock,
        repository=repository,
    )


CAROL = Identity("carol", frozenset({"chat"}))


def test_an_agent_sweeps_only_when_a_rule_escalates_and_someone_is_notified():
    clock = ManualClock(0.0)
    assert agent(clock, None).escalation_sweep() is None
    assert agent(clock, RecordingNotifier(), rule=approvers(2, "leads")).escalation_sweep() is None
    assert agent(clock, RecordingNotifier()).escalation_sweep() is not None


def test_a_sweep_sends_the_reminder_due_once_then_the_escalation_once():
    clock, notifier = ManualClock(0.0), RecordingNotifier()
    ops = agent(clock, notifier)
    call_id = ops.run("delete web-0", identity=CAROL).pending_tool_calls[0].id
    sweep = ops.escalation_sweep()
    assert sweep is not None

    events = []
    for moment in (599, 600, 700, 1800, 1900):
        clock.now = moment
        asyncio.run(sweep())
        events.append([(n.event, n.groups, n.calls[0].id) for n in notifier.notices[1:]])

    assert events[0] == []
    assert events[-1] == [("reminder", ("leads",), call_id), ("escalation", ("oncall",), call_id)]
    assert (sweep.sent, sweep.sweeps) == (2, 5)
    assert notifier.notices[1].user == "carol"  # who asked
    assert "reminded after 600s" in (notifier.notices[1].calls[0].approvals or {})["rule"]


class BothRead(InMemoryConversationRepository):
    """A store where two sweeps read a conversation before either saves its claim: the race."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.both_read: asyncio.Event | None = None

    async def aget(self, conversation_id: str) -> Conversation | None:
        if self.both_read is None:
            self.both_read = asyncio.Event()
        conversation = await super().aget(conversation_id)
        self.reads += 1
        if self.reads == 2:
            self.both_read.set()
        await asyncio.wait_for(self.both_read.wait(), 5)
        return conversation


def test_of_two_sweeps_that_race_for_a_notice_one_sends_it():
    clock, store = ManualClock(0.0), BothRead()
    notifiers = [RecordingNotifier(), RecordingNotifier()]
    workers = [agent(clock, n, repository=store) for n in notifiers]
    workers[0].run("delete web-0", identity=CAROL)
    sweeps = [w.escalation_sweep() for w in workers]
    clock.now = 600

    async def race() -> list[int]:
        return list(await asyncio.gather(*(s() for s in sweeps if s is not None)))

    assert sorted(asyncio.run(race())) == [0, 1]
    reminders = [n.event for notifier in notifiers for n in notifier.notices if n.event == "reminder"]
    assert reminders == ["reminder"]
    [loaded] = [store.get(i) for i in store.list_ids()]
    assert loaded is not None
    assert loaded.pending_tool_calls[0].reminded_at == 600


def test_a_reminder_shows_the_call_as_approvers_see_it_secret_arguments_masked():
    @tool(secret=["password"])
    def reset_password(user: str, password: str) -> str:
        """Reset a user's password."""
        return user

    clock, notifier = ManualClock(0.0), RecordingNotifier()
    ops = Agent(
        tools=[reset_password],
        runtime=FakeRuntime([tool_call("reset_password", user="bob", password="hunter2")]),
        approval_policy=ApprovalPolicy([require_approval("a lead decides", approvers=RULE)]),
        approval_notifier=notifier,
        clock=clock,
    )
    ops.run("reset bob", identity=CAROL)
    sweep = ops.escalation_sweep()
    assert sweep is not None
    clock.now = 600
    asyncio.run(sweep())

    [reminder] = [n for n in notifier.notices if n.event == "reminder"]
    assert reminder.calls[0].input == {"user": "bob", "password": "***"}


def test_a_decision_racing_a_claim_is_told_the_conversation_changed_and_goes_through_when_tried_again():
    """docs/approvals.md, "Escalation": a claim is a save like any other."""
    clock, store = ManualClock(0.0), InMemoryConversationRepository()
    ops = agent(clock, RecordingNotifier(), repository=store)
    proposed = ops.run("delete web-0", identity=CAROL)
    conversation_id, call_id = proposed.conversation_id, proposed.pending_tool_calls[0].id
    decision = store.get(conversation_id)  # a decision's read, before the claim
    assert decision is not None
    read_at = decision.version
    clock.now = 600
    sweep = ops.escalation_sweep()
    assert sweep is not None
    assert asyncio.run(sweep()) == 1

    lee = Identity("lee", frozenset({"approve"}))
    policy = ops.approval_policy
    decision.approve_tool_call(call_id, by="lee", policy=policy, trusted=Trusted(lee), at=clock.now)
    with pytest.raises(ConcurrencyConflict):
        store.save(decision, read_at)
    done = ops.approve(conversation_id, call_id, identity=lee)
    assert done.executed_tool_calls[0].output == "deleted web-0"


def test_the_agents_synchronous_approver_is_not_asked_about_a_call_whose_rule_escalates():
    """docs/approvals.md, "Escalation": a rule with an escalation waits for people."""
    asked = []
    ops = Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([tool_call("delete_pod", name="web-0")]),
        approval_policy=ApprovalPolicy(
            [require_approval("anyone, reminded", approvers=approvers(remind_after=60))]
        ),
        approver=lambda pending: asked.append(pending) or True,
    )

    response = ops.run("delete web-0", identity=CAROL)

    assert asked == []
    assert [c.name for c in response.pending_tool_calls] == ["delete_pod"]
