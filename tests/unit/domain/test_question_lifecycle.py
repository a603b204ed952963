"""A question a tool asks the user: its state machine, its answers checked, and its call waiting for it."""

from __future__ import annotations

import itertools

import pytest

from dcaf_like.domain import (
    Conversation,
    DeciderKind,
    DecisionOutcome,
    DomainError,
    IllegalTransition,
    InvalidAnswer,
    InvalidQuestion,
    OpenQuestions,
    Question,
    QuestionClosed,
    QuestionExpired,
    QuestionStatus,
    ToolCallStatus,
    ToolInput,
    UnknownQuestion,
)
from dcaf_like.domain.question import can_transition

Q = QuestionStatus
LEGAL = {(Q.OPEN, Q.ANSWERED), (Q.OPEN, Q.DECLINED), (Q.OPEN, Q.EXPIRED)}
ILLEGAL = sorted(set(itertools.product(Q, Q)) - LEGAL)


def asking(kind="text", prompt="Which namespace?", options=(), ttl=None):
    """A conversation whose running call asked the user a question (at 1.0, for `ttl` seconds)."""
    conversation = Conversation.start("conv_q", at=0.0)
    conversation.add_user_message("clean up", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call("cleanup", ToolInput.of({}), requires_approval=True, at=0.0)
    conversation.approve_tool_call(call.id.value, by="alice", at=0.0)
    conversation.lease_tool_call(call.id.value, "worker-a", until=60.0)
    question = conversation.ask_question(call.id.value, kind, prompt, options, ttl=ttl, at=1.0)
    return conversation, call, question


MOVES = {
    Q.ANSWERED: lambda c, q: c.answer_question(
        q.id, "prod", by="alice", worker="worker-b", until=99.0, at=2.0
    ),
    Q.DECLINED: lambda c, q: c.decline_question(q.id, by="alice", at=2.0),
    # Only the system expires a question, once its window (10 s from 1.0) closed.
    Q.EXPIRED: lambda c, q: c.expire_questions(at=11.0) if q.is_open else q.expire(by="system", at=11.0),
}


def in_status(status):
    conversation, call, question = asking(ttl=10.0)
    if status is not Q.OPEN:
        MOVES[status](conversation, question)
    return conversation, call, question


@pytest.mark.parametrize(("source", "target"), sorted(LEGAL))
def test_every_legal_transition_moves_the_question(source, target):
    conversation, _, question = in_status(source)

    MOVES[target](conversation, question)

    assert question.status is target
    assert can_transition(source, target)


@pytest.mark.parametrize(("source", "target"), [p for p in ILLEGAL if p[1] is not Q.OPEN])
def test_a_question_is_answered_or_declined_once_and_a_second_time_changes_nothing(source, target):
    conversation, call, question = in_status(source)
    version, status, answer = conversation.version, call.status, question.answer
    # A reply to an expired question says it expired; to another closed one, that it was answered.
    refusal = QuestionExpired if source is Q.EXPIRED and target is not Q.EXPIRED else QuestionClosed

    with pytest.raises(refusal) as info:
        MOVES[target](conversation, question)

    assert info.value.question_id == question.id
    assert (question.status, question.answer, call.status) == (source, answer, status)
    assert conversation.version == version


def test_nothing_reopens_a_question():
    assert not any(can_transition(s, Q.OPEN) for s in Q)


def test_asking_makes_the_call_wait_without_a_lease_so_it_is_never_settled_as_interrupted():
    conversation, call, question = asking()

    assert call.status is ToolCallStatus.ASKING
    assert (call.lease_owner, call.lease_expires_at) == (None, None)
    assert conversation.settle_abandoned_calls(at=1e12) == []
    assert question.id.startswith("q_")
    assert len(question.id) == 26
    assert conversation.open_questions == [question]


def test_the_answer_claims_the_call_for_the_worker_that_took_it():
    conversation, call, question = asking()

    conversation.answer_question(question.id, "prod", by="alice", worker="worker-b", until=99.0, at=2.0)

    assert call.status is ToolCallStatus.APPROVED
    assert (call.lease_owner, call.lease_expires_at) == ("worker-b", 99.0)
    assert (question.answer, question.answered_by, question.answered_at) == ("prod", "alice", 2.0)
    assert conversation.answered_questions(call.id.value) == [question]
    assert conversation.open_questions == []


def test_declining_fails_the_call_not_run():
    conversation, call, question = asking()

    conversation.decline_question(question.id, by="alice", at=2.0)

    assert call.status is ToolCallStatus.FAILED
    assert call.error == "not run: the user declined to answer 'Which namespace?'"


def test_a_user_turn_waits_for_open_questions():
    conversation, _, question = asking()

    with pytest.raises(OpenQuestions) as info:
        conversation.add_user_message("never mind")

    assert info.value.question_ids == [question.id]


def test_a_question_this_conversation_never_asked_is_unknown_whatever_its_form():
    conversation, _, question = asking()
    _, _, theirs = asking()

    for forged in ("q_000000000000000000000000", theirs.id, "", question.id.upper()):
        with pytest.raises(UnknownQuestion):
            conversation.answer_question(forged, "prod", by="mallory", worker="w", until=9.0)
    assert question.is_open


@pytest.mark.parametrize(
    ("kind", "options", "value", "stored", "given"),
    [
        ("text", (), "prod", "prod", "prod"),
        ("text", (), "", "", ""),
        ("confirmation", (), True, "yes", True),
        ("confirmation", (), False, "no", False),
        ("selection", ("prod", "staging"), "staging", "staging", "staging"),
    ],
)
def test_an_answer_of_the_questions_type_is_taken(kind, options, value, stored, given):
    conversation, _, question = asking(kind, options=options)

    conversation.answer_question(question.id, value, by="alice", worker="w", until=9.0)

    assert (question.answer, question.value) == (stored, given)


@pytest.mark.parametrize(
    ("kind", "options", "value", "why"),
    [
        ("confirmation", (), "yes", "answered true or false, not str"),
        ("confirmation", (), 1, "answered true or false, not int"),
        ("confirmation", (), None, "answered true or false, not null"),
        ("selection", ("prod", "staging"), "dev", "'dev' is not one of the options ['prod', 'staging']"),
        ("selection", ("prod", "staging"), "Prod", "is not one of the options"),
        ("selection", ("prod", "staging"), True, "answered with a string, not bool"),
        ("text", (), ["prod"], "answered with a string, not list"),
        ("text", (), "x" * 4001, "4001 characters; at most 4000"),
    ],
)
def test_an_answer_outside_the_options_or_of_the_wrong_type_is_refused_changing_nothing(
    kind, options, value, why
):
    conversation, call, question = asking(kind, options=options)
    version = conversation.version

    with pytest.raises(InvalidAnswer) as info:
        conversation.answer_question(question.id, value, by="alice", worker="w", until=9.0)

    assert why in str(info.value)
    assert info.value.question_id == question.id
    assert (question.status, question.answer, call.status) == (Q.OPEN, None, ToolCallStatus.ASKING)
    assert conversation.version == version


@pytest.mark.parametrize(
    ("kind", "prompt", "options", "why"),
    [
        ("selection", "Which?", (), "a selection needs options"),
        ("selection", "Which?", ("a", "a"), "all different"),
        ("selection", "Which?", ("a", ""), "non-empty string"),
        ("confirmation", "Sure?", ("yes", "no"), "only a selection has options"),
        ("text", "  ", (), "needs a prompt"),
        ("essay", "Why?", (), "unknown question kind 'essay'"),
    ],
)
def test_a_question_that_cannot_be_answered_well_is_not_asked(kind, prompt, options, why):
    with pytest.raises(InvalidQuestion, match=why):
        Question.ask("tc_1", kind, prompt, options, at=0.0)


def test_only_a_running_call_asks_and_a_refused_ask_changes_nothing():
    conversation, call, _ = asking()
    version = conversation.version

    with pytest.raises(IllegalTransition):
        conversation.ask_question(call.id.value, "text", "And then?")

    assert len(conversation.questions) == 1
    assert conversation.version == version


# -- a question's window ------------------------------------------------------------------------------


def test_a_question_asked_with_a_window_expires_at_its_close():
    _, _, question = asking(ttl=10.0)

    assert question.expires_at == 11.0
    assert not question.is_expired(10.999)
    assert question.is_expired(11.0)


def test_a_question_asked_without_a_window_never_expires():
    conversation, call, question = asking()

    assert question.expires_at is None
    assert conversation.expire_questions(at=1e12) == []
    assert (question.status, call.status) == (Q.OPEN, ToolCallStatus.ASKING)


def test_past_its_window_the_system_closes_the_question_and_the_call_fails_not_run():
    conversation, call, question = asking(ttl=10.0)
    version = conversation.version

    failed = conversation.expire_questions(at=12.0)

    assert failed == [call]
    assert (question.status, question.answered_by, question.answered_at) == (Q.EXPIRED, "system", 12.0)
    assert question.answer is None
    assert call.status is ToolCallStatus.FAILED
    assert call.error.startswith("not run: the question 'Which namespace?' expired")
    assert conversation.open_questions == []
    assert conversation.version > version


def test_before_its_window_closes_a_question_is_left_open():
    conversation, call, question = asking(ttl=10.0)

    assert conversation.expire_questions(at=10.5) == []
    assert (question.status, call.status) == (Q.OPEN, ToolCallStatus.ASKING)
    with pytest.raises(DomainError, match="window is not closed"):
        question.expire(by="system", at=10.5)


@pytest.mark.parametrize("expired", [False, True], ids=["still-open", "already-expired"])
@pytest.mark.parametrize("move", [Q.ANSWERED, Q.DECLINED])
def test_a_reply_after_the_window_closed_is_refused_as_expired_changing_nothing(move, expired):
    conversation, call, question = asking(ttl=10.0)
    if expired:
        conversation.expire_questions(at=11.0)
    version, status, call_status = conversation.version, question.status, call.status
    records = list(conversation.unsaved_decisions)
    reply = {
        Q.ANSWERED: lambda: conversation.answer_question(
            question.id, "prod", by="alice", worker="w", until=99.0, at=11.0
        ),
        Q.DECLINED: lambda: conversation.decline_question(question.id, by="alice", at=11.0),
    }[move]

    with pytest.raises(QuestionExpired) as info:
        reply()

    assert info.value.question_id == question.id
    assert "expired" in str(info.value)
    assert (question.status, question.answer, call.status) == (status, None, call_status)
    assert conversation.version == version
    assert conversation.unsaved_decisions == records


def test_answering_declining_and_expiring_leave_audit_records_without_the_answer():
    answered, answered_call, first = asking(ttl=10.0)
    answered.answer_question(
        first.id, "s3cr3t-value", by="alice", worker="w", until=99.0, at=2.0, entrance="http"
    )
    declined, declined_call, second = asking(ttl=10.0)
    declined.decline_question(second.id, by="bob", at=3.0)
    expired, expired_call, third = asking(ttl=10.0)
    expired.expire_questions(at=11.0)

    records = [c.unsaved_decisions[-1] for c in (answered, declined, expired)]

    assert [(r.outcome, r.decided_by, r.decider, r.at) for r in records] == [
        (DecisionOutcome.ANSWERED, "alice", DeciderKind.HUMAN, 2.0),
        (DecisionOutcome.DECLINED, "bob", DeciderKind.HUMAN, 3.0),
        (DecisionOutcome.EXPIRED, "system", DeciderKind.SYSTEM, 11.0),
    ]
    assert [(r.question_id, r.call_id, r.tool_name) for r in records] == [
        (first.id, answered_call.id.value, "cleanup"),
        (second.id, declined_call.id.value, "cleanup"),
        (third.id, expired_call.id.value, "cleanup"),
    ]
    assert (records[0].entrance, records[2].reason) == ("http", "expired")
    assert "s3cr3t-value" not in records[0].to_json()


def test_a_refused_answer_has_a_record_naming_the_question_for_the_caller_to_write():
    conversation, call, question = asking(ttl=10.0)
    records = list(conversation.unsaved_decisions)

    record = conversation.answer_refusal(question.id, "question q expired", by="alice", at=12.0)

    assert (record.outcome, record.question_id, record.call_id) == (
        DecisionOutcome.REFUSED,
        question.id,
        call.id.value,
    )
    forged = conversation.answer_refusal("q_forged", "never asked", by="mallory", at=12.0)
    assert (forged.question_id, forged.call_id, forged.tool_name) == ("q_forged", "", "")
    assert conversation.unsaved_decisions == records  # not saved with the conversation
