"""Approvals by teams in the domain: how many distinct approvers, from which groups, in which stages,
the requester kept out, every approval bound to what it approved (an edit restarts the count), and a
rejection by anyone a stage counts."""

from __future__ import annotations

import pytest

from dcaf_like.domain import (
    ONE_APPROVER,
    AlreadyApproved,
    ApprovalMismatch,
    ApprovalPolicy,
    ContextChanged,
    Conversation,
    DecisionOutcome,
    Identity,
    NotAnApprover,
    PlatformContext,
    PolicyDenied,
    ToolCallAlreadyDecided,
    ToolCallStatus,
    ToolInput,
    Trusted,
    approvers,
    argument_in,
    context_in,
    deny,
    require_approval,
)
from dcaf_like.domain.approvers import Approval, Approvers, Stage

GROUPS = {"sre": {"alice", "bob", "erin"}, "dev": {"dave"}, "leads": {"lena"}}
PROD = {"tenant_name": "prod", "duplo_token": "t-1"}
TWO_SRE = ApprovalPolicy(
    [require_approval("prod needs two SREs", approvers=approvers(2, "sre"))], groups=GROUPS
)


def as_(name: str, *scopes: str) -> Trusted[None]:
    return Trusted(Identity(name, frozenset({"approve", *scopes})))


