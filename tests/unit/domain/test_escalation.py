"""Escalation in the domain (docs/approvals.md, "Escalation"): when a waiting call owes its approvers a
reminder and its escalation group a notice, who may approve once it is escalated, and how two rules'
escalations combine."""

from __future__ import annotations

import pytest

from dcaf_like.domain import (
    ONE_APPROVER,
    ApprovalPolicy,
    Conversation,
    DomainError,
    Identity,
    NotAnApprover,
    ToolCallStatus,
    ToolInput,
    Trusted,
    approvers,
    require_approval,
)
from dcaf_like.domain.approvers import Escalation

GROUPS = {"leads": {"lee"}, "oncall": {"olga"}}
RULE = approvers(1, "leads", remind_after=600, escalate_after=1800, escalate_to="oncall")


def waiting(rule=RULE):
    conversation = Conversation.start("conv_1", at=0.0)
    conversation.add_user_message("delete web-1", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call(
        "delete_pod", ToolInput.of({"name": "web-1"}), requires_approval=True, requested_by="carol", at=0.0,
        approval_ttl=3600,
    )  # fmt: skip
    call.approvers = rule
    return conversation, call


def by(name: str) -> Trusted[None]:
    return Trusted(Identity(name, frozenset({"approve"})))


POLICY = ApprovalPolicy([require_approval("a lead decides", approvers=RULE)], groups=GROUPS)


def test_a_call_owes_a_reminder_then_an_escalation_each_once():
    conversation, call = waiting()

    assert [call.notice_due(t) for t in (599, 600, 1799)] == [None, "reminder", "reminder"]
    conversation.claim_notice(call.id.value, "reminder", at=600)
    assert (call.reminded_at, call.notice_due(1799), call.notice_due(1800)) == (600, None, "escalation")
    conversation.claim_notice(call.id.value, "escalation", at=1800)
    assert (call.escalated_at, call.notice_due(3000)) == (1800, None)
    with pytest.raises(DomainError):  # claimed already: a second claim is refused
        conversation.claim_notice(call.id.value, "escalation", at=1900)


def test_an_escalation_due_stands_for_the_reminder_it_overtook():
    conversation, call = waiting()

    assert call.notice_due(2000) == "escalation"
    conversation.claim_notice(call.id.value, "escalation", at=2000)
    assert (call.reminded_at, call.escalated_at, call.notice_due(2500)) == (2000, 2000, None)


def test_a_call_that_stopped_waiting_or_whose_window_closed_owes_nothing():
    conversation, call = waiting()
    assert call.notice_due(3600) is None  # the window closed: it would be refused anyway
    conversation.approve_tool_call(call.id.value, by="lee", policy=POLICY, trusted=by("lee"), at=700)
    assert call.status is ToolCallStatus.APPROVED
    assert call.notice_due(900) is None


def test_the_group_escalated_to_may_approve_from_the_escalation_on_not_before():
    conversation, call = waiting()

    with pytest.raises(NotAnApprover):
        conversation.approve_tool_call(call.id.value, by="olga", policy=POLICY, trusted=by("olga"), at=1799)
    conversation.approve_tool_call(call.id.value, by="olga", policy=POLICY, trusted=by("olga"), at=1800)

    assert (call.status, call.decided_by) == (ToolCallStatus.APPROVED, "olga")


def test_the_group_escalated_to_may_reject_once_escalated():
    conversation, call = waiting()
    with pytest.raises(NotAnApprover):
        conversation.reject_tool_call(
            call.id.value, "no", by="olga", policy=POLICY, trusted=by("olga"), at=10
        )
    conversation.reject_tool_call(call.id.value, "no", by="olga", policy=POLICY, trusted=by("olga"), at=1800)
    assert call.status is ToolCallStatus.REJECTED


def test_rules_combined_remind_at_the_earlier_time_and_escalate_only_where_both_would():
    one = approvers(1, "leads", remind_after=600, escalate_after=1800, escalate_to=("oncall", "sre"))
    other = approvers(
        2, "sre", remind_after=300, escalate_after=3600, escalate_to="oncall", at_window_end="wait"
    )

    assert one.tightened(other).escalation == Escalation(300, 3600, frozenset({"oncall"}), "reject")


def test_a_rule_that_does_not_escalate_keeps_the_other_from_widening_who_approves():
    escalating = approvers(1, "leads", remind_after=600, escalate_after=1800, escalate_to="oncall")

    for combined in (escalating.tightened(approvers(2, "sre")), approvers(2, "sre").tightened(escalating)):
        assert combined.escalation == Escalation(remind_after=600)  # still reminded, never escalated
        assert combined.escalated(0.0, 10_000.0) == frozenset()


def test_todays_rule_has_no_say_on_an_escalation():
    escalating = approvers(1, "leads", remind_after=600, escalate_after=1800, escalate_to="oncall")

    assert ONE_APPROVER.tightened(escalating) == escalating
    assert escalating.tightened(ONE_APPROVER) == escalating


def test_the_rule_in_words_says_when_it_reminds_and_escalates():
    assert RULE.describe() == (
        "1 approver from leads, not the requester; reminded after 600s, escalated to oncall after 1800s"
    )


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"remind_after": 0}, "remind_after is a number of seconds above 0"),
        ({"escalate_after": -5, "escalate_to": "oncall"}, "escalate_after is a number of seconds above 0"),
        ({"escalate_after": 60}, "names both when"),  # to whom?
        ({"escalate_to": "oncall"}, "names both when"),  # when?
        ({"at_window_end": "ignore"}, "at_window_end is 'reject' or 'wait'"),
    ],
)
def test_an_escalation_that_says_nothing_sensible_is_refused_when_declared(options, why):
    with pytest.raises(ValueError, match=why):
        approvers(1, "leads", **options)
