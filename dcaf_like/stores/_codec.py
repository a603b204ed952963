"""Conversations as JSON-ready dicts: the one format every store writes.

The records inside a conversation (tool calls, messages, tasks, its summary) are declared once, in
:mod:`dcaf_like.stores._schema`, which derives their dict, JSON text and in-memory forms; this module
puts them together into the stored conversation.

Platform context is stored without its credentials: they arrive with each request and are never
written to a store.
"""

from __future__ import annotations

import json
from typing import Any

from dcaf_like.application.errors import StoredConversationUnreadable
from dcaf_like.domain import Conversation, PlatformContext
from dcaf_like.stores._schema import CALL, MESSAGE, SUMMARY, TASK, dumps, integer, number, string

FORMAT = 1

# Fields of Conversation a store does not keep: the events of the turn being served, its entrance,
# and the decision records a store appends apart from the conversation.
NOT_STORED = frozenset({"events", "entrance", "unsaved_decisions"})


def conversation_to_dict(conversation: Conversation) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "id": conversation.id,
        "version": conversation.version,
        "created_at": conversation.created_at,
        "platform_context": conversation.platform_context.public(),
        "session": conversation.session,
        "messages": [MESSAGE.to_dict(m) for m in conversation.messages],
        "tool_calls": [CALL.to_dict(c) for c in conversation.tool_calls.values()],
        "tasks": [TASK.to_dict(t) for t in conversation.tasks.values()],
        # Only when set: a conversation with no owner is stored as before owners existed.
        **({} if conversation.owner is None else {"owner": conversation.owner}),
        # Likewise a conversation without a summary.
        **({} if conversation.summary is None else {"summary": SUMMARY.to_dict(conversation.summary)}),
    }


def conversation_from_dict(data: dict[str, Any]) -> Conversation:
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown conversation format {data.get('format')!r}")
    context = PlatformContext(data["platform_context"])
    calls = [CALL.from_dict(c, context) for c in data["tool_calls"]]
    return Conversation(
        id=data["id"],
        messages=[MESSAGE.from_dict(m, context) for m in data["messages"]],
        tool_calls={c.id.value: c for c in calls},
        platform_context=context,
        session=dict(data["session"]),
        # Absent from conversations stored before tasks existed.
        tasks={t["id"]: TASK.from_dict(t, context) for t in data.get("tasks", ())},
        summary=None if (summary := data.get("summary")) is None else SUMMARY.from_dict(summary, context),
        version=data["version"],
        created_at=data["created_at"],
        owner=data.get("owner"),
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
        return dumps(conversation_to_dict(conversation))


def _encode_conversation(c: Conversation) -> str:
    context = c.platform_context.public() if c.platform_context else None
    session = dumps(c.session) if c.session else "{}"
    messages = ",".join(map(MESSAGE.write, c.messages))
    calls = ",".join(map(CALL.write, c.tool_calls.values()))
    tasks = ",".join(map(TASK.write, c.tasks.values()))
    owner = "" if c.owner is None else f',"owner":{string(c.owner)}'
    summary = "" if c.summary is None else f',"summary":{SUMMARY.write(c.summary)}'
    return (
        f'{{"format":{FORMAT},"id":{string(c.id)},"version":{integer(c.version)},'
        f'"created_at":{number(c.created_at)},"platform_context":{dumps(context) if context else "{}"},'
        f'"session":{session},"messages":[{messages}],"tool_calls":[{calls}],"tasks":[{tasks}]{owner}'
        f"{summary}}}"
    )


def decode(text: str | bytes, conversation_id: str) -> Conversation:
    """A conversation from its stored text; a record that cannot be read is a
    StoredConversationUnreadable (a StoreUnavailable) that names it, never a half-built conversation."""
    try:
        return conversation_from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc
