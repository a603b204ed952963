"""What the model reads on each call of a turn: the whole conversation, each call's outcome after it."""

from __future__ import annotations

from dcaf_like import Agent, AssistantTurn, ToolResult, UserTurn, attachment
from dcaf_like.application.transcript import transcript
from dcaf_like.domain import Conversation, ToolInput
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


# -- what a tool returned besides text ---------------------------------------------------------------


def _conversation_with_a_graph() -> Conversation:
    conversation = Conversation.start(at=1.0)
    conversation.add_user_message("why is web-2 slow?", at=1.0)
    conversation.add_assistant_message("Looking.", at=2.0)
    for name in ("cpu_graph", "list_pods"):
        conversation.request_tool_call(name, ToolInput.of({}), requires_approval=False, at=2.0)
    graph, listing = conversation.tool_calls.values()
    conversation.approve_tool_call(graph.id.value, by="policy", at=3.0)
    conversation.record_tool_result(graph.id.value, "CPU of web-2", attachments=(GRAPH, LOGS), at=3.0)
    conversation.approve_tool_call(listing.id.value, by="policy", at=3.0)
    conversation.record_tool_result(listing.id.value, "web-2 Running", at=3.0)
    return conversation


GRAPH = attachment("image", media_type="image/png", data="iVBORw0KGgo=")
LOGS = attachment("file", media_type="application/gzip", data="H4sI", name="web-2.log.gz")


def test_a_tools_images_follow_the_results_of_its_proposal_for_a_model_that_takes_them():
    conversation = _conversation_with_a_graph()

    messages = transcript(conversation, accepts=frozenset({"image", "file"}))

    assert [type(m).__name__ for m in messages] == [
        "UserTurn",
        "AssistantTurn",
        "ToolResult",
        "ToolResult",
        "UserTurn",
    ]
    graph = messages[2]
    assert graph.content.startswith("CPU of web-2\n[It also returned image/png image, file 'web-2.log.gz'")
    assert messages[3].content == "web-2 Running"  # every result before the next user-role turn
    shown = messages[4]
    assert isinstance(shown, UserTurn)
    assert shown.attachments == (GRAPH, LOGS)
    assert shown.text.startswith("[Not from the user")
    assert f"cpu_graph ({graph.call_id})" in shown.text


def test_a_model_that_cannot_take_them_reads_a_note_naming_each_one_left_out():
    conversation = _conversation_with_a_graph()

    only_images = transcript(conversation, accepts=frozenset({"image"}))
    none = transcript(conversation)

    assert only_images[-1].attachments == (GRAPH,)
    assert (
        "file 'web-2.log.gz' (application/gzip) of 3 bytes, which this model cannot read"
        in only_images[2].content
    )
    assert [type(m).__name__ for m in none] == ["UserTurn", "AssistantTurn", "ToolResult", "ToolResult"]
    assert none[2].content == (
        "CPU of web-2\n[It also returned image/png image of 8 bytes, file 'web-2.log.gz' (application/gzip) "
        "of 3 bytes, which this model cannot read: left out.]"
    )
    assert not none[2].is_error
