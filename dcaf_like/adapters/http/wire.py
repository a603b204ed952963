"""The HelpDesk wire format: request bodies as FastAPI validates and documents them, and stream events
as NDJSON lines.

The models are strict: ``"execute": "yes"`` is a type error, not an approval. They validate shape
only; what the shape means (which call, which decision) is the application's job
(:meth:`AgentRequest.from_messages`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
from dcaf_like.application.model import ReasoningDelta, TextDelta

_OPEN = ConfigDict(strict=True, extra="allow")


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
    conversation_id: str | None = Field(None, description="Ties turns together (the seed's thread id).")
    thread_id: str | None = None


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
    conversation_id: str | None = Field(None, description="Alternative to the last message's data.")
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