def proposed(policy: ApprovalPolicy = TWO_SRE, *, requester: str = "carol", context=PROD):
    conversation = Conversation.start("conv_1", at=0.0)
    conversation.use_platform_context(PlatformContext(context))
    conversation.add_user_message("delete web-1", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    arguments = {"name": "web-1", "namespace": "prod"}
    call = conversation.request_tool_call(
        "delete_pod",
        ToolInput.of(arguments),
        requires_approval=True,
        editable=True,
        requested_by=requester,
        at=0.0,
    )
    decision = policy.decide(
        "delete_pod", arguments, tool_requires_approval=True, context=conversation.platform_context
    )
    call.approvers = decision.approvers
    return conversation, call


def approve(conversation, call, name, *scopes, policy=TWO_SRE, at=1.0, **kwargs):
    return conversation.approve_tool_call(
        call.id.value, by=name, policy=policy, trusted=as_(name, *scopes), at=at, **kwargs
    )


# -- the rule ----------------------------------------------------------------------------------------


def test_without_a_rule_a_call_needs_todays_one_approver_and_the_requester_may_be_it():
    conversation, call = proposed(ApprovalPolicy(groups=GROUPS))
    assert call.approvers is ONE_APPROVER

    approve(conversation, call, "carol", policy=ApprovalPolicy())

    assert call.status is ToolCallStatus.APPROVED
    assert call.approvals == ()


def test_a_rule_on_the_arguments_or_context_names_the_approvers_and_others_keep_todays_rule():
    prod_only = ApprovalPolicy(
        [
            require_approval(
                "prod needs two SREs", when=context_in("tenant_name", "prod"), approvers=approvers(2, "sre")
            )
        ]
    )

    assert prod_only.decide(
        "delete_pod", {}, tool_requires_approval=True, context=PlatformContext(PROD)
    ).approvers == (approvers(2, "sre"))
    dev = PlatformContext({"tenant_name": "dev"})
    assert (
        prod_only.decide("delete_pod", {}, tool_requires_approval=True, context=dev).approvers is ONE_APPROVER
    )


def test_two_rules_both_apply_and_todays_single_approval_is_met_by_any_other_stage():
    both = ApprovalPolicy(
        [
            require_approval("prod", approvers=approvers(2, "sre")),
            require_approval("leads first", approvers=approvers(1, "leads")),
            require_approval("again", approvers=approvers(2, "sre", requester_may_approve=True)),
        ]
    )

    decided = both.decide("delete_pod", {}, tool_requires_approval=False, context=PlatformContext())

    assert [(s.count, sorted(s.groups)) for s in decided.approvers.stages] == [(2, ["sre"]), (1, ["leads"])]
    assert decided.approvers.requester_may_approve is False
    assert decided.reason == "prod"
    assert ONE_APPROVER.tightened(approvers(2, "sre")) == approvers(2, "sre")


def test_two_distinct_members_approve_and_only_the_second_approval_approves_the_call():
    conversation, call = proposed()

    approve(conversation, call, "alice", at=1.0)

    assert call.status is ToolCallStatus.PENDING
    assert [(a.by, a.at, a.stage) for a in call.approvals] == [("alice", 1.0, 0)]
    assert [
        (n.count, n.groups) for n in call.approvers.still_needed(call.approvals, call.approved_fingerprint)
    ] == [(1, frozenset({"sre"}))]

    approve(conversation, call, "bob", at=2.0)

    assert call.status is ToolCallStatus.APPROVED
    assert (call.decided_by, call.decided_at) == ("bob", 2.0)
    assert [r.outcome for r in conversation.unsaved_decisions] == [
        DecisionOutcome.COUNTED,
        DecisionOutcome.APPROVED,
    ]
    assert [r.decided_by for r in conversation.unsaved_decisions] == ["alice", "bob"]


def test_an_identity_counts_once_however_often_it_approves():
    conversation, call = proposed()
    approve(conversation, call, "alice")

    with pytest.raises(AlreadyApproved):
        approve(conversation, call, "alice", at=2.0)

    assert call.status is ToolCallStatus.PENDING
    assert len(call.approvals) == 1


def test_the_requester_does_not_count_unless_the_rule_allows_it():
    conversation, call = proposed(requester="alice")
    with pytest.raises(NotAnApprover, match="requester"):
        approve(conversation, call, "alice")
    assert call.approvals == ()

    lenient = ApprovalPolicy(
        [require_approval("two SREs", approvers=approvers(2, "sre", requester_may_approve=True))],
        groups=GROUPS,
    )
    conversation, call = proposed(lenient, requester="alice")
    approve(conversation, call, "alice", policy=lenient)
    approve(conversation, call, "bob", policy=lenient)
    assert call.status is ToolCallStatus.APPROVED


def test_someone_outside_the_groups_does_not_count_nor_does_nobody():
    conversation, call = proposed()

    with pytest.raises(NotAnApprover, match="2 approvers from sre"):
        approve(conversation, call, "dave")
    with pytest.raises(NotAnApprover):
        conversation.approve_tool_call(
            call.id.value, by="user", policy=TWO_SRE, at=1.0
        )  # nobody authenticated

    assert call.approvals == ()


def test_an_approve_scope_of_the_group_makes_a_key_holder_a_member():
    conversation, call = proposed()

    approve(conversation, call, "frank", "approve:sre")
    approve(conversation, call, "gina", "approve:sre")

    assert call.status is ToolCallStatus.APPROVED


def test_stages_count_in_order_and_an_identity_counts_in_one_stage_only():
    staged = ApprovalPolicy(
        [require_approval("lead, then SRE", approvers=approvers(1, "leads", then=approvers(1, "sre")))],
        groups={**GROUPS, "leads": {"lena", "alice"}},
    )
    conversation, call = proposed(staged)

    with pytest.raises(NotAnApprover, match="stage 1"):
        approve(conversation, call, "bob", policy=staged)  # an SRE before the lead
    approve(conversation, call, "alice", policy=staged)  # alice, as a lead
    with pytest.raises(AlreadyApproved):
        approve(conversation, call, "alice", policy=staged)  # not again, as an SRE
    assert call.status is ToolCallStatus.PENDING
    approve(conversation, call, "bob", policy=staged)

    assert call.status is ToolCallStatus.APPROVED
    assert [(a.by, a.stage) for a in call.approvals] == [("alice", 0), ("bob", 1)]


def test_an_edit_restarts_the_count_and_the_others_approve_what_will_run():
    conversation, call = proposed()
    approve(conversation, call, "alice")

    approve(conversation, call, "bob", edited_input=ToolInput.of({"name": "web-2", "namespace": "prod"}))

    assert call.status is ToolCallStatus.PENDING  # bob's approval of the edit is the first that counts
    assert [a.by for a in call.counted_approvals] == ["bob"]
    assert call.effective_input.as_dict() == {"name": "web-2", "namespace": "prod"}
    with pytest.raises(ApprovalMismatch):  # an approval of the proposal as sent: refused
        conversation.approve_tool_call(
            call.id.value,
            by="alice",
            tool_input=ToolInput.of({"name": "web-1", "namespace": "prod"}),
            policy=TWO_SRE,
            trusted=as_("alice"),
            at=3.0,
        )
    approve(conversation, call, "alice", at=4.0)  # alice again, now of the edit

    assert call.status is ToolCallStatus.APPROVED
    assert call.effective_input.as_dict() == {"name": "web-2", "namespace": "prod"}
    assert call.edited


def test_each_approval_is_bound_to_the_context_and_checked_by_the_policy():
    conversation, call = proposed()
    approve(conversation, call, "alice")

    conversation.use_platform_context(PlatformContext({"tenant_name": "dev"}))
    with pytest.raises(ContextChanged):
        approve(conversation, call, "bob")
    conversation.use_platform_context(PlatformContext({**PROD, "duplo_token": "refreshed"}))
    no_prod = TWO_SRE.with_rules(deny("frozen", when=argument_in("namespace", "prod")))
    with pytest.raises(PolicyDenied):
        approve(conversation, call, "bob", policy=no_prod)

    assert [a.by for a in call.approvals] == ["alice"]
    approve(conversation, call, "bob")
    assert call.status is ToolCallStatus.APPROVED


def test_a_rule_in_force_at_an_approval_tightens_a_call_proposed_under_todays_rule():
    conversation, call = proposed(ApprovalPolicy())

    approve(conversation, call, "alice")

    assert call.status is ToolCallStatus.PENDING
    assert call.approvers == approvers(2, "sre")


def test_a_rejection_by_an_eligible_approver_or_the_requester_rejects_and_others_are_refused():
    conversation, call = proposed()
    approve(conversation, call, "alice")

    with pytest.raises(NotAnApprover):
        conversation.reject_tool_call(
            call.id.value, "no", by="dave", policy=TWO_SRE, trusted=as_("dave"), at=2.0
        )
    assert call.status is ToolCallStatus.PENDING

    conversation.reject_tool_call(
        call.id.value, "not today", by="bob", policy=TWO_SRE, trusted=as_("bob"), at=3.0
    )
    assert call.status is ToolCallStatus.REJECTED

    conversation, call = proposed()
    conversation.reject_tool_call(
        call.id.value, "never mind", by="carol", policy=TWO_SRE, trusted=as_("carol")
    )
    assert call.status is ToolCallStatus.REJECTED


def test_a_decided_call_takes_no_more_approvals():
    conversation, call = proposed()
    approve(conversation, call, "alice")
    approve(conversation, call, "bob")

    with pytest.raises(ToolCallAlreadyDecided):
        approve(conversation, call, "erin")


# -- rules of several stages (docs/approvals.md, "Approvals by teams") --------------------------------

ANYONE_THEN_SRE = ApprovalPolicy(
    [require_approval("anyone, then an SRE", approvers=approvers(1, then=approvers(1, "sre")))], groups=GROUPS
)


def test_a_stage_by_anyone_before_another_stage_is_kept_and_needs_its_own_approver():
    decided = ANYONE_THEN_SRE.decide("delete_pod", {}, tool_requires_approval=True, context=PlatformContext())
    assert decided.approvers.describe() == "1 approver, then 1 approver from sre, not the requester"

    conversation, call = proposed(ANYONE_THEN_SRE)
    approve(conversation, call, "bob", policy=ANYONE_THEN_SRE)  # an SRE, counted for the first stage

    assert call.status is ToolCallStatus.PENDING
    assert [
        (n.stage, n.groups) for n in call.approvers.still_needed(call.approvals, call.approved_fingerprint)
    ] == [(1, frozenset({"sre"}))]
    with pytest.raises(AlreadyApproved):
        approve(conversation, call, "bob", policy=ANYONE_THEN_SRE, at=2.0)
    approve(conversation, call, "erin", policy=ANYONE_THEN_SRE, at=3.0)

    assert call.status is ToolCallStatus.APPROVED
    assert [(a.by, a.stage) for a in call.approvals] == [("bob", 0), ("erin", 1)]


def test_two_stages_of_one_kind_stay_two_stages_of_distinct_people():
    twice = approvers(1, "sre", then=approvers(1, "sre"))
    policy = ApprovalPolicy([require_approval("two SREs in turn", approvers=twice)], groups=GROUPS)
    conversation, call = proposed(policy)

    assert len(call.approvers.stages) == 2
    approve(conversation, call, "alice", policy=policy)
    assert call.status is ToolCallStatus.PENDING
    approve(conversation, call, "bob", policy=policy, at=2.0)
    assert call.status is ToolCallStatus.APPROVED


def test_rules_combined_keep_every_stage_of_each_and_todays_rule_adds_none():
    staged = approvers(1, then=approvers(1, "sre"))

    assert ONE_APPROVER.tightened(staged).stages == staged.stages
    assert staged.tightened(ONE_APPROVER).stages == staged.stages
    assert staged.tightened(staged) == staged  # one rule twice is met once
    assert [s.describe() for s in staged.tightened(approvers(2, "sre")).stages] == [
        "1 approver",
        "1 approver from sre",
        "2 approvers from sre",
    ]
    assert [
        s.describe()
        for s in approvers(1, "sre").tightened(approvers(1, "sre", then=approvers(1, "sre"))).stages
    ] == [
        "1 approver from sre",
        "1 approver from sre",
    ]


def test_an_approval_counted_before_a_rule_tightened_stays_with_the_stage_it_was_given_for():
    conversation, call = proposed(ANYONE_THEN_SRE)
    approve(conversation, call, "dave", policy=ANYONE_THEN_SRE)  # not an SRE: the stage by anyone

    with_leads = ANYONE_THEN_SRE.with_rules(require_approval("and a lead", approvers=approvers(1, "leads")))
    approve(conversation, call, "bob", policy=with_leads, at=2.0)

    assert call.status is ToolCallStatus.PENDING  # dave's approval did not become an SRE's
    assert [(a.by, a.stage) for a in call.approvals] == [("dave", 0), ("bob", 1)]
    assert [n.groups for n in call.approvers.still_needed(call.approvals, call.approved_fingerprint)] == [
        frozenset({"leads"})
    ]
    approve(conversation, call, "lena", policy=with_leads, at=3.0)
    assert call.status is ToolCallStatus.APPROVED


def test_an_approval_for_a_stage_a_tighter_rule_replaced_no_longer_counts():
    by_anyone = Approvers((Stage(2),), requester_may_approve=False)
    given = (Approval("dave", 1.0, 0, "f"),)

    assert by_anyone.tightened(by_anyone).carried(given, by_anyone) == given
    replaced = Approvers((Stage(2, frozenset({"sre"})),))
    assert replaced.carried(given, by_anyone) == ()
