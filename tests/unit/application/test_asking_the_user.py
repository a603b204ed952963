"""A run that asks the user: the model through ``ask_user``, a tool before it acts; the run suspends,
any worker takes the answer, and the tool runs again with it."""

from __future__ import annotations

import asyncio

import pytest

from dcaf_like import (
    Agent,
    AgentRequest,
    InMemoryConversationRepository,
    InvalidAnswer,
    OpenQuestions,
    QuestionAnswer,
    QuestionClosed,
    ToolContext,
    ToolResult,
    UnknownQuestion,
    UserInputRequired,
    ask_user,
    tool,
)
from dcaf_like.domain import ToolCallStatus
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


def results_seen_by_model(runtime: FakeRuntime) -> list[ToolResult]:
    return [m for m in runtime.requests[-1].messages if isinstance(m, ToolResult)]


def scaler(ran: list[str]):
    @tool(requires_approval=False)
    def scale(name: str, replicas: int, context: ToolContext) -> str:
        """Scale a deployment; to zero only once the user confirmed."""
        if replicas == 0 and not context.ask(f"Scale {name} to zero?", kind="confirmation"):
            return f"{name} left as it is"
        ran.append(name)
        return f"{name} scaled to {replicas}"

    return scale


def test_the_model_asks_through_ask_user_and_reads_the_answer_as_the_tools_result():
    ask = tool_call("ask_user", question="Which namespace?", kind="selection", options=["prod", "staging"])
    runtime = FakeRuntime([tool_calls(ask), reply("Cleaning up staging.")])
    agent = Agent(tools=[ask_user], runtime=runtime)

    asked = agent.run("clean up")

    assert asked.stop_reason == "awaiting_input"
    [question] = asked.questions
    assert (question.kind, question.prompt, question.options, question.tool) == (
        "selection",
        "Which namespace?",
        ["prod", "staging"],
        "ask_user",
    )
    assert len(runtime.requests) == 1  # the model waits for the answer too

    answered = agent.answer(asked.conversation_id, question.id, "staging")

    assert answered.stop_reason == "end_turn"
    assert answered.text == "Cleaning up staging."
    assert answered.questions == ()
    [result] = results_seen_by_model(runtime)
    assert (result.content, result.is_error) == ("staging", False)


def test_a_tool_asks_before_it_acts_and_runs_again_with_the_answer():
    ran: list[str] = []
    runtime = FakeRuntime(
        [tool_calls(tool_call("scale", name="web", replicas=0)), reply("web is down to zero.")]
    )
    agent = Agent(tools=[scaler(ran)], runtime=runtime)

    asked = agent.run("scale web to zero")

    assert ran == []  # it asked before acting
    [question] = asked.questions
    assert (question.kind, question.prompt) == ("confirmation", "Scale web to zero?")
    assert (
        agent.conversation(asked.conversation_id).tool_call(question.call_id).status is ToolCallStatus.ASKING
    )

    answered = agent.answer(asked.conversation_id, question.id, True)

    assert ran == ["web"]
    [call] = answered.executed_tool_calls
    assert (call.status, call.output) == ("executed", "web scaled to 0")
    assert answered.text == "web is down to zero."


def test_a_no_is_an_answer_the_tool_reads():
    ran: list[str] = []
    runtime = FakeRuntime([tool_calls(tool_call("scale", name="web", replicas=0)), reply("Left alone.")])
    agent = Agent(tools=[scaler(ran)], runtime=runtime)
    asked = agent.run("scale web to zero")

    answered = agent.answer(asked.conversation_id, asked.questions[0].id, False)

    assert ran == []
    assert answered.executed_tool_calls[0].output == "web left as it is"


def test_a_tool_may_raise_the_request_itself_and_find_the_answer_in_its_context():
    seen = []

    @tool(requires_approval=False)
    def restart(context: ToolContext) -> str:
        """Restart a deployment the user picks."""
        for answered in context.answers:
            seen.append(answered)
            return f"restarted {answered.value}"
        raise UserInputRequired("Restart which one?", options=["web", "api"])

    runtime = FakeRuntime([tool_calls(tool_call("restart")), reply("Done.")])
    agent = Agent(tools=[restart], runtime=runtime)
    asked = agent.run("restart one")
    [question] = asked.questions
    assert question.kind == "selection"  # options given: a choice among them

    answered = agent.answer(asked.conversation_id, question.id, "api")

    assert answered.executed_tool_calls[0].output == "restarted api"
    assert [(a.kind, a.question, a.options, a.value) for a in seen] == [
        ("selection", "Restart which one?", ("web", "api"), "api")
    ]


def test_declining_fails_the_call_and_the_model_reads_why():
    ran: list[str] = []
    runtime = FakeRuntime([tool_calls(tool_call("scale", name="web", replicas=0)), reply("Not scaled.")])
    agent = Agent(tools=[scaler(ran)], runtime=runtime)
    asked = agent.run("scale web to zero")

    declined = agent.run_request(
        AgentRequest(
            conversation_id=asked.conversation_id, answers=(QuestionAnswer.decline(asked.questions[0].id),)
        )
    )

    assert ran == []
    [call] = declined.executed_tool_calls
    assert (call.status, call.error) == (
        "failed",
        "not run: the user declined to answer 'Scale web to zero?'",
    )
    [result] = results_seen_by_model(runtime)
    assert result.is_error
    assert "declined" in result.content
    assert declined.text == "Not scaled."


