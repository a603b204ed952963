"""Arguments marked secret: the tool gets them, people and responses see them masked."""

from __future__ import annotations

import json

import pytest

from dcaf_like import Agent, ApprovalMismatch, ToolDecision, tool
from dcaf_like.helpdesk.protocol import assistant_message
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

PASSWORD = "hunter2-the-real-one"


def rotation_agent(*script) -> tuple[Agent, list[tuple[str, str]]]:
    received: list[tuple[str, str]] = []

    @tool(secret=["new_password"], editable=True)
    def rotate_password(user: str, new_password: str) -> str:
        """Set a user's password."""
        received.append((user, new_password))
        return f"password of {user} changed"

    agent = Agent(tools=[rotate_password], runtime=FakeRuntime(script))
    return agent, received


def propose() -> object:
    return tool_calls(tool_call("rotate_password", user="bob", new_password=PASSWORD))


def test_a_secret_argument_is_masked_everywhere_a_person_looks_and_reaches_the_tool_intact():
    agent, received = rotation_agent(propose(), reply("Done."))

    first = agent.run("rotate bob's password")
    [pending] = first.pending_tool_calls
    second = agent.approve(first.conversation_id, pending.id)

    assert pending.input == {"user": "bob", "new_password": "***"}
    assert received == [("bob", PASSWORD)]
    for shown in (assistant_message(first), assistant_message(second)):
        assert PASSWORD not in json.dumps(shown)


def test_an_approval_echoing_the_masked_arguments_binds_to_the_proposal():
    agent, received = rotation_agent(propose(), reply("Done."))
    first = agent.run("rotate bob's password")
    [pending] = first.pending_tool_calls

    agent.decide(first.conversation_id, [ToolDecision(pending.id, True, arguments=pending.input)])

    assert received == [("bob", PASSWORD)]


def test_echoing_a_different_secret_is_a_mismatch_not_an_approval():
    agent, received = rotation_agent(propose())
    first = agent.run("rotate bob's password")
    [pending] = first.pending_tool_calls

    decision = ToolDecision(pending.id, True, arguments={"user": "bob", "new_password": "guessed"})
    with pytest.raises(ApprovalMismatch):
        agent.decide(first.conversation_id, [decision])
    assert received == []


def test_an_approver_can_replace_a_secret_without_reading_it():
    agent, received = rotation_agent(propose(), reply("Done."), propose(), reply("Done."))
    first = agent.run("rotate bob's password")
    keep_secret = {"user": "alice", "new_password": "***"}

    call_id = first.pending_tool_calls[0].id
    second = agent.approve(first.conversation_id, call_id, edited_arguments=keep_secret)
    third = agent.run("again", conversation_id=first.conversation_id)
    agent.approve(
        first.conversation_id,
        third.pending_tool_calls[0].id,
        edited_arguments={"user": "bob", "new_password": "chosen-by-the-approver"},
    )

    assert received == [("alice", PASSWORD), ("bob", "chosen-by-the-approver")]
    assert second.executed_tool_calls[0].input == keep_secret


def test_marking_an_argument_the_tool_does_not_take_is_refused():
    with pytest.raises(ValueError, match="no argument passwd to mark secret"):

        @tool(secret=["passwd"])
        def rotate_password(user: str, new_password: str) -> str:
            """Set a user's password."""
            return ""
