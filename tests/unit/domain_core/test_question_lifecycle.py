"""A question a tool asks the user: its state machine, its answers checked, and its call waiting for it."""

from __future__ import annotations

import itertools

import pytest

from dcaf_like.domain import (
    Conversation,
    IllegalTransition,
    InvalidAnswer,
    InvalidQuestion,
    OpenQuestions,
    Question,
    QuestionClosed,
    QuestionStatus,
    ToolCallStatus,
    ToolInput,
    UnknownQuestion,
)
from dcaf_like.domain.question import can_transition

Q = QuestionStatus
LEGAL = {(Q.OPEN, Q.ANSWERED), (Q.OPEN, Q.DECLINED)}
ILLEGAL = sorted(set(itertools.product(Q, Q)) - LEGAL)


def asking(kind="text", prompt="Which namespace?", options=()):
    """A conversation whose running call asked the user a question."""
    conversation = Conversation.start("conv_q", at=0.0)
    conversation.add_user_message("clean up", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call("cleanup", ToolInput.of({}), requires_approval=True, at=0.0)
    conversation.approve_tool_call(call.id.value, by="alice", at=0.0)
    conversation.lease_tool_call(call.id.value, "worker-a", until=60.0)
    question = conversation.ask_question(call.id.value, kind, prompt, options, at=1.0)
    return conversation, call, question


MOVES = {
    Q.ANSWERED: lambda c, q: c.answer_question(
        q.id, "prod", by="alice", worker="worker-b", until=99.0, at=2.0
    ),
    Q.DECLINED: lambda c, q: c.decline_question(q.id, by="alice", at=2.0),
}


def in_status(status):
    conversation, call, question = asking()
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

    with pytest.raises(QuestionClosed) as info:
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