def test_the_other_calls_of_the_batch_run_before_the_run_suspends():
    ran: list[str] = []
    batch = tool_calls(tool_call("scale", name="web", replicas=0), tool_call("scale", name="api", replicas=3))
    runtime = FakeRuntime([batch, reply("Both done.")])
    agent = Agent(tools=[scaler(ran)], runtime=runtime)

    asked = agent.run("scale web to 0 and api to 3")

    assert ran == ["api"]
    assert asked.stop_reason == "awaiting_input"
    assert [c.output for c in asked.executed_tool_calls] == ["api scaled to 3"]
    answered = agent.answer(asked.conversation_id, asked.questions[0].id, True)
    assert ran == ["api", "web"]
    assert answered.text == "Both done."


def test_any_worker_sharing_the_store_takes_the_answer():
    store = InMemoryConversationRepository()
    ran: list[str] = []
    worker_a = Agent(
        tools=[scaler(ran)],
        runtime=FakeRuntime([tool_calls(tool_call("scale", name="web", replicas=0))]),
        repository=store,
    )
    worker_b = Agent(tools=[scaler(ran)], runtime=FakeRuntime([reply("Scaled.")]), repository=store)
    asked = worker_a.run("scale web to zero")

    answered = worker_b.answer(asked.conversation_id, asked.questions[0].id, True)

    assert ran == ["web"]
    assert answered.text == "Scaled."


@pytest.mark.parametrize(
    ("answer", "refusal"),
    [
        (QuestionAnswer("q_forged00000000000000000", True), UnknownQuestion),
        (QuestionAnswer("QUESTION", "yes"), InvalidAnswer),  # the right id, replaced below; a string
        (QuestionAnswer("QUESTION", None), InvalidAnswer),
    ],
)
def test_a_forged_id_or_a_wrong_value_is_refused_and_the_stored_conversation_is_unchanged(answer, refusal):
    store = InMemoryConversationRepository()
    agent = Agent(
        tools=[scaler([])],
        runtime=FakeRuntime([tool_calls(tool_call("scale", name="web", replicas=0))]),
        repository=store,
    )
    asked = agent.run("scale web to zero")
    before = store.get(asked.conversation_id)
    question_id = asked.questions[0].id if answer.question_id == "QUESTION" else answer.question_id

    with pytest.raises(refusal):
        agent.answer(asked.conversation_id, question_id, answer.value)

    after = store.get(asked.conversation_id)
    assert after.version == before.version
    assert [q.status for q in after.questions.values()] == ["open"]


def test_an_answer_is_taken_once():
    runtime = FakeRuntime([tool_calls(tool_call("scale", name="web", replicas=0)), reply("Scaled.")])
    agent = Agent(tools=[scaler([])], runtime=runtime)
    asked = agent.run("scale web to zero")
    agent.answer(asked.conversation_id, asked.questions[0].id, True)

    with pytest.raises(QuestionClosed):
        agent.answer(asked.conversation_id, asked.questions[0].id, True)


def test_a_question_from_another_conversation_is_unknown_here():
    runtime = FakeRuntime([tool_calls(tool_call("scale", name="web", replicas=0))] * 2)
    agent = Agent(tools=[scaler([])], runtime=runtime)
    mine = agent.run("scale web to zero")
    theirs = agent.run("scale web to zero")

    with pytest.raises(UnknownQuestion):
        agent.answer(mine.conversation_id, theirs.questions[0].id, True)


def test_a_new_message_waits_for_the_answer():
    agent = Agent(
        tools=[scaler([])], runtime=FakeRuntime([tool_calls(tool_call("scale", name="web", replicas=0))])
    )
    asked = agent.run("scale web to zero")

    with pytest.raises(OpenQuestions):
        agent.run("something else", conversation_id=asked.conversation_id)


def test_a_tool_that_asks_again_what_was_answered_fails_rather_than_asking_forever():
    @tool(requires_approval=False)
    def stubborn() -> str:
        """Never reads its answers."""
        raise UserInputRequired("Really?", kind="confirmation")

    runtime = FakeRuntime([tool_calls(tool_call("stubborn")), reply("It failed.")])
    agent = Agent(tools=[stubborn], runtime=runtime)
    asked = agent.run("go")

    answered = agent.answer(asked.conversation_id, asked.questions[0].id, True)

    [call] = answered.executed_tool_calls
    assert call.status == "failed"
    assert call.error == "asked again a question the user already answered: 'Really?'"


def test_a_question_that_cannot_be_asked_fails_the_call_and_the_model_reads_why():
    runtime = FakeRuntime(
        [tool_calls(tool_call("ask_user", question="Which?", kind="selection")), reply("Sorry.")]
    )
    agent = Agent(tools=[ask_user], runtime=runtime)

    response = agent.run("pick")

    [call] = response.executed_tool_calls
    assert call.status == "failed"
    assert "a selection needs options" in call.error
    assert response.stop_reason == "end_turn"


def test_the_stream_says_when_a_question_is_asked():
    runtime = FakeRuntime([tool_calls(tool_call("ask_user", question="Why?"))])
    agent = Agent(tools=[ask_user], runtime=runtime)

    async def events():
        return [e async for e in agent.arun_stream("ask me")]

    streamed = asyncio.run(events())

    kinds = [e.type for e in streamed]
    assert kinds == ["run_started", "tool_call_proposed", "tool_started", "question_asked", "done"]
    asked = streamed[3].question
    assert (asked.kind, asked.prompt, asked.options) == ("text", "Why?", [])
    assert streamed[-1].response.questions == (asked,)
    assert streamed[-1].response.stop_reason == "awaiting_input"
