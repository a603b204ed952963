"""InMemoryConversationRepository: for tests, scripts and a single process that may forget on exit."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from dcaf_like.application.errors import ConcurrencyConflict
from dcaf_like.application.ports import ConversationRepository, GrantStore, Position
from dcaf_like.application.waiting import WaitingEntry, waiting_entries
from dcaf_like.domain import Conversation, DecisionRecord, Message, ToolCall
from dcaf_like.domain.grant import Grant
from dcaf_like.domain.trail import AuditDigest, ChainHead, Trail
from dcaf_like.stores._codec import changed_calls, first_changed_message, written_whole
from dcaf_like.stores._schema import CALL, CONVERSATION
from dcaf_like.stores._shared import check_retention


class InMemoryConversationRepository(ConversationRepository, GrantStore):
    """Keeps each conversation as what a persistent store would write: the platform context without its
    credentials, the session as JSON text. A change is visible only once saved, and a loaded
    conversation shares nothing with the store that the domain changes.

    A record is a header (a tuple of plain values), the messages and the calls. Messages are values
    the domain never changes in place, and a settled call is never changed again: the store keeps
    those objects as they were saved and hands the same ones to every reader, so a read copies a list
    of references rather than rebuilding each message (ADR 22). A call not settled yet is kept as a
    tuple of plain values and rebuilt on each read, as it may still change. A save replaces the header
    and writes only the messages and calls that changed (ADR 16); :meth:`get_recent` reads from the
    window the last save recorded.

    Decision records (the audit trail) are kept apart from the conversations, for `audit_ttl` seconds
    (None: as long as the process lives)."""

    def __init__(self, *, audit_ttl: float | None = None, clock: Callable[[], float] = time.time) -> None:
        check_retention(None, audit_ttl)
        self._items: dict[str, _Record] = {}
        self._saves = 0  # the order of the last save, a conversation's place in the list
        # The inbox's index: each conversation's calls waiting for approval (none: no key).
        self._waiting: dict[str, tuple[WaitingEntry, ...]] = {}
        self._audit: list[DecisionRecord] = []
        self._head = ChainHead()
        self._digests: list[AuditDigest] = []
        self._grants: dict[str, Grant] = {}
        self._lock = threading.Lock()
        self.audit_ttl = audit_ttl
        self.clock = clock

    def get(self, conversation_id: str) -> Conversation | None:
        return self._read(conversation_id, windowed=False)

    def get_recent(self, conversation_id: str) -> Conversation | None:
        return self._read(conversation_id, windowed=True)

    def _read(self, conversation_id: str, *, windowed: bool) -> Conversation | None:
        with self._lock:
            record = self._items.get(conversation_id)
            if record is None:
                return None
            start, first_call = record.window if windowed else (0, 0)
            header, messages = record.header, record.messages[start:]
            calls = dict(zip(record.ids[first_call:], record.calls[first_call:], strict=True))
            unsettled = [record.calls[p] for p in record.unsettled if p >= first_call]
        for values in unsettled:
            assert isinstance(values, tuple)
            call = CALL.from_tuple(values)
            calls[call.id.value] = call  # in its place: the key is there already
        return _thaw(conversation_id, header, messages, calls, start, first_call)

    def save(self, conversation: Conversation, expected_version: int) -> None:
        """Writes the header and the messages and calls that changed since the conversation was loaded
        or saved (ADR 16): a save costs what the turn added, not what the conversation holds."""
        c = conversation
        whole = written_whole(c, expected_version)
        header = CONVERSATION.to_tuple(c)  # a session value that is not JSON fails here, as in any store
        window = c.window_start()
        first = first_changed_message(c, whole)
        messages = c.messages[first:]
        first += c.message_offset
        calls = [
            (i, call, call if call.status.is_terminal else CALL.to_tuple(call))
            for i, call in changed_calls(c, whole)
        ]
        waiting = tuple(waiting_entries(c)) if whole or calls else None
        with self._lock:
            current = self._items.get(c.id)
            actual = 0 if current is None else current.header[0]
            if actual != expected_version:
                raise ConcurrencyConflict(c.id, expected_version, actual)
            record = _Record(header, window) if whole or current is None else current
            record.header, record.window = header, window
            del record.messages[first:]
            record.messages.extend(messages)
            for i, call, stored in calls:
                if i < len(record.calls):
                    record.calls[i] = stored
                else:
                    record.ids.append(call.id.value)
                    record.calls.append(stored)
                if stored is call:
                    record.unsettled.discard(i)
                else:
                    record.unsettled.add(i)
            # Re-inserting moves the id to the end: the dict's order is recency.
            self._saves += 1
            record.order = float(self._saves)
            self._items.pop(c.id, None)
            self._items[c.id] = record
            if waiting:
                self._waiting[c.id] = waiting
            elif waiting is not None:
                self._waiting.pop(c.id, None)
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

    def audit_trail(self) -> Trail:
        with self._lock:
            return Trail(list(self._audit), list(self._digests), self._head)

    def audit_tip(self) -> tuple[ChainHead, AuditDigest | None]:
        with self._lock:
            return self._head, self._digests[-1] if self._digests else None

    def append_digest(self, digest: AuditDigest) -> bool:
        with self._lock:
            if self._digests and self._digests[-1].number >= digest.number:
                return False
            self._digests.append(digest)
            return True

    def _append(self, records: Sequence[DecisionRecord]) -> None:
        """Under the lock: the chain's head is read and moved in one step."""
        if not records:
            return
        linked, self._head = self._head.link(records)
        self._audit.extend(linked)
        if self.audit_ttl is not None:
            oldest = self.clock() - self.audit_ttl
            self._audit = [r for r in self._audit if r.at >= oldest]

    def delete(self, conversation_id: str) -> bool:
        with self._lock:
            self._waiting.pop(conversation_id, None)
            return self._items.pop(conversation_id, None) is not None

    # Standing grants (docs/approvals.md, "Grants"): values, replaced when revoked.
    def add_grant(self, grant: Grant) -> None:
        with self._lock:
            self._grants[grant.id] = grant

    def revoke_grant(self, grant_id: str, *, by: str, at: float) -> Grant | None:
        with self._lock:
            grant = self._grants.get(grant_id)
            if grant is None:
                return None
            self._grants[grant_id] = revoked = grant.revoked(by=by, at=at)
        return revoked

    def list_grants(self) -> list[Grant]:
        with self._lock:
            return list(self._grants.values())

    def delete_grants(self, grant_ids: Sequence[str]) -> None:
        with self._lock:
            for grant_id in grant_ids:
                self._grants.pop(grant_id, None)

    async def alist_grants(self) -> list[Grant]:
        return self.list_grants()

    def list_waiting(self) -> list[WaitingEntry]:
        with self._lock:
            return [entry for entries in self._waiting.values() for entry in entries]

    async def alist_waiting(self) -> list[WaitingEntry]:
        return self.list_waiting()

    def ping(self) -> None:
        """Always answers: it is this process's memory."""

    async def aping(self) -> None:
        return None

    def list_ids(self, limit: int = 100) -> list[str]:
        with self._lock:
            return list(reversed(self._items))[:limit]

    def list_after(
        self, position: Position | None, limit: int, *, owner: str | None = None
    ) -> list[Position]:
        """A page of the list, by the order of the last saves (this process's memory: a walk from the
        newest, as fast as Python iterates)."""
        with self._lock:
            places = (Position(record.order, i) for i, record in reversed(self._items.items()))
            after = places if position is None else (p for p in places if p < position)
            return list(itertools.islice(after, limit))

    def __len__(self) -> int:
        return len(self._items)


class _Record:
    """A stored conversation: its header; the window a windowed read starts at; its messages; its
    calls' ids and the calls (the object once settled, else a tuple), by position; the positions of
    those not settled."""

    __slots__ = ("calls", "header", "ids", "messages", "order", "unsettled", "window")

    def __init__(self, header: tuple[Any, ...], window: tuple[int, int]) -> None:
        self.header = header
        self.window = window
        self.messages: list[Message] = []
        self.ids: list[str] = []
        self.calls: list[ToolCall | tuple[Any, ...]] = []
        self.unsettled: set[int] = set()
        self.order = 0.0


def _thaw(
    conversation_id: str,
    header: tuple[Any, ...],
    messages: list[Message],
    calls: dict[str, Any],
    message_offset: int,
    call_offset: int,
) -> Conversation:
    conversation = CONVERSATION.from_tuple(header, conversation_id, messages, calls)
    conversation.message_offset, conversation.call_offset = message_offset, call_offset
    conversation.mark_saved()
    return conversation
