"""Conversations as JSON-ready dicts: the one format every store writes.

A conversation and the records inside it (tool calls, messages, tasks, its summary) are declared once,
in :mod:`dcaf_like.stores._schema`, which derives their dict, JSON text and in-memory forms; this module
reads and writes them as stores do: whole, as a header and the records that changed, or in pages.

Platform context is stored without its credentials: they arrive with each request and are never
written to a store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dcaf_like.application.errors import StoredConversationUnreadable
from dcaf_like.domain import Conversation, ToolCall
from dcaf_like.stores._schema import CALL, CONVERSATION, FORMAT, HEADER, MESSAGE, dumps


def conversation_to_dict(conversation: Conversation) -> dict[str, Any]:
    return CONVERSATION.to_dict(conversation)


def conversation_from_dict(data: dict[str, Any]) -> Conversation:
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown conversation format {data.get('format')!r}")
    return _from_dict(data)


def _from_dict(data: dict[str, Any]) -> Conversation:
    return CONVERSATION.from_dict(data)


def encode(conversation: Conversation) -> str:
    """The stored text of a conversation: compact JSON, unicode kept as is.

    Exactly ``json.dumps(conversation_to_dict(conversation), ensure_ascii=False, separators=(",", ":"))``,
    written field by field: a store writes it on every save, and building the dicts, then escaping
    every key again, was most of its cost. Anything unusual (a value of an unexpected type) takes the
    generic path, so the text, or the error, is always the one json.dumps gives."""
    try:
        return CONVERSATION.write(conversation)
    except (TypeError, ValueError):
        return dumps(conversation_to_dict(conversation))


def decode(text: str | bytes, conversation_id: str) -> Conversation:
    """A conversation from its stored text; a record that cannot be read is a
    StoredConversationUnreadable (a StoreUnavailable) that names it, never a half-built conversation."""
    try:
        return conversation_from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc


# -- a header and the records that changed (ADR 16) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Changes:
    """What a save writes: the header, and the messages and calls that changed since the conversation
    was loaded or last saved. With `whole`, they are all of them, and the store first drops any it held."""

    header: str
    whole: bool
    first_message: int  # `messages` are the messages from this index on
    messages: list[str]
    calls: list[tuple[int, str]]  # (position in the conversation's calls, the call)


def changes(conversation: Conversation, expected_version: int) -> Changes:
    """The header and the changed records of `conversation`, for a save expecting `expected_version`
    (positions are the conversation's, whatever a windowed read left out)."""
    c = conversation
    whole = written_whole(c, expected_version)
    first = first_changed_message(c, whole)
    messages = list(map(MESSAGE.write, c.messages[first:]))
    calls = [(i, CALL.write(call)) for i, call in changed_calls(c, whole)]
    return Changes(encode_header(c), whole, c.message_offset + first, messages, calls)


def written_whole(conversation: Conversation, expected_version: int) -> bool:
    """Whether a save writes all of `conversation`: a new one (`expected_version` 0), or one not read
    from a header (a whole document of format 1, or one built in code). A conversation a windowed read
    left messages out of cannot be written whole: that would lose them."""
    whole = expected_version == 0 or conversation.changed_calls is None
    if whole and (conversation.message_offset or conversation.call_offset):
        raise ValueError(
            f"conversation {conversation.id} was read without its first {conversation.message_offset} "
            "messages (a windowed read): it can only be saved where it was read, as a change"
        )
    return whole


def first_changed_message(conversation: Conversation, whole: bool) -> int:
    """The index in ``conversation.messages`` of the first message a save writes: those before it are
    stored as they are."""
    return 0 if whole else min(conversation.saved_messages, len(conversation.messages))


def changed_calls(conversation: Conversation, whole: bool) -> list[tuple[int, ToolCall]]:
    """The calls a save writes, with their positions among the conversation's calls."""
    changed = conversation.changed_calls
    if whole or changed is None:
        return list(enumerate(conversation.tool_calls.values()))
    if not changed:
        return []
    offset = conversation.call_offset
    return [(offset + i, call) for i, (k, call) in enumerate(conversation.tool_calls.items()) if k in changed]


def header_to_dict(conversation: Conversation) -> dict[str, Any]:
    return CONVERSATION.header_to_dict(conversation)


def encode_header(conversation: Conversation) -> str:
    """The header's text: ``json.dumps(header_to_dict(conversation), ...)``, written as :func:`encode` is."""
    try:
        return CONVERSATION.write_header(conversation)
    except (TypeError, ValueError):
        return dumps(header_to_dict(conversation))


def window_of(header: dict[str, Any]) -> tuple[int, int]:
    """Where a windowed read of the conversation whose header this is starts: (0, 0), all of it,
    when the header names no window (written before windows, or nothing to leave out)."""
    window = header.get("window") or (0, 0)
    start, first_call = int(window[0]), int(window[1])
    return start, first_call


def decode_parts(
    header: str | bytes,
    messages: Sequence[str | bytes],
    calls: Sequence[str | bytes],
    conversation_id: str,
    *,
    windowed: bool = False,
) -> Conversation:
    """A conversation from its header and its stored messages and calls (in order; records past the
    header's counts are ignored), or from a whole document of format 1, which a store written before
    headers holds (then `messages` and `calls` are empty, and its next save writes it whole).

    `windowed`: `messages` and `calls` are those from the header's window on (:func:`window_of`), a
    windowed read (ADR 22); the conversation says what it left out.

    A conversation read from a header is marked saved (:meth:`Conversation.mark_saved`)."""
    return _assemble(header, lambda: _array(messages), lambda: _array(calls), conversation_id, windowed)


def decode_pages(
    header: str | bytes | dict[str, Any],
    message_pages: Sequence[str | bytes],
    call_pages: Sequence[str | bytes],
    conversation_id: str,
    *,
    first: tuple[int, int] | None = None,
) -> Conversation:
    """:func:`decode_parts` for records stored in pages: each page the JSON array of several. The
    header may be given parsed.

    `first`: a windowed read (ADR 22) of the pages from those holding message ``first[0]`` and call
    ``first[1]`` on (records a page holds before the header's window are left out)."""
    return _assemble(
        header,
        lambda: _pages(message_pages),
        lambda: _pages(call_pages),
        conversation_id,
        windowed=first is not None,
        first=first,
    )


def page(records: Sequence[str]) -> str:
    """Records' JSON texts as one page: their JSON array."""
    return "[" + ",".join(records) + "]"


def _assemble(
    header: str | bytes | dict[str, Any],
    messages: Callable[[], list[Any]],
    calls: Callable[[], list[Any]],
    conversation_id: str,
    windowed: bool = False,
    first: tuple[int, int] | None = None,
) -> Conversation:
    """`first`: the positions of the first of `messages` and of `calls`, when not the window's."""
    try:
        data = header if isinstance(header, dict) else json.loads(header)
        if data.get("format") == FORMAT:
            return _from_dict(data)
        if data.get("format") != HEADER:
            raise ValueError(f"unknown conversation format {data.get('format')!r}")
        start, first_call = window_of(data) if windowed else (0, 0)
        count, call_count = data["messages"] - start, data["tool_calls"] - first_call
        data["messages"], data["tool_calls"] = messages(), calls()
        if first is not None:  # pages hold records before the window: leave them out
            skip, skip_calls = start - first[0], first_call - first[1]
            if skip < 0 or skip_calls < 0:
                raise ValueError(
                    f"records from {first} were read; the window starts at {(start, first_call)}"
                )
            del data["messages"][:skip], data["tool_calls"][:skip_calls]
        if len(data["messages"]) < count or len(data["tool_calls"]) < call_count:
            raise ValueError(
                f"the header counts {count} messages and {call_count} calls from {start} and {first_call}; "
                f"{len(data['messages'])} and {len(data['tool_calls'])} are stored"
            )
        del data["messages"][count:], data["tool_calls"][call_count:]
        conversation = _from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc
    conversation.message_offset, conversation.call_offset = start, first_call
    conversation.mark_saved()
    return conversation


def _pages(pages: Sequence[str | bytes]) -> list[Any]:
    """The records of pages (JSON arrays), in one parse."""
    texts = [p.decode() if isinstance(p, bytes) else p for p in pages]
    return list(json.loads("[" + ",".join(t[1:-1] for t in texts if t.strip() != "[]") + "]"))


def _array(texts: Sequence[str | bytes]) -> list[Any]:
    """JSON texts as the list of their values: one parse of them joined, not one each."""
    if not texts:
        return []
    if isinstance(texts[0], bytes):
        joined = b",".join(t if isinstance(t, bytes) else t.encode() for t in texts)
        return list(json.loads(b"[" + joined + b"]"))
    return list(json.loads("[" + ",".join(t if isinstance(t, str) else t.decode() for t in texts) + "]"))
