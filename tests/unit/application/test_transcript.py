"""What the model reads on each call of a turn: the whole conversation, each call's outcome after it."""

from __future__ import annotations

from dcaf_like import Agent, AssistantTurn, ToolResult, UserTurn
from dcaf_like.application.turn import transcript
from dcaf_like.testing import FakeRuntime, tool_call, tool_calls


def test_every_model_call_of_a_turn_reads_the_conversation_as_it_is_then(cluster):
    runtime = FakeRuntime(
        [
            tool_calls("list_pods", tool_call("list_pods", namespace=["not", "text"])),
            tool_calls(tool_call("list_pods", namespace="prod"), text="And prod."),
            tool_call("delete_pod", name="web-2"),
            "Left web-2 alone.",
        ]
    )
    agent = Agent(tools=cluster.tools(), runtime=runtime)

    first = agent.run("what runs?")
    agent.reject(first.conversation_id, first.pending_tool_calls[0].id, "not today")

    shapes = [[type(m).__name__ for m in r.messages] for r in runtime.requests]
    assert shapes == [
        ["UserTurn"],
        ["UserTurn", "AssistantTurn", "ToolResult", "ToolResult"],
        ["UserTurn", "AssistantTurn", "ToolResult", "ToolResult", "AssistantTurn", "ToolResult"],
        [
            *["UserTurn", "AssistantTurn", "ToolResult", "ToolResult", "AssistantTurn", "ToolResult"],
            *["AssistantTurn", "ToolResult"],
        ],
    ]
    second = runtime.requests[1].messages
    assert second[2] == ToolResult(second[1].tool_calls[0].id, "list_pods", second[2].content)
    assert second[3].is_error
    assert "namespace" in second[3].content
    proposal = runtime.requests[2].messages[4]
    assert proposal == AssistantTurn("And prod.", proposal.tool_calls)
    rejected = runtime.requests[3].messages[7]
    assert rejected.is_error
    assert "not today" in rejected.content
    stored = agent.conversation(first.conversation_id)
    assert stored is not None
    assert transcript(stored)[:8] == runtime.requests[3].messages
    assert runtime.requests[0].messages == (UserTurn("what runs?"),)
