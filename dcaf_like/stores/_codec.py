"""Conversations as JSON-ready dicts: the one format every store writes.

Platform context is stored without its credentials: they arrive with each request and are never
written to a store.
"""

from __future__ import annotations

import json
from typing import Any

from dcaf_like.application.errors import StoredConversationUnreadable
from dcaf_like.domain import (
    ContextSummary,
    Conversation,
    DeciderKind,
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

# Enum members by value: a dict lookup, not an Enum call, per message and call read (an unknown value
# is a KeyError, which decode() reports as an unreadable record, as it did the ValueError).
_ROLES = {role.value: role for role in Role}
_STATUSES = {status.value: status for status in ToolCallStatus}


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
        # Only when set: a conversation with no owner is stored as before owners existed.
        **({} if conversation.owner is None else {"owner": conversation.owner}),
        **_summary_to_dict(conversation.summary),
    }


def _summary_to_dict(summary: ContextSummary | None) -> dict[str, Any]:
    """Written only when there is one: a conversation without stays byte for byte as before."""
    return {} if summary is None else {"summary": {"text": summary.text, "through": summary.through}}


def conversation_from_dict(data: dict[str, Any]) -> Conversation:
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown conversation format {data.get('format')!r}")
    context = PlatformContext(data["platform_context"])
    calls = [_call_from_dict(c, context) for c in data["tool_calls"]]
    return Conversation(
        id=data["id"],
        messages=[
            Message(_ROLES[m["role"]], MessageContent(m["text"]), m["at"], list(m["tool_call_ids"]))
            for m in data["messages"]
        ],
        tool_calls={c.id.value: c for c in calls},
        platform_context=context,
        session=dict(data["session"]),
        # Absent from conversations stored before tasks existed.
        tasks={t["id"]: _task_from_dict(t) for t in data.get("tasks", ())},
        summary=None if (summary := data.get("summary")) is None else ContextSummary(**summary),
        version=data["version"],
        created_at=data["created_at"],
        owner=data.get("owner"),
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
        "lease_owner": call.lease_owner,
        "lease_expires_at": call.lease_expires_at,
        "context_fingerprint": call.context_fingerprint,
        "decided_by_kind": None if call.decided_by_kind is None else call.decided_by_kind.value,
    }


def _call_from_dict(data: dict[str, Any], context: PlatformContext) -> ToolCall:
    approved = data["approved_input"]
    decided_by, kind = data["decided_by"], data.get("decided_by_kind")
    return ToolCall(
        id=ToolCallId(data["id"]),
        name=data["name"],
        proposed_input=ToolInput(data["proposed_input"]),
        requires_approval=data["requires_approval"],
        editable=data["editable"],
        description=data["description"],
        proposed_at=data["proposed_at"],
        expires_at=data["expires_at"],
        status=_STATUSES[data["status"]],
        approved_input=None if approved is None else ToolInput(approved),
        decided_by=decided_by,
        decided_at=data["decided_at"],
        decision_note=data["decision_note"],
        result=data["result"],
        error=data["error"],
        finished_at=data["finished_at"],
        policy_reason=data["policy_reason"],
        secret_arguments=frozenset(data.get("secret_arguments", ())),  # absent before secrets were marked
        # Absent before leases: such an approved call is settled as interrupted when next loaded.
        lease_owner=data.get("lease_owner"),
        lease_expires_at=data.get("lease_expires_at"),
        # Absent before approvals were bound to a context: the conversation's stored context is the one
        # of its last turn, the turn that proposed the calls still waiting.
        context_fingerprint=data.get("context_fingerprint", context.fingerprint),
        decided_by_kind=_KINDS[kind] if kind is not None else _kind_of_old_record(decided_by),
    )


_KINDS = {kind.value: kind for kind in DeciderKind}


