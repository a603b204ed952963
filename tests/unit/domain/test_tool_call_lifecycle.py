"""The ToolCall state machine: every legal move, every illegal one, and random sequences of both."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaf_like.domain import (
    ApprovalMismatch,
    Conversation,
    DomainError,
    IllegalTransition,
    InvalidToolInput,
    PendingToolCalls,
    PreviewChanged,
    ToolCallAlreadyDecided,
    ToolCallStatus,
    ToolInput,
    fingerprint,
)
from dcaf_like.domain.tool_call import can_transition

S = ToolCallStatus
LEGAL = {(S.PENDING, S.APPROVED), (S.PENDING, S.REJECTED), (S.PENDING, S.FAILED),
         (S.APPROVED, S.EXECUTED), (S.APPROVED, S.FAILED), (S.APPROVED, S.INTERRUPTED),
         (S.APPROVED, S.ASKING), (S.ASKING, S.APPROVED), (S.ASKING, S.FAILED),
         (S.APPROVED, S.PENDING)}  # fmt: skip
ILLEGAL = sorted(set(itertools.product(S, S)) - LEGAL)


def conversation_with_call(**kwargs):
    conversation = Conversation.start("conv_1", at=0.0)
    conversation.add_user_message("delete web-1", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call(
        "delete_pod", ToolInput.of({"name": "web-1"}), requires_approval=True, at=0.0, **kwargs
    )
    return conversation, call


def approve_or_answer(conversation, call_id):
    """A pending call is approved; one asking the user resumes with the answer (nothing else resumes it)."""
    if conversation.tool_call(call_id).status is S.ASKING:
        [question] = conversation.open_questions
        return conversation.answer_question(question.id, "prod", by="u", worker="w", until=9.0, at=1.0)
    return conversation.approve_tool_call(call_id, by="u", at=1.0)


MOVES = {
    S.APPROVED: approve_or_answer,
    S.ASKING: lambda c, i: c.ask_question(i, "text", "Which namespace?", at=1.0),
    S.REJECTED: lambda c, i: c.reject_tool_call(i, "no", by="u", at=1.0),
    S.EXECUTED: lambda c, i: c.record_tool_result(i, "ok", at=1.0),
    S.FAILED: lambda c, i: c.record_tool_failure(i, "boom", at=1.0),
    S.INTERRUPTED: lambda c, i: c.interrupt_tool_call(i, "worker gone", at=1.0),
    # Back to waiting: its preview, run again just before it ran, changed (ADR 38).
    S.PENDING: lambda c, i: c.reopen_stale_call(i, "replicas: 3 -> 5", at=1.0),
}
PATHS = {S.PENDING: [], S.APPROVED: [S.APPROVED], S.REJECTED: [S.REJECTED],
         S.EXECUTED: [S.APPROVED, S.EXECUTED], S.FAILED: [S.APPROVED, S.FAILED],
         S.INTERRUPTED: [S.APPROVED, S.INTERRUPTED], S.ASKING: [S.APPROVED, S.ASKING]}  # fmt: skip


def in_status(status):
    conversation, call = conversation_with_call()
    for step in PATHS[status]:
        MOVES[step](conversation, call.id.value)
    return conversation, call


@pytest.mark.parametrize(("source", "target"), sorted(LEGAL))
def test_every_legal_transition_moves_the_call(source, target):
    conversation, call = in_status(source)

    MOVES[target](conversation, call.id.value)

    assert call.status is target
    assert can_transition(source, target)


@pytest.mark.parametrize("source", [source for source, target in ILLEGAL if target is S.PENDING])
def test_only_an_approved_call_goes_back_to_waiting_when_its_preview_went_stale(source):
    conversation, call = in_status(source)

    with pytest.raises(IllegalTransition):
        MOVES[S.PENDING](conversation, call.id.value)

    assert call.status is source


def test_a_call_back_to_waiting_holds_no_decision_and_needs_its_new_preview_echoed():
    conversation, call = in_status(S.APPROVED)

    conversation.reopen_stale_call(call.id.value, "replicas: 3 -> 5", at=2.0)

    assert (call.status, call.decided_by, call.decided_at, call.preview) == (
        S.PENDING,
        None,
        None,
        "replicas: 3 -> 5",
    )
    assert call.preview_bound


@pytest.mark.parametrize(("source", "target"), [p for p in ILLEGAL if p[1] is not S.PENDING])
def test_every_illegal_transition_is_refused_naming_from_and_to(source, target):
    conversation, call = in_status(source)
    version = conversation.version

    with pytest.raises(IllegalTransition) as info:
        MOVES[target](conversation, call.id.value)

    assert (info.value.from_status, info.value.to_status) == (source.value, target.value)
    if target in (S.APPROVED, S.REJECTED):  # a decision: said as HTTP's tool_call_already_decided says it
        assert isinstance(info.value, ToolCallAlreadyDecided)
        assert f"is {source.value}, not pending: a decision is honoured once" in str(info.value)
    else:
        assert f"from {source.value} to {target.value}" in str(info.value)
    assert call.status is source
    assert conversation.version == version


def test_an_asking_call_is_not_approved_again_by_a_decision_only_by_its_answer():
    conversation, call = in_status(S.ASKING)

    with pytest.raises(IllegalTransition):
        conversation.approve_tool_call(call.id.value, by="u", at=2.0)

    assert call.status is S.ASKING
    assert (call.lease_owner, call.lease_expires_at) == (None, None)  # nobody holds it: never "interrupted"
    assert not call.is_abandoned(now=1e12)


def test_only_a_stale_preview_leads_back_to_pending_and_a_replayed_approval_is_refused_then():
    """docs/approvals.md, "What an approval binds to": single use, a call back to waiting included."""
    assert [s for s in S if can_transition(s, S.PENDING)] == [S.APPROVED]
    conversation, call = in_status(S.APPROVED)
    approved_digest = call.preview_digest
    conversation.reopen_stale_call(call.id.value, "replicas: 3 -> 5", at=2.0)

    for replayed in (approved_digest, None):
        with pytest.raises(PreviewChanged):
            call.check_preview(replayed)
    call.check_preview(call.preview_digest)


def test_an_approval_binds_to_the_proposed_name_and_arguments():
    conversation, call = conversation_with_call()

    with pytest.raises(ApprovalMismatch, match="'restart_pod' was sent"):
        conversation.approve_tool_call(call.id.value, by="u", tool_name="restart_pod")
    with pytest.raises(ApprovalMismatch, match="arguments differ"):
        conversation.approve_tool_call(call.id.value, by="u", tool_input=ToolInput.of({"name": "db-1"}))

    assert call.status is S.PENDING
    conversation.approve_tool_call(
        call.id.value, by="u", tool_name="delete_pod", tool_input=ToolInput.of({"name": "web-1"})
    )
    assert call.status is S.APPROVED


def test_the_fingerprint_depends_on_the_name_and_every_argument_but_not_key_order():
    base = fingerprint("delete_pod", ToolInput.of({"name": "a", "namespace": "b"}))

    assert base == fingerprint("delete_pod", ToolInput.of({"namespace": "b", "name": "a"}))
    assert base != fingerprint("restart_pod", ToolInput.of({"name": "a", "namespace": "b"}))
    assert base != fingerprint("delete_pod", ToolInput.of({"name": "a", "namespace": "c"}))
    assert ToolInput.of({"n": 1.0}) == ToolInput.of({"n": 1})


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.text(), JSON_VALUES, max_size=5))
@settings(max_examples=200, deadline=None)
def test_the_canonical_form_is_sorted_compact_json_that_reads_back_equal(arguments):
    tool_input = ToolInput.of(arguments)

    text = tool_input.canonical_json
    assert text == json.dumps(
        json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert json.loads(text) == arguments  # 1.0 == 1, so integral floats compare equal too
    assert ToolInput.of(json.loads(text)) == tool_input
    # What the tool and the model get is what the text says, types included (1 is not 1.0 in JSON).
    assert json.dumps(tool_input.as_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1, 2}, object(), b"bytes"])
def test_arguments_that_are_not_json_are_refused(value):
    with pytest.raises(InvalidToolInput, match="not JSON"):
        ToolInput.of({"x": value})


def test_a_recorded_input_cannot_be_changed_through_a_copy():
    _, call = conversation_with_call()

    call.proposed_input.as_dict()["name"] = "db-1"

    assert call.proposed_input.as_dict() == {"name": "web-1"}

    nested = ToolInput.of({"selector": {"app": "web"}, "names": ["web-1"]})
    copy = nested.as_dict()
    copy["selector"]["app"] = "db"
    copy["names"].append("db-1")
    assert nested.as_dict() == {"selector": {"app": "web"}, "names": ["web-1"]}


def test_a_user_turn_waits_for_pending_decisions():
    conversation, call = conversation_with_call()

    with pytest.raises(PendingToolCalls, match=call.id.value):
        conversation.add_user_message("and another thing")
    conversation.reject_tool_call(call.id.value, "no", by="u")
    conversation.add_user_message("and another thing")


OPS = st.lists(
    st.tuples(
        st.sampled_from(["propose", "approve", "approve_wrong", "reject", "result", "fail", "user"]),
        st.integers(0, 4),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_random_operation_sequences_keep_the_safety_invariants(ops):
    conversation = Conversation.start("conv_p", at=0.0)
    conversation.add_user_message("go", at=0.0)
    ever_approved: set[str] = set()
    executed: list[str] = []  # the calls whose result was recorded, each time it was
    for op, index in ops:
        ids = list(conversation.tool_calls)
        call_id = ids[index % len(ids)] if ids else "tc_missing"
        version = conversation.version
        statuses = {i: c.status for i, c in conversation.tool_calls.items()}
        try:
            if op == "propose":
                conversation.add_assistant_message("", at=0.0)
                conversation.request_tool_call("t", ToolInput.of({"i": index}), requires_approval=True)
            elif op == "approve":
                conversation.approve_tool_call(call_id, by="u")
                ever_approved.add(call_id)
            elif op == "approve_wrong":
                conversation.approve_tool_call(call_id, by="u", tool_input=ToolInput.of({"i": -1}))
                ever_approved.add(call_id)
            elif op == "reject":
                conversation.reject_tool_call(call_id, "no", by="u")
            elif op == "result":
                conversation.record_tool_result(call_id, "ok")
            elif op == "fail":
                conversation.record_tool_failure(call_id, "boom")
            else:
                conversation.add_user_message("more")
        except DomainError:
            assert conversation.version == version
            assert {i: c.status for i, c in conversation.tool_calls.items()} == statuses
        else:
            assert conversation.version > version
            if op == "result":
                executed.append(call_id)
    assert len(executed) == len(set(executed))
    for call_id, call in conversation.tool_calls.items():
        if call.status is S.EXECUTED:
            assert call_id in ever_approved
            assert call.decided_by == "u"
    assert set(executed) <= ever_approved


@pytest.mark.parametrize("status", sorted(set(S) - {S.APPROVED}))
def test_only_a_running_call_takes_a_progress_report(status):
    """docs/runs.md, "Tools on a job engine": a report says how far a running tool got."""
    conversation, call = in_status(status)
    with pytest.raises(IllegalTransition):
        conversation.report_progress(call.id.value, "copying blocks", 0.5)


@pytest.mark.parametrize("target", sorted(t for s, t in LEGAL if s is S.APPROVED))
def test_a_call_that_stops_running_drops_its_progress_report(target):
    """docs/runs.md, "Tools on a job engine": the call keeps its tool's latest report while it runs."""
    conversation, call = in_status(S.APPROVED)
    conversation.report_progress(call.id.value, "copying blocks", 0.5)
    conversation.report_progress(call.id.value, "waiting for the provider")
    assert (call.progress, call.progress_fraction) == ("waiting for the provider", None)
    MOVES[target](conversation, call.id.value)
    assert (call.progress, call.progress_fraction) == (None, None)
