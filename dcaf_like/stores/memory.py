"""InMemoryConversationRepository: for tests, scripts and a single process that may forget on exit."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from dcaf_like.application.errors import ConcurrencyConflict
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.domain import Conversation, DecisionRecord, PlatformContext
from dcaf_like.stores._schema import CALL, MESSAGE, SUMMARY, TASK, dumps
from dcaf_like.stores._shared import check_retention


class InMemoryConversationRepository(ConversationRepository):
    """Keeps each conversation as a record of plain values, what a persistent store would write: the
    platform context without its credentials, the session as JSON text. A change is visible only once
    saved and a loaded conversation shares nothing with the store.

    A record is nested tuples of strings and numbers, which the garbage collector stops tracking: a
    process holding many conversations does not make every collection walk them. Writing one costs a
    third of writing the JSON text a persistent store writes.

    Decision records (the audit trail) are kept apart from the conversations, for `audit_ttl` seconds
    (None: as long as the process lives)."""

    def __init__(self, *, audit_ttl: float | None = None, clock: Callable[[], float] = time.time) -> None:
        check_retention(None, audit_ttl)
        self._items: dict[str, tuple[Any, ...]] = {}
        self._audit: list[DecisionRecord] = []
        self._lock = threading.Lock()
        self.audit_ttl = audit_ttl
        self.clock = clock

    def get(self, conversation_id: str) -> Conversation | None:
        with self._lock:
            record = self._items.get(conversation_id)
        return None if record is None else _thaw(conversation_id, record)

    def save(self, conversation: Conversation, expected_version: int) -> None:
        record = _freeze(conversation)
        with self._lock:
            current = self._items.get(conversation.id)
            actual = 0 if current is None else current[0]
            if actual != expected_version:
                raise ConcurrencyConflict(conversation.id, expected_version, actual)
            # Re-inserting moves the id to the end: the dict's order is recency.
            self._items.pop(conversation.id, None)
            self._items[conversation.id] = record
            self._append(conversation.unsaved_decisions)
        conversation.unsaved_decisions.clear()

    def record_decisions(self, records: Sequence[DecisionRecord]) -> None:
        with self._lock:
            self._append(records)

    def decision_records(self, conversation_id: str | None = None, limit: int = 100) -> list[DecisionRecord]:
        oldest = float("-inf") if self.audit_ttl is None else self.clock() - self.audit_ttl
        with self._lock:
            found = [
                r
                for r in reversed(self._audit)
                if r.at >= oldest and (conversation_id is None or r.conversation_id == conversation_id)
            ]
        found.sort(key=lambda r: r.at, reverse=True)  # stable: of equal times, the last appended first
        return found[:limit]

    def _append(self, records: Sequence[DecisionRecord]) -> None:
        """Under the lock."""
        if not records:
            return
        self._audit.extend(records)
        if self.audit_ttl is not None:
            oldest = self.clock() - self.audit_ttl
            self._audit = [r for r in self._audit if r.at >= oldest]

    def delete(self, conversation_id: str) -> bool:
        with self._lock:
            return self._items.pop(conversation_id, None) is not None

    def ping(self) -> None:
        """Always answers: it is this process's memory."""

    async def aping(self) -> None:
        return None

    def list_ids(self, limit: int = 100) -> list[str]:
        with self._lock:
            return list(reversed(self._items))[:limit]

    def __len__(self) -> int:
        return len(self._items)


def _freeze(c: Conversation) -> tuple[Any, ...]:
    """The conversation as nested tuples of str, int, float, bool and None (each record in the form
    :mod:`dcaf_like.stores._schema` derives). A session value that is not JSON fails here (TypeError),
    as it would in a persistent store."""
    context = c.platform_context.public() if c.platform_context else None
    return (
        c.version,
        c.created_at,
        dumps(context) if context else "",
        dumps(c.session) if c.session else "",
        tuple(map(MESSAGE.to_tuple, c.messages)),
        tuple(map(CALL.to_tuple, c.tool_calls.values())),
        tuple(map(TASK.to_tuple, c.tasks.values())),
        c.owner,
        None if c.summary is None else SUMMARY.to_tuple(c.summary),
    )


def _thaw(conversation_id: str, record: tuple[Any, ...]) -> Conversation:
    version, created_at, context, session, messages, calls, tasks, owner, summary = record
    return Conversation(
        id=conversation_id,
        messages=MESSAGE.from_tuples(messages),
        tool_calls={call.id.value: call for call in CALL.from_tuples(calls)},
        platform_context=PlatformContext(json.loads(context) if context else None),
        session=json.loads(session) if session else {},
        tasks={task[0]: TASK.from_tuple(task) for task in tasks},
        summary=None if summary is None else SUMMARY.from_tuple(summary),
        version=version,
        created_at=created_at,
        owner=owner,
    )
