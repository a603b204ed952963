"""A question's window: past it the answer is refused, and the next message closes the question as
expired (the call that asked fails, not run, and the model reads why); answers, declines and expiries
are in the audit trail. Time is a fake clock: nothing here waits."""

from __future__ import annotations

import math

import pytest
from test_asking_the_user import scaler

from dcaf_like import (
    Agent,
    AgentRequest,
    InMemoryConversationRepository,
    OpenQuestions,
    QuestionAnswer,
    QuestionExpired,
    ToolContext,
    ToolResult,
    tool,
)
from dcaf_like.domain import DeciderKind, DecisionOutcome, ToolCallStatus
from dcaf_like.testing import FakeRuntime, ManualClock, reply, tool_call, tool_calls

ran: list[str] = []

scale = scaler(ran)  # it asks before scaling to zero


@pytest.fixture(autouse=True)
def nothing_ran():
    ran.clear()


def asking_agent(clock: ManualClock, *replies, **settings) -> tuple[Agent, FakeRuntime]:
    runtime = FakeRuntime([tool_calls(tool_call("scale", name="web", replicas=0)), *replies])
    agent = Agent(tools=[scale], runtime=runtime, clock=clock, **settings)
    return agent, runtime


def test_a_question_takes_the_agents_approval_window():
    clock = ManualClock()
    agent, _ = asking_agent(clock, approval_ttl=60.0)

    asked = agent.run("scale web to zero")

    assert asked.questions[0].expires_at == 1060.0


def test_a_window_of_its_own_for_questions_overrides_the_approval_window():
    clock = ManualClock()
    agent, _ = asking_agent(clock, approval_ttl=60.0, question_ttl=600.0)

    asked = agent.run("scale web to zero")

    assert asked.questions[0].expires_at == 1600.0


def test_a_question_never_expires_without_a_window_or_with_an_infinite_one():
    for settings in ({}, {"approval_ttl": 60.0, "question_ttl": math.inf}):
        clock = ManualClock()
        agent, _ = asking_agent(clock, **settings)
        asked = agent.run("scale web to zero")
        clock.now += 10**9

        assert asked.questions[0].expires_at is None
        with pytest.raises(OpenQuestions):
            agent.run("never mind", conversation_id=asked.conversation_id)


@pytest.mark.parametrize("ttl", [0, -1.0, math.nan])
def test_a_window_for_questions_is_a_positive_number_of_seconds(ttl):
    with pytest.raises(ValueError, match="question_ttl"):
        Agent(runtime=FakeRuntime([]), question_ttl=ttl)


def test_before_the_window_closes_a_new_message_still_waits_for_the_answer():
    clock = ManualClock()
    agent, _ = asking_agent(clock, approval_ttl=60.0)
    asked = agent.run("scale web to zero")
    clock.now += 59.0

    with pytest.raises(OpenQuestions):
        agent.run("never mind", conversation_id=asked.conversation_id)


def test_past_the_window_the_next_message_expires_the_question_and_the_model_reads_why():
    clock = ManualClock()
    agent, runtime = asking_agent(clock, reply("I did not scale web."), approval_ttl=60.0)
    asked = agent.run("scale web to zero")
    clock.now += 60.0

    went_on = agent.run("never mind", conversation_id=asked.conversation_id)

    assert ran == []
    assert went_on.questions == ()
    assert went_on.text == "I did not scale web."
    [call] = went_on.executed_tool_calls
    assert call.status == "failed"
    assert call.error.startswith("not run: the question 'Scale web to zero?' expired")
    [result] = [m for m in runtime.requests[-1].messages if isinstance(m, ToolResult)]
    assert result.is_error
    assert "expired" in result.content
    stored = agent.repository.get(asked.conversation_id)
    [question] = stored.questions.values()
    assert (question.status, question.answered_by, question.answered_at) == ("expired", "system", 1060.0)
    assert stored.tool_call(call.id).status is ToolCallStatus.FAILED
    assert stored.messages[-2].text == "never mind"


