"""`Conversation.receive_user_message`: what every entrance does with a user's new message, in one
order (issue 34): calls past their approval window are rejected by the system, questions past theirs
expire, then the message is added, or refused while anything still waits."""

from __future__ import annotations

import pytest

from dcaf_like.domain import Conversation, DeciderKind, PendingToolCalls, ToolCallStatus, ToolInput
from dcaf_like.domain.conversation import EXPIRED


def proposing(approval_ttl: float) -> tuple[Conversation, str]:
    conversation = Conversation.start("conv_r", at=0.0)
    conversation.add_user_message("delete web-2", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call(
        "delete_pod",
        ToolInput.of({"name": "web-2"}),
        requires_approval=True,
        approval_ttl=approval_ttl,
        at=0.0,
    )
    return conversation, call.id.value


def test_a_call_past_its_window_is_rejected_by_the_system_before_the_message_is_added():
    conversation, call_id = proposing(approval_ttl=60.0)

    received = conversation.receive_user_message("never mind", at=61.0)

    call = conversation.tool_call(call_id)
    assert received.rejected == (call_id,)
    assert (call.status, call.rejection_reason, call.decided_at) == (ToolCallStatus.REJECTED, EXPIRED, 61.0)
    assert call.decided_by_kind is DeciderKind.SYSTEM
    assert conversation.messages[-1] is received.message
    assert (received.message.content.text, received.message.at) == ("never mind", 61.0)


def test_a_call_still_inside_its_window_refuses_the_message_and_changes_nothing():
    conversation, call_id = proposing(approval_ttl=60.0)
    version = conversation.version

    with pytest.raises(PendingToolCalls):
        conversation.receive_user_message("never mind", at=59.0)

    assert conversation.tool_call(call_id).status is ToolCallStatus.PENDING
    assert conversation.version == version
    assert [m.content.text for m in conversation.messages] == ["delete web-2", ""]
