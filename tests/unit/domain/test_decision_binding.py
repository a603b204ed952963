"""What an approval binds besides the proposal's fingerprint: the platform context the call was proposed
in (its credentials aside), and the policy as the call would run at the moment it is approved."""

from __future__ import annotations

import json

import pytest

from dcaf_like.domain import (
    ApprovalPolicy,
    ContextChanged,
    Conversation,
    DeciderKind,
    IllegalTransition,
    PlatformContext,
    PolicyDenied,
    ToolCallStatus,
    ToolInput,
    argument_in,
    context_in,
    deny,
)

DEV = {"tenant_name": "dev", "k8s_namespace": "default", "duplo_token": "dev-token"}
NO_KUBE_SYSTEM = ApprovalPolicy(
    [deny("kube-system is off limits", when=argument_in("namespace", "kube-system"))]
)


def proposed(context=DEV, *, editable=True, secret=frozenset()):
    conversation = Conversation.start("conv_1", at=0.0)
    conversation.use_platform_context(PlatformContext(context))
    conversation.add_user_message("delete web-1", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call(
        "delete_pod",
        ToolInput.of({"name": "web-1", "namespace": "default", "password": "proposed-secret"}),
        requires_approval=True,
        editable=editable,
        secret_arguments=frozenset(secret),
        at=0.0,
    )
    return conversation, call


def test_a_call_records_the_fingerprint_of_the_context_it_was_proposed_in_without_its_credentials():
    _, call = proposed()

    assert call.context_fingerprint == PlatformContext(DEV).fingerprint
    assert call.context_fingerprint == PlatformContext({**DEV, "duplo_token": "another"}).fingerprint
    assert call.context_fingerprint != PlatformContext({**DEV, "tenant_name": "production"}).fingerprint
    assert "dev-token" not in repr(call)


def test_an_approval_with_refreshed_credentials_is_honoured():
    conversation, call = proposed()
    conversation.use_platform_context(PlatformContext({**DEV, "duplo_token": "refreshed"}))

    conversation.approve_tool_call(call.id.value, by="alice", at=1.0)

    assert call.status is ToolCallStatus.APPROVED


@pytest.mark.parametrize(
    "other",
    [
        {**DEV, "tenant_name": "production"},
        {**DEV, "k8s_namespace": "kube-system"},
        {**DEV, "aws_account": "123456789012"},
        {"duplo_token": "dev-token"},
        {},
    ],
    ids=["tenant", "namespace", "a-key-added", "keys-removed", "none"],
)
def test_an_approval_under_another_context_is_refused_and_changes_nothing(other):
    conversation, call = proposed()
    version = conversation.version
    conversation.use_platform_context(PlatformContext(other))

    with pytest.raises(ContextChanged) as refused:
        conversation.approve_tool_call(call.id.value, by="alice", at=1.0)

    assert refused.value.call_id == call.id.value
    assert call.status is ToolCallStatus.PENDING
    assert (call.decided_by, call.approved_input) == (None, None)
    assert conversation.version == version
    assert conversation.unsaved_decisions == []


def test_a_rejection_is_honoured_under_any_context():
    conversation, call = proposed()
    conversation.use_platform_context(PlatformContext({"tenant_name": "production"}))

    conversation.reject_tool_call(call.id.value, "not now", by="alice", at=1.0)

    assert call.status is ToolCallStatus.REJECTED


def test_integral_floats_in_a_context_are_the_same_context():
    assert PlatformContext({"account": 1.0}).fingerprint == PlatformContext({"account": 1}).fingerprint


def test_an_edit_the_policy_denies_is_refused_at_approval_and_changes_nothing():
    conversation, call = proposed()
    version = conversation.version
    edit = ToolInput.of({"name": "coredns", "namespace": "kube-system", "password": "proposed-secret"})

    with pytest.raises(PolicyDenied) as refused:
        conversation.approve_tool_call(call.id.value, by="alice", edited_input=edit, policy=NO_KUBE_SYSTEM)

    assert (refused.value.call_id, refused.value.reason) == (call.id.value, "kube-system is off limits")
    assert call.status is ToolCallStatus.PENDING
    assert conversation.version == version
    conversation.approve_tool_call(call.id.value, by="alice", policy=NO_KUBE_SYSTEM)  # as proposed: fine
    assert call.status is ToolCallStatus.APPROVED


def test_the_policy_at_approval_sees_the_context_the_call_would_run_in():
    """Its credentials included: a rule may read them (the non-secret keys cannot have changed)."""
    conversation, call = proposed()
    conversation.use_platform_context(PlatformContext({**DEV, "duplo_token": "revoked"}))
    policy = ApprovalPolicy([deny("that token was revoked", when=context_in("duplo_token", "revoked"))])

    with pytest.raises(PolicyDenied):
        conversation.approve_tool_call(call.id.value, by="alice", policy=policy)


def test_a_policy_whose_rule_fails_at_approval_denies_it():
    conversation, call = proposed()

    def broken(_tool, _args, _ctx):
        raise RuntimeError("the rule's lookup is down")

    with pytest.raises(PolicyDenied, match="its condition failed"):
        conversation.approve_tool_call(
            call.id.value, by="alice", policy=ApprovalPolicy([deny("x", when=broken)])
        )


def test_a_decided_call_is_refused_as_decided_whatever_the_context():
    conversation, call = proposed()
    conversation.approve_tool_call(call.id.value, by="alice")
    conversation.use_platform_context(PlatformContext({"tenant_name": "production"}))

    with pytest.raises(IllegalTransition):
        conversation.approve_tool_call(call.id.value, by="alice", policy=NO_KUBE_SYSTEM)


def test_what_decided_is_recorded_apart_from_the_name_it_decided_under():
    conversation, call = proposed()
    _, other = proposed()

    conversation.approve_tool_call(call.id.value, by="policy", at=1.0)  # a person whose key says "policy"
    other.reject("denied by policy: no", by="policy", at=1.0, kind=DeciderKind.POLICY)

    [approved] = conversation.unsaved_decisions
    assert (call.decided_by, call.decided_by_kind) == ("policy", DeciderKind.HUMAN)
    assert (approved.decided_by, approved.decider) == ("policy", DeciderKind.HUMAN)
    assert (other.decided_by, other.decided_by_kind) == ("policy", DeciderKind.POLICY)


def test_an_approval_shows_secret_arguments_masked_edits_included():
    conversation, call = proposed(secret={"password"})
    edit = ToolInput.of({"name": "web-1", "namespace": "default", "password": "chosen-by-a-human"})

    conversation.approve_tool_call(call.id.value, by="alice", edited_input=edit)

    [record] = conversation.unsaved_decisions
    assert call.edited
    shown = (call.shown_json(call.proposed_input), call.shown_json(call.effective_input))
    for text in (*shown, repr(record)):
        assert "chosen-by-a-human" not in text
        assert "proposed-secret" not in text
    assert json.loads(call.shown_json(call.effective_input))["password"] == "***"
    assert call.effective_input.as_dict()["password"] == "chosen-by-a-human"  # the tool gets it


def test_a_rejection_records_its_kind():
    conversation, call = proposed()

    conversation.reject_tool_call(call.id.value, "expired", by="system", kind=DeciderKind.SYSTEM)

    [record] = conversation.unsaved_decisions
    assert (call.decided_by_kind, record.decider, record.reason) == (
        DeciderKind.SYSTEM,
        DeciderKind.SYSTEM,
        "expired",
    )