@pytest.mark.parametrize("declined", [False, True], ids=["answer", "decline"])
@pytest.mark.parametrize("stale", [False, True], ids=["still-open", "already-expired"])
def test_an_answer_after_the_window_closed_is_refused_and_changes_nothing_stored(declined, stale):
    clock = ManualClock()
    store = InMemoryConversationRepository()
    agent, _ = asking_agent(clock, reply("Ok."), reply("Ok."), approval_ttl=60.0, repository=store)
    asked = agent.run("scale web to zero")
    question_id = asked.questions[0].id
    clock.now += 61.0
    if stale:  # a message already closed it
        agent.run("never mind", conversation_id=asked.conversation_id)
    before = store.get(asked.conversation_id)
    answer = QuestionAnswer.decline(question_id) if declined else QuestionAnswer(question_id, True)

    with pytest.raises(QuestionExpired) as info:
        agent.run_request(
            AgentRequest(conversation_id=asked.conversation_id, answers=(answer,), user="alice")
        )

    assert info.value.question_id == question_id
    assert ran == []
    after = store.get(asked.conversation_id)
    assert after.version == before.version
    assert [q.status.value for q in after.questions.values()] == ["expired" if stale else "open"]
    refusal = store.decision_records(asked.conversation_id)[0]  # newest first
    assert (refusal.outcome, refusal.question_id, refusal.decided_by) == (
        DecisionOutcome.REFUSED,
        question_id,
        "alice",
    )
    assert "expired" in refusal.reason


def test_answers_declines_and_expiries_are_in_the_audit_trail_without_the_answer():
    clock = ManualClock()

    @tool(requires_approval=False)
    def login(context: ToolContext) -> str:
        """Log in with a one-time code the user types."""
        return f"logged in with {len(context.ask('Your one-time code?'))} characters"

    calls = [tool_calls(tool_call("login")), reply("Done.")] * 3
    agent = Agent(tools=[login], runtime=FakeRuntime(calls), clock=clock, approval_ttl=60.0)
    answered = agent.run("log in")
    agent.answer(answered.conversation_id, answered.questions[0].id, "481-516-secret", user="alice")
    declined = agent.run("log in again")
    agent.run_request(
        AgentRequest(
            conversation_id=declined.conversation_id,
            answers=(QuestionAnswer.decline(declined.questions[0].id),),
            user="bob",
        )
    )
    expired = agent.run("and once more")
    clock.now += 60.0
    agent.run("forget it", conversation_id=expired.conversation_id)

    records = agent.repository.decision_records(limit=10)[::-1]  # oldest first

    assert [(r.outcome, r.decided_by, r.decider, r.tool_name) for r in records] == [
        (DecisionOutcome.ANSWERED, "alice", DeciderKind.HUMAN, "login"),
        (DecisionOutcome.DECLINED, "bob", DeciderKind.HUMAN, "login"),
        (DecisionOutcome.EXPIRED, "system", DeciderKind.SYSTEM, "login"),
    ]
    asked = [answered, declined, expired]
    assert [r.question_id for r in records] == [a.questions[0].id for a in asked]
    assert [r.call_id for r in records] == [a.questions[0].call_id for a in asked]
    assert [r.conversation_id for r in records] == [a.conversation_id for a in asked]
    assert (records[2].at, records[2].reason) == (1060.0, "expired")
    assert all(r.entrance == "python" for r in records)
    assert not any("481-516-secret" in r.to_json() for r in records)


def test_a_refused_answer_is_recorded_without_the_value_it_carried():
    agent, _ = asking_agent(ManualClock())
    asked = agent.run("scale web to zero")

    with pytest.raises(Exception, match="answered true or false"):
        agent.answer(asked.conversation_id, asked.questions[0].id, "my-password-123")

    [refusal] = agent.repository.decision_records(asked.conversation_id)
    assert (refusal.outcome, refusal.question_id) == (DecisionOutcome.REFUSED, asked.questions[0].id)
    assert "my-password-123" not in refusal.to_json()
