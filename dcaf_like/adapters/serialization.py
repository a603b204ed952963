"""Conversations as JSON-ready dicts: the one format every store writes.

Platform context is stored without its credentials: they arrive with each request and are never
written to a store.
"""

from __future__ import annotations

import json
from typing import Any

from dcaf_like.application.errors import StoreUnavailable
from dcaf_like.domain import (
    Conversation,
    Message,
    MessageContent,
    PlatformContext,
    Role,
    TaskOutcome,
    TaskRecord,
    ToolCall,
    ToolCallId,
    ToolCallStatus,
    ToolInput,
)

FORMAT = 1


def conversation_to_dict(conversation: Conversation) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "id": conversation.id,
        "version": conversation.version,
        "created_at": conversation.created_at,
        "platform_context": conversation.platform_context.public(),
        "session": conversation.session,
        "messages": [
            {"role": m.role.value, "text": m.text, "at": m.at, "tool_call_ids": list(m.tool_call_ids)}
            for m in conversation.messages
        ],
        "tool_calls": [_call_to_dict(c) for c in conversation.tool_calls.values()],
        "tasks": [
            {
                "id": t.id,
                "first_message": t.first_message,
                "opened_at": t.opened_at,
                "outcome": None if t.outcome is None else t.outcome.value,
                "note": t.note,
            }
            for t in conversation.tasks.values()
        ],
    }


def conversation_from_dict(data: dict[str, Any]) -> Conversation:
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown conversation format {data.get('format')!r}")
    calls = [_call_from_dict(c) for c in data["tool_calls"]]
    return Conversation(
        id=data["id"],
        messages=[
            Message(Role(m["role"]), MessageContent(m["text"]), m["at"], list(m["tool_call_ids"]))
            for m in data["messages"]
        ],
        tool_calls={c.id.value: c for c in calls},
        platform_context=PlatformContext(data["platform_context"]),
        session=dict(data["session"]),
        # Absent from conversations stored before tasks existed.
        tasks={t["id"]: _task_from_dict(t) for t in data.get("tasks", ())},
        version=data["version"],
        created_at=data["created_at"],
    )


def _call_to_dict(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id.value,
        "name": call.name,
        "proposed_input": call.proposed_input.canonical_json,
        "requires_approval": call.requires_approval,
        "editable": call.editable,
        "description": call.description,
        "proposed_at": call.proposed_at,
        "expires_at": call.expires_at,
        "status": call.status.value,
        "approved_input": None if call.approved_input is None else call.approved_input.canonical_json,
        "decided_by": call.decided_by,
        "decided_at": call.decided_at,
        "decision_note": call.decision_note,
        "result": call.result,
        "error": call.error,
        "finished_at": call.finished_at,
        "policy_reason": call.policy_reason,
        "secret_arguments": sorted(call.secret_arguments),
    }


def _call_from_dict(data: dict[str, Any]) -> ToolCall:
    approved = data["approved_input"]
    return ToolCall(
        id=ToolCallId(data["id"]),
        name=data["name"],
        proposed_input=ToolInput(data["proposed_input"]),
        requires_approval=data["requires_approval"],
        editable=data["editable"],
        description=data["description"],
        proposed_at=data["proposed_at"],
        expires_at=data["expires_at"],
        status=ToolCallStatus(data["status"]),
        approved_input=None if approved is None else ToolInput(approved),
        decided_by=data["decided_by"],
        decided_at=data["decided_at"],
        decision_note=data["decision_note"],
        result=data["result"],
        error=data["error"],
        finished_at=data["finished_at"],
        policy_reason=data["policy_reason"],
        secret_arguments=frozenset(data.get("secret_arguments", ())),  # absent before secrets were marked
    )


def _task_from_dict(data: dict[str, Any]) -> TaskRecord:
    outcome = data["outcome"]
    return TaskRecord(
        id=data["id"],
        first_message=data["first_message"],
        opened_at=data["opened_at"],
        outcome=None if outcome is None else TaskOutcome(outcome),
        note=data["note"],
    )


def encode(conversation: Conversation) -> str:
    """The stored text of a conversation: compact JSON, unicode kept as is."""
    return json.dumps(conversation_to_dict(conversation), ensure_ascii=False, separators=(",", ":"))


def decode(text: str | bytes, conversation_id: str) -> Conversation:
    """A conversation from its stored text; a record that cannot be read is a StoreUnavailable that
    names it, never a half-built conversation."""
    try:
        return conversation_from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreUnavailable(
            f"stored conversation {conversation_id} cannot be read ({type(exc).__name__}: {exc})"
        ) from exc
