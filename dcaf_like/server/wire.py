"""The HelpDesk wire format: request bodies as FastAPI validates and documents them, and stream events
as NDJSON lines.

The models are strict: ``"execute": "yes"`` is a type error, not an approval. They validate shape
only; what the shape means (which call, which decision) is the application's job
(:meth:`AgentRequest.from_messages`).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from dcaf_like.application.dto import AgentResponse
from dcaf_like.application.events import (
    ApprovalRequired,
    Done,
    RunFailed,
    StreamEvent,
    ToolCallProposed,
    ToolFinished,
    ToolProgress,
    ToolRejected,
    ToolStarted,
)
from dcaf_like.application.messages import ReasoningDelta, TextDelta

_OPEN = ConfigDict(strict=True, extra="allow")

# A conversation id a client chooses is at most 128 characters of A-Z a-z 0-9 . _ : - (the server's
# own are ``conv_`` and 24 hex digits): safe in a URL path, a store's key, a log line and a page, and
# never holding the ``~`` that separates an A2A task's number from its conversation.
MAX_CONVERSATION_ID = 128
CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9._:-]*$"
TASK_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}~[0-9]{1,9}$"
ConversationId = Annotated[
    str, StringConstraints(max_length=MAX_CONVERSATION_ID, pattern=CONVERSATION_ID_PATTERN)
]
TaskId = Annotated[str, StringConstraints(max_length=MAX_CONVERSATION_ID + 10, pattern=TASK_ID_PATTERN)]
# fullmatch, not these patterns: in Python's re, "$" also matches before a final newline.
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9._:-]*")
_TASK_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}~[0-9]{1,9}")


def is_conversation_id(value: str) -> bool:
    """Whether `value` follows the rule of conversation ids (the empty string: none given)."""
    return len(value) <= MAX_CONVERSATION_ID and _CONVERSATION_ID.fullmatch(value) is not None


def is_task_id(value: str) -> bool:
    """Whether `value` has the form of an A2A task id: a conversation id, ``~``, a number."""
    return _TASK_ID.fullmatch(value) is not None


class ToolCallIn(BaseModel):
    """A tool call as the client echoes it back, with its decision."""

    model_config = _OPEN

    id: str = Field(min_length=1, description="The id the server gave the proposed call.")
    name: str | None = Field(None, description="The tool's name; must match the proposal if sent.")
    input: dict[str, Any] | None = Field(
        None, description="The proposed arguments; must match the proposal exactly if sent."
    )
    execute: bool = Field(False, description="true approves the call.")
    edited_input: dict[str, Any] | None = Field(
        None, description="Approve with these arguments instead (editable tools only)."
    )
    rejection_reason: str | None = Field(None, description="With execute false: reject, giving this reason.")


class CommandIn(BaseModel):
    model_config = _OPEN

    command: str | None = None
    execute: bool = False


class MessageData(BaseModel):
    model_config = _OPEN

    tool_calls: list[ToolCallIn] | None = None
    executed_tool_calls: list[dict[str, Any]] | None = None
    rejected_tool_calls: list[dict[str, Any]] | None = None
    cmds: list[CommandIn] | None = None
    executed_cmds: list[dict[str, Any]] | None = None
    session: dict[str, Any] | None = Field(None, description="Session state, returned as the server sent it.")
    conversation_id: ConversationId | None = Field(
        None, description="Ties turns together (the seed's thread id)."
    )
    thread_id: ConversationId | None = None


class MessageIn(BaseModel):
    model_config = _OPEN

    role: Literal["user", "assistant"]
    content: str | None = ""
    data: MessageData | None = None
    platform_context: dict[str, Any] | None = None


class ChatRequest(BaseModel):
    """``messages``: the conversation as the client has it; the last message is the user's turn."""

    model_config = _OPEN

    messages: list[MessageIn] = Field(min_length=1)
    conversation_id: ConversationId | None = Field(
        None,
        description="Alternative to the last message's data. At most 128 characters of A-Z a-z 0-9 . _ : -",
    )
    platform_context: dict[str, Any] | None = None


class ToolCallOut(BaseModel):
    id: str
    name: str
    input: dict[str, Any]
    execute: bool
    tool_description: str
    editable: bool
    reason: str | None


class ExecutedToolCallOut(BaseModel):
    id: str
    name: str
    input: dict[str, Any]
    output: str
    status: str
    proposed_input: dict[str, Any] | None = None
    error: str | None = None


class DataOut(BaseModel):
    conversation_id: str
    tool_calls: list[ToolCallOut]
    executed_tool_calls: list[ExecutedToolCallOut]
    rejected_tool_calls: list[dict[str, Any]]
    cmds: list[dict[str, Any]]
    executed_cmds: list[dict[str, Any]]
    session: dict[str, Any]


class ChatResponse(BaseModel):
    role: Literal["assistant"]
    content: str
    data: DataOut
    meta: dict[str, Any]


class ErrorDetail(BaseModel):
    code: str
    message: str
    request_id: str
    field: str | None = None
    call_id: str | None = None
    conversation_id: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


def request_payload(body: ChatRequest) -> dict[str, Any]:
    """The validated body as plain data for the application's parser."""
    return body.model_dump(mode="json", exclude_none=True)


# -- stream events ------------------------------------------------------------------------------


def event_lines(event: StreamEvent, request_id: str) -> list[dict[str, Any]]:
    """The NDJSON objects one event becomes. Seed events (``text_delta``, ``tool_calls``,
    ``executed_tool_calls``, ``commands``, ``done``, ``error``) come with typed lifecycle events."""
    if isinstance(event, TextDelta):
        return [{"type": "text_delta", "text": event.text}]
    if isinstance(event, ReasoningDelta):
        return [{"type": "reasoning_delta", "text": event.text}]
    if isinstance(event, ToolCallProposed):
        return [{"type": "tool_call_proposed", "tool_call": _call(event.call.to_pending_dict(), event)}]
    if isinstance(event, ApprovalRequired):
        return [
            {"type": "approval_required", "call_ids": [c.id for c in event.calls]},
            {"type": "tool_calls", "tool_calls": [c.to_pending_dict() for c in event.calls]},
        ]
    if isinstance(event, ToolStarted):
        return [{"type": "tool_started", "id": event.call_id, "name": event.name}]
    if isinstance(event, ToolProgress):
        progress = {
            "type": "tool_progress",
            "id": event.call_id,
            "name": event.name,
            "message": event.message,
        }
        return [{**progress, "fraction": event.fraction}]
    if isinstance(event, ToolFinished):
        executed = event.call.to_executed_dict()
        return [
            {"type": "tool_finished", "tool_call": executed},
            {"type": "executed_tool_calls", "executed_tool_calls": [executed]},
        ]
    if isinstance(event, ToolRejected):
        return [{"type": "tool_rejected", "tool_call": event.call.to_rejected_dict()}]
    if isinstance(event, Done):
        return [_done(event.response, request_id)]
    if isinstance(event, RunFailed):
        raise TypeError("a failed run is written by the server, which knows its HTTP status")
    raise TypeError(f"unknown stream event {type(event).__name__}")


def _call(pending: dict[str, Any], event: ToolCallProposed) -> dict[str, Any]:
    return {**pending, "status": event.call.status}


def _done(response: AgentResponse, request_id: str) -> dict[str, Any]:
    message = response.to_helpdesk_message()
    message["meta"]["request_id"] = request_id
    return {"type": "done", "conversation_id": response.conversation_id, "message": message}


def ndjson(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
