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
from dcaf_like.stores._codec import changed_calls, first_changed_message, written_whole
from dcaf_like.stores._schema import CALL, MESSAGE, QUESTION, SUMMARY, TASK, dumps
from dcaf_like.stores._shared import check_retention


class InMemoryConversationRepository(ConversationRepository):
    """Keeps each conversation as a record of plain values, what a persistent store would write: the
    platform context without its credentials, the session as JSON text. A change is visible only once
    saved and a loaded conversation shares nothing with the store.

    A record is a header and two lists, of the messages and of the calls, each a tuple of strings and
    numbers, which the garbage collector stops tracking: a process holding many conversations does not
    make every collection walk them. A save replaces the header and writes only the messages and calls
    that changed (ADR 16).

    Decision records (the audit trail) are kept apart from the conversations, for `audit_ttl` seconds
    (None: as long as the process lives)."""

    def __init__(self, *, audit_ttl: float | None = None, clock: Callable[[], float] = time.time) -> None:
        check_retention(None, audit_ttl)
        self._items: dict[str, tuple[tuple[Any, ...], list[Any], list[Any]]] = {}
        self._audit: list[DecisionRecord] = []
        self._lock = threading.Lock()
        self.audit_ttl = audit_ttl
        self.clock = clock

    def get(self, conversation_id: str) -> Conversation | None:
        with self._lock:
            record = self._items.get(conversation_id)
            if record is None:
                return None
            header, messages, calls = record[0], tuple(record[1]), tuple(record[2])
        return _thaw(conversation_id, header, messages, calls)

    def save(self, conversation: Conversation, expected_version: int) -> None:
        """Writes the header and the messages and calls that changed since the conversation was loaded
        or saved (ADR 16): a save costs what the turn added, not what the conversation holds."""
        c = conversation
        whole = written_whole(c, expected_version)
        header = _header(c)
        first = first_changed_message(c, whole)
        messages = list(map(MESSAGE.to_tuple, c.messages[first:]))
        calls = [(i, CALL.to_tuple(call)) for i, call in changed_calls(c, whole)]
        with self._lock:
            current = self._items.get(c.id)
            actual = 0 if current is None else current[0][0]
            if actual != expected_version:
                raise ConcurrencyConflict(c.id, expected_version, actual)
            if whole or current is None:
                record = (header, messages, [call for _, call in calls])
            else:
                record = (header, current[1], current[2])
                del record[1][first:]
                record[1].extend(messages)
                for i, call in calls:
                    if i < len(record[2]):
                        record[2][i] = call
                    else:
                        record[2].append(call)
            # Re-inserting moves the id to the end: the dict's order is recency.
            self._items.pop(c.id, None)
            self._items[c.id] = record
            self._append(c.unsaved_decisions)
        c.unsaved_decisions.clear()
        c.mark_saved()

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


def _header(c: Conversation) -> tuple[Any, ...]:
    """The conversation but its messages and calls, as a tuple of str, int, float, bool and None (each
    record in the form :mod:`dcaf_like.stores._schema` derives). A session value that is not JSON fails
    here (TypeError), as it would in a persistent store."""
    context = c.platform_context.public() if c.platform_context else None
    return (
        c.version,
        c.created_at,
        dumps(context) if context else "",
        dumps(c.session) if c.session else "",
        tuple(map(TASK.to_tuple, c.tasks.values())),
        c.owner,
        None if c.summary is None else SUMMARY.to_tuple(c.summary),
        tuple(map(QUESTION.to_tuple, c.questions.values())),
    )


def _thaw(
    conversation_id: str,
    header: tuple[Any, ...],
    messages: tuple[tuple[Any, ...], ...],
    calls: tuple[tuple[Any, ...], ...],
) -> Conversation:
    version, created_at, context, session, tasks, owner, summary, questions = header
    conversation = Conversation(
        id=conversation_id,
        messages=MESSAGE.from_tuples(messages),
        tool_calls={call.id.value: call for call in CALL.from_tuples(calls)},
        platform_context=PlatformContext(json.loads(context) if context else None),
        session=json.loads(session) if session else {},
        tasks={task[0]: TASK.from_tuple(task) for task in tasks},
        summary=None if summary is None else SUMMARY.from_tuple(summary),
        questions={question[0]: QUESTION.from_tuple(question) for question in questions},
        version=version,
        created_at=created_at,
        owner=owner,
    )
    conversation.mark_saved()
    return conversation
