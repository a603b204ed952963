"""The shipped test kit: fixtures from the pytest plugin, the builder, and the scripted runtime's
refusal to improvise."""

from __future__ import annotations

import pytest

from dcaf_like import Agent
from dcaf_like.testing import ConversationBuilder, ScriptExhausted, reply, tool_call


def test_the_plugin_provides_a_scripted_runtime_and_an_in_memory_store(fake_runtime, memory_repository):
    fake_runtime.then(reply("hello"))
    agent = Agent(runtime=fake_runtime, repository=memory_repository)

    response = agent.run("hi")

    assert response.text == "hello"
    assert memory_repository.list_ids() == [response.conversation_id]
    assert fake_runtime.requests[0].messages[-1].text == "hi"


def test_a_runtime_called_past_its_script_fails_loudly(fake_runtime):
    agent = Agent(runtime=fake_runtime.then("only answer"))
    agent.run("one")

    with pytest.raises(ScriptExhausted, match="called 2 times but its script has 1 steps"):
        agent.run("two")


def test_a_bare_tool_call_in_a_script_proposes_that_call(fake_runtime, cluster):
    agent = Agent(tools=cluster.tools(), runtime=fake_runtime.then(tool_call("delete_pod", name="web-1")))

    response = agent.run("delete web-1")

    assert response.pending_tool_calls[0].input == {"name": "web-1", "namespace": "default"}


def test_the_builder_makes_a_conversation_waiting_for_approval(memory_repository, fake_runtime, cluster):
    conversation = (
        ConversationBuilder("thread-1")
        .user("delete web-1")
        .pending("delete_pod", name="web-1", namespace="default")
        .session(step=2)
        .build()
    )
    memory_repository.save(conversation, 0)
    agent = Agent(tools=cluster.tools(), runtime=fake_runtime.then("done"), repository=memory_repository)
    [pending] = conversation.pending_tool_calls

    response = agent.approve("thread-1", pending.id.value)

    assert cluster.deleted == [("default", "web-1")]
    assert response.session == {"step": 2}
    assert response.text == "done"


# -- scripts that end, and answers that need none (issue 36) -------------------------------------------


def test_a_script_that_never_ends_is_refused_at_once_naming_the_runtime_that_fits():
    import itertools

    from dcaf_like.testing import FakeRuntime, reply

    with pytest.raises(ValueError, match=r"finite script .* use RulesRuntime\(answer\)"):
        FakeRuntime(itertools.repeat(reply("Hi.")))


def test_rules_runtime_answers_every_call_from_the_request_alone():
    from dcaf_like import Agent, ToolResult, tool
    from dcaf_like.testing import RulesRuntime, tool_call

    deleted = []

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        deleted.append(name)
        return f"{name} deleted"

    def answer(request):
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            return f"Done: {last.content}"
        return tool_call("delete_pod", name=last.text.split()[-1])

    agent = Agent(tools=[delete_pod], runtime=RulesRuntime(answer))
    for name in ("web-1", "web-2", "web-3"):  # as many turns as asked: no script runs out
        proposed = agent.run(f"delete {name}")
        done = agent.approve(proposed.conversation_id, proposed.pending_tool_calls[0].id)
        assert done.text == f"Done: {name} deleted"

    assert deleted == ["web-1", "web-2", "web-3"]
