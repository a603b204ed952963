"""Builders for conversations in a given state, for tests of stores, servers and policies."""

from __future__ import annotations

from typing import Any

from dcaf_like.domain import Conversation, ToolInput


class ManualClock:
    """A clock a test moves by hand, for ``Agent(clock=...)`` and the stores' ``clock=``: approval and
    question windows, leases, retention, the turn's time limit and the cancel poll of a running turn,
    without sleeping. ``clock.now += 3600`` or ``clock.advance(3600)``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        """The same time: an agent measures its time limits by it (``dcaf_like.application.clock``)."""
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ConversationBuilder:
    """``ConversationBuilder().user("hi").assistant("ok").pending("delete_pod", name="web").build()``"""

    def __init__(self, conversation_id: str | None = None) -> None:
        self._conversation = Conversation.start(conversation_id)

    def user(self, text: str) -> ConversationBuilder:
        self._conversation.add_user_message(text)
        return self

    def assistant(self, text: str) -> ConversationBuilder:
        self._conversation.add_assistant_message(text)
        return self

    def pending(
        self, tool_name: str, arguments: dict[str, Any] | None = None, /, **kwargs: Any
    ) -> ConversationBuilder:
        """A call waiting for approval, proposed by a new assistant message unless the last one is."""
        conversation = self._conversation
        if not conversation.messages or conversation.messages[-1].role.value != "assistant":
            conversation.add_assistant_message("")
        conversation.request_tool_call(
            tool_name, ToolInput.of({**(arguments or {}), **kwargs}), requires_approval=True
        )
        return self

    def executed(
        self, tool_name: str, result: str, arguments: dict[str, Any] | None = None
    ) -> ConversationBuilder:
        self.pending(tool_name, arguments or {})
        call = self._conversation.pending_tool_calls[-1]
        self._conversation.approve_tool_call(call.id.value, by="builder")
        self._conversation.record_tool_result(call.id.value, result)
        return self

    def session(self, **values: Any) -> ConversationBuilder:
        self._conversation.replace_session({**self._conversation.session, **values})
        return self

    def build(self) -> Conversation:
        return self._conversation
