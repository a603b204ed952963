"""The conversation as a model reads it: each proposal followed by the outcome of each of its calls, in
the runtime language (:mod:`dcaf_like.application.messages`).

A call without a result yet (running, or waiting for a decision) reads as :data:`UNSETTLED`; a tool's
images and files the runtime takes are shown to the model after its results, others are named in a
note. The turn (:mod:`dcaf_like.application.turn`) keeps the transcript of what no longer changes and
transcribes the rest per model call.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dcaf_like.application.context import Block, TokenCounter, block_cost
from dcaf_like.application.messages import (
    AssistantTurn,
    ModelMessage,
    ModelToolCall,
    ToolResult,
    UserTurn,
)
from dcaf_like.domain import Attachment, Conversation, Message, Role, ToolCall, ToolCallStatus


def transcript(conversation: Conversation, accepts: frozenset[str] = frozenset()) -> tuple[ModelMessage, ...]:
    """The conversation as a model reads it: each proposal followed by the outcome of each of its calls
    (and the images and files those returned, of the kinds in `accepts`)."""
    messages: list[ModelMessage] = []
    for message in conversation.messages:
        transcribe(conversation, message, messages, accepts)
    return tuple(messages)


def transcribe(
    conversation: Conversation, message: Message, into: list[ModelMessage], accepts: frozenset[str]
) -> bool:
    """Append `message`'s model form to `into`; True if that form is final (every call settled)."""
    if message.role is Role.USER:
        into.append(UserTurn(message.text, message.attachments))
        return True
    calls = [conversation.tool_calls[i] for i in message.tool_call_ids]
    into.append(
        AssistantTurn(
            message.text,
            tuple(ModelToolCall(c.id.value, c.name, c.proposed_input.as_dict()) for c in calls),
        )
    )
    settled = True
    shown: list[tuple[ToolCall, Attachment]] = []
    for call in calls:
        if not call.status.is_terminal:
            # A provider refuses a call with no result after it (OpenAI: 400): one still running
            # elsewhere, or still waiting, gets a result that says so.
            settled = False
            into.append(ToolResult(call.id.value, call.name, UNSETTLED, True))
        elif call.result_attachments:
            result = _result_of(call)
            taken = [a for a in call.result_attachments if a.kind.value in accepts]
            left_out = [a for a in call.result_attachments if a.kind.value not in accepts]
            note = _attachments_note(taken, left_out)
            into.append(replace(result, content=f"{result.content}\n{note}" if result.content else note))
            shown.extend((call, a) for a in taken)
        else:
            into.append(_result_of(call))
    if shown:
        into.append(_tools_attachments(shown))
    return settled


@dataclass(slots=True)
class TranscriptCache:
    """What the model calls of one turn already transcribed: a message whose calls have all settled
    (and which is not the last one) reads the same from then on, and costs the same tokens."""

    #: The transcript of ``conversation.messages[:stable_messages]``, which no longer changes.
    stable: list[ModelMessage] = field(default_factory=list)
    stable_messages: int = 0
    #: Under a context window: the block of each settled message (by its position in the
    #: conversation), with its tokens.
    settled_blocks: dict[int, tuple[Block, int]] = field(default_factory=dict)

    def messages(self, conversation: Conversation, accepts: frozenset[str]) -> tuple[ModelMessage, ...]:
        """The whole transcript, reusing what earlier calls transcribed."""
        messages, stable = conversation.messages, self.stable
        tail: list[ModelMessage] = []
        for index in range(self.stable_messages, len(messages)):
            if tail or index == len(messages) - 1:
                transcribe(conversation, messages[index], tail, accepts)
            elif transcribe(conversation, messages[index], tail, accepts):
                stable.extend(tail)
                tail.clear()
                self.stable_messages = index + 1
        return (*stable, *tail)

    def blocks(
        self, conversation: Conversation, accepts: frozenset[str], count: TokenCounter
    ) -> tuple[list[Block], list[int]]:
        """The conversation's blocks and their tokens, reusing those of settled messages."""
        settled_blocks = self.settled_blocks
        last = conversation.message_count - 1
        blocks, costs = [], []
        for index, message in enumerate(conversation.messages, conversation.message_offset):
            known = settled_blocks.get(index)
            if known is None:
                transcribed: list[ModelMessage] = []
                settled = transcribe(conversation, message, transcribed, accepts)
                block = Block(index, tuple(transcribed), message.role is Role.USER, pinned=not settled)
                known = (block, block_cost(block, count))
                if settled and index != last:
                    settled_blocks[index] = known
            blocks.append(known[0])
            costs.append(known[1])
        return blocks, costs


def _attachments_note(taken: list[Attachment], left_out: list[Attachment]) -> str:
    """What a result says of its images and files: those shown, and those the model cannot read."""
    lines = []
    if taken:
        listed = ", ".join(a.describe() for a in taken)
        lines.append(f"[It also returned {listed}: shown in the message after the results.]")
    if left_out:
        listed = ", ".join(f"{a.describe()} of {a.size} bytes" for a in left_out)
        lines.append(f"[It also returned {listed}, which this model cannot read: left out.]")
    return "\n".join(lines)


def _tools_attachments(shown: list[tuple[ToolCall, Attachment]]) -> UserTurn:
    """The images and files tools returned, as a turn after their results: a tool message holds only
    text in some APIs (OpenAI's), and every runtime that takes a kind of part takes it in a user's turn."""
    listed = "; ".join(f"{call.name} ({call.id.value}): {a.describe()}" for call, a in shown)
    text = f"[Not from the user: what the tool calls above returned besides text. {listed}]"
    return UserTurn(text, tuple(a for _, a in shown))


UNSETTLED = "No result yet: this call has not finished (it is running or waiting for a decision)."


def _result_of(call: ToolCall) -> ToolResult:
    if call.status is ToolCallStatus.EXECUTED:
        content = call.result or ""
        if call.edited:  # secret arguments masked: the model never learns a value a human chose
            content = (
                f"(A human edited the arguments before running: {call.shown_json(call.effective_input)})\n"
                + content
            )
        return ToolResult(call.id.value, call.name, content)
    if call.status is ToolCallStatus.REJECTED:
        return ToolResult(
            call.id.value, call.name, f"Not run. Rejected: {call.rejection_reason or 'no reason given'}", True
        )
    if call.status is ToolCallStatus.INTERRUPTED:
        return ToolResult(call.id.value, call.name, f"Outcome unknown: {call.error}", True)
    return ToolResult(call.id.value, call.name, f"Error: {call.error}", True)