def _kind_of_old_record(decided_by: str | None) -> DeciderKind | None:
    """What decided a call stored before kinds were recorded, told by the names the server used."""
    if decided_by is None:
        return None
    return {"policy": DeciderKind.POLICY, "system": DeciderKind.SYSTEM, "approver": DeciderKind.APPROVER}.get(
        decided_by, DeciderKind.HUMAN
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
    """The stored text of a conversation: compact JSON, unicode kept as is.

    Exactly ``json.dumps(conversation_to_dict(conversation), ensure_ascii=False, separators=(",", ":"))``,
    written field by field: a store writes it on every save, and building the dicts, then escaping
    every key again, was most of its cost. Anything unusual (a value of an unexpected type) takes the
    generic path, so the text, or the error, is always the one json.dumps gives."""
    try:
        return _encode_conversation(conversation)
    except (TypeError, ValueError):
        return _dumps(conversation_to_dict(conversation))


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# The escaping json.dumps(ensure_ascii=False) uses; a StrEnum member is a str, written as its value.
_string = json.encoder.encode_basestring


def _encode_conversation(c: Conversation) -> str:
    context = c.platform_context.public() if c.platform_context else None
    session = _dumps(c.session) if c.session else "{}"
    messages = ",".join(map(_encode_message, c.messages))
    calls = ",".join(map(_encode_call, c.tool_calls.values()))
    tasks = ",".join(map(_encode_task, c.tasks.values()))
    owner = "" if c.owner is None else f',"owner":{_string(c.owner)}'
    return (
        f'{{"format":{FORMAT},"id":{_string(c.id)},"version":{_int(c.version)},'
        f'"created_at":{_number(c.created_at)},"platform_context":{_dumps(context) if context else "{}"},'
        f'"session":{session},"messages":[{messages}],"tool_calls":[{calls}],"tasks":[{tasks}]{owner}'
        f"{_encode_summary(c.summary)}}}"
    )


def _encode_summary(summary: ContextSummary | None) -> str:
    if summary is None:
        return ""
    return f',"summary":{{"text":{_string(summary.text)},"through":{_int(summary.through)}}}'


def _encode_task(t: TaskRecord) -> str:
    outcome = "null" if t.outcome is None else _string(t.outcome)
    return (
        f'{{"id":{_string(t.id)},"first_message":{_int(t.first_message)},"opened_at":{_number(t.opened_at)},'
        f'"outcome":{outcome},"note":{_string(t.note)}}}'
    )


def _encode_message(m: Message) -> str:
    ids = ",".join(map(_string, m.tool_call_ids))
    return (
        f'{{"role":{_string(m.role)},"text":{_string(m.text)},"at":{_number(m.at)},"tool_call_ids":[{ids}]}}'
    )


def _encode_call(c: ToolCall) -> str:
    approved = c.approved_input
    return (
        f'{{"id":{_string(c.id.value)},"name":{_string(c.name)},'
        f'"proposed_input":{_string(c.proposed_input.canonical_json)},'
        f'"requires_approval":{_bool(c.requires_approval)},"editable":{_bool(c.editable)},'
        f'"description":{_string(c.description)},"proposed_at":{_number(c.proposed_at)},'
        f'"expires_at":{_optional_number(c.expires_at)},"status":{_string(c.status)},'
        f'"approved_input":{"null" if approved is None else _string(approved.canonical_json)},'
        f'"decided_by":{_optional_string(c.decided_by)},"decided_at":{_optional_number(c.decided_at)},'
        f'"decision_note":{_optional_string(c.decision_note)},"result":{_optional_string(c.result)},'
        f'"error":{_optional_string(c.error)},"finished_at":{_optional_number(c.finished_at)},'
        f'"policy_reason":{_optional_string(c.policy_reason)},'
        f'"secret_arguments":[{",".join(map(_string, sorted(c.secret_arguments)))}],'
        f'"lease_owner":{_optional_string(c.lease_owner)},'
        f'"lease_expires_at":{_optional_number(c.lease_expires_at)},'
        f'"context_fingerprint":{_optional_string(c.context_fingerprint)},'
        f'"decided_by_kind":{"null" if c.decided_by_kind is None else _string(c.decided_by_kind)}}}'
    )


def _optional_string(value: str | None) -> str:
    return "null" if value is None else _string(value)


def _number(value: float) -> str:
    # json.dumps writes a finite float or an int as its repr; anything else goes the generic way.
    if (type(value) is float and value - value == 0) or type(value) is int:
        return repr(value)
    return _dumps(value)


def _optional_number(value: float | None) -> str:
    return "null" if value is None else _number(value)


def _int(value: int) -> str:
    return repr(value) if type(value) is int else _dumps(value)


def _bool(value: bool) -> str:
    return "true" if value is True else "false" if value is False else _dumps(value)


def decode(text: str | bytes, conversation_id: str) -> Conversation:
    """A conversation from its stored text; a record that cannot be read is a
    StoredConversationUnreadable (a StoreUnavailable) that names it, never a half-built conversation."""
    try:
        return conversation_from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc
