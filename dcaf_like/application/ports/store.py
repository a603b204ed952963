"""Where conversations live: the required core every store implements (:class:`ConversationStore`:
``get`` and ``save``, compare-and-set) and the capabilities a store declares by subclassing them
(:class:`AuditTrail`, :class:`CancelFlags`, :class:`Listing`, :class:`Retention`,
:class:`WaitingIndex`); :class:`ConversationRepository` is all of them, as the built-in stores are. An
action that needs a capability its store lacks is refused by name (:func:`require`)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, NamedTuple, TypeVar

from dcaf_like.application.errors import MissingCapability
from dcaf_like.application.retention import expired
from dcaf_like.application.waiting import WaitingEntry
from dcaf_like.domain import (
    Conversation,
    DecisionRecord,
)
from dcaf_like.domain.grant import Grant
from dcaf_like.domain.trail import AuditDigest, ChainHead, Trail


class Position(NamedTuple):
    """A conversation's place in the list (:meth:`Listing.list_after`): its order value, then its id
    for conversations of equal order. A later place in the list compares smaller."""

    order: float
    conversation_id: str


#: Reads :meth:`Listing.aget_many` runs at once by default.
READ_CONCURRENCY = 8


_DIGESTS_FIX = "implement append_digest and audit_tip (docs/operations.md, 'Proving the trail')"
_GRANTS_FIX = "implement delete_grants (docs/stores.md, 'Writing a store')"
_INBOX_FIX = "implement list_waiting, indexing waiting calls as it saves (docs/approvals.md, 'One inbox')"


class ConversationStore(ABC):
    """Where conversations live between turns: the part every store implements, and all a turn needs.

    Two methods are required: :meth:`get` and :meth:`save`. :meth:`save` is a compare-and-set on
    :attr:`Conversation.version`: it writes only if the stored version is still `expected_version`
    (0 for a conversation that must not exist yet), and raises
    :class:`~dcaf_like.application.errors.ConcurrencyConflict` otherwise, writing nothing. The
    others have defaults. What a store does besides is a capability it declares by also subclassing
    it (:class:`AuditTrail`, :class:`CancelFlags`, :class:`Listing`, :class:`Retention`); an action
    that needs one a store lacks is refused with
    :class:`~dcaf_like.application.errors.MissingCapability` naming it (:func:`require`).
    :class:`ConversationRepository` declares them all, as the built-in stores do.
    """

    #: What this part of a store lets an agent do, and how a store gains it: the words of
    #: :class:`~dcaf_like.application.errors.MissingCapability` when a store lacks it.
    ability: ClassVar[str] = "keep conversations"
    fix: ClassVar[str] = "implement get and save"

    @abstractmethod
    def get(self, conversation_id: str) -> Conversation | None: ...

    @abstractmethod
    def save(self, conversation: Conversation, expected_version: int) -> None: ...

    def get_recent(self, conversation_id: str) -> Conversation | None:
        """The conversation as a turn needs it (ADR 22): its header, and its messages and calls from
        :meth:`Conversation.window_start` on, which the store recorded with its last save: every call
        not settled yet, and every message a context window may still send the model (the stored
        summary stands for those before). The conversation says what it leaves out
        (:attr:`~Conversation.message_offset`, :attr:`~Conversation.call_offset`), and a save of it
        writes its changes like any other's.

        This default reads the whole conversation, which is also a correct answer: stores whose
        records can be read from a position on override it, so that a turn on a long conversation
        reads what it needs rather than all of it."""
        return self.get(conversation_id)

    def ping(self) -> None:
        """One cheap round trip to the store (a readiness probe); raises if it does not answer.
        This default reads a conversation that does not exist; stores override it with their
        cheapest request."""
        self.get("dcaf-ping")

    async def aping(self) -> None:
        """:meth:`ping` without blocking the event loop (stores with an async client override it)."""
        await asyncio.to_thread(self.ping)

    # Stores whose I/O blocks override these with a native async client.
    async def aget(self, conversation_id: str) -> Conversation | None:
        return self.get(conversation_id)

    async def aget_recent(self, conversation_id: str) -> Conversation | None:
        """:meth:`get_recent` on the event loop. This default is :meth:`aget` for a store without a
        windowed read of its own, else its :meth:`get_recent`, in place (as :meth:`aget` reads)."""
        if type(self).get_recent is ConversationStore.get_recent:
            return await self.aget(conversation_id)
        return self.get_recent(conversation_id)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        self.save(conversation, expected_version)

    async def aclose(self) -> None:  # noqa: B027  (optional hook: a store with an asyncio client closes it)
        """Close the asyncio client of the running event loop (a server does this at shutdown)."""


class Listing(ConversationStore):
    """A store that lists, reads in batches and forgets conversations: the conversation list and
    ``DELETE /api/conversations/{id}`` need it. Implement :meth:`list_ids` and :meth:`delete`."""

    ability = "list or delete conversations"
    fix = "subclass Listing and implement list_ids and delete (docs/stores.md)"

    @abstractmethod
    def delete(self, conversation_id: str) -> bool:
        """Remove a conversation; False if there was none."""

    @abstractmethod
    def list_ids(self, limit: int = 100) -> list[str]:
        """Ids of stored conversations, most recently updated first."""

    def list_after(
        self, position: Position | None, limit: int, *, owner: str | None = None
    ) -> list[Position]:
        """A page of the list: the positions of at most `limit` conversations, most recently updated
        first, from the one after `position` (None: from the newest). A position is the conversation's
        place in the list (its order value, the time of its last save on the built-in stores, and its
        id), so the next page starts where this one ended, however many conversations there are, and
        one saved or deleted meanwhile neither repeats nor hides the others. With `owner`, a store
        that indexes owners (the built-in shared stores) lists only that owner's; the others list
        everyone's, and the list checks each conversation it reads. The built-in stores read an index. This
        default, for a store that implements only :meth:`list_ids`, reads every id and finds the
        position's id among them (a page after a conversation deleted meanwhile is empty)."""
        ids = self.list_ids(sys.maxsize)
        start = 0
        if position is not None:
            found = position.conversation_id in ids
            start = ids.index(position.conversation_id) + 1 if found else len(ids)
        return [Position(0.0, i) for i in ids[start : start + limit]]

    def get_many(self, conversation_ids: Sequence[str]) -> list[Conversation | None]:
        """Several conversations at once, in the order asked (None for one that is gone): a page of
        the conversation list. Stores with a batch read (Redis: one pipelined round trip) override it."""
        return [self.get(i) for i in conversation_ids]

    async def aget_many(self, conversation_ids: Sequence[str]) -> list[Conversation | None]:
        """:meth:`get_many` on the event loop: at most :data:`READ_CONCURRENCY` reads at once, so a
        page of 500 never asks a client's connection pool for 500 connections."""
        limit = asyncio.Semaphore(READ_CONCURRENCY)

        async def one(conversation_id: str) -> Conversation | None:
            async with limit:
                return await self.aget(conversation_id)

        return list(await asyncio.gather(*(one(i) for i in conversation_ids)))


class Retention(Listing):
    """A store that forgets conversations whose retention has passed (``dcaf-like prune``)."""

    ability = "forget conversations past their retention"
    fix = "subclass Retention (a Listing store: prune has a default) (docs/stores.md)"

    def prune(self, retention: float, *, now: float | None = None, dry_run: bool = False) -> int:
        """Forget the conversations whose retention has passed (see
        :mod:`dcaf_like.application.retention`: `retention` seconds after the last save, a waiting one
        not before its approval window closes); return how many (with `dry_run`, would be, and
        nothing is deleted). This default reads each conversation :meth:`saved_before` names and judges
        it by its own times (PostgreSQL, DynamoDB and the in-memory store use it); SQLite and Redis
        check and delete atomically."""
        now = time.time() if now is None else now
        gone = 0
        for conversation_id in self.saved_before(now - retention):
            conversation = self.get(conversation_id)
            if conversation is not None and expired(conversation, retention, now):
                gone += 1 if dry_run else int(self.delete(conversation_id))
        return gone

    def saved_before(self, moment: float) -> list[str]:
        """The ids of the conversations last saved before `moment`: those a prune looks at (a store
        with an index by the time of the save reads it, so a prune's cost follows the conversations
        it forgets, not those it keeps). This default lists every id."""
        return self.list_ids(sys.maxsize)


class AuditTrail(ConversationStore):
    """A store that keeps the audit trail: :meth:`save` appends the conversation's
    :attr:`~Conversation.unsaved_decisions` with it (in the same write where the store allows) and
    empties that list once written. Decision records are never rewritten and never deleted with their
    conversation; they may expire by an `audit_ttl` of their own. ``GET /api/audit`` and
    ``dcaf-like verify`` need it; a store without it keeps no decision records.
    Implement :meth:`record_decisions` and :meth:`decision_records`."""

    ability = "keep the audit trail"
    fix = "subclass AuditTrail and implement record_decisions and decision_records (docs/stores.md)"

    @abstractmethod
    def record_decisions(self, records: Sequence[DecisionRecord]) -> None:
        """Append decision records no save carries (decisions that were refused)."""

    @abstractmethod
    def decision_records(self, conversation_id: str | None = None, limit: int = 100) -> list[DecisionRecord]:
        """The audit trail, newest first: one conversation's records, or every conversation's."""

    async def arecord_decisions(self, records: Sequence[DecisionRecord]) -> None:
        self.record_decisions(records)

    async def adecision_records(
        self, conversation_id: str | None = None, limit: int = 100
    ) -> list[DecisionRecord]:
        return self.decision_records(conversation_id, limit)

    # The tamper-evident trail (ADR 34). A store links each record it appends to the one before, in
    # the write that appends it, so that two workers never fork the chain; these defaults suit a
    # store that keeps no chain of its own (its trail verifies as records written before the chain).
    def audit_trail(self) -> Trail:
        """The whole trail as stored: every record in the order appended, the digests, the head."""
        records = self.decision_records(None, sys.maxsize)
        return Trail(sorted(records, key=lambda r: (r.seq, r.at)))

    def audit_tip(self) -> tuple[ChainHead, AuditDigest | None]:
        """The chain's head and the latest digest (None: none yet): what the next digest follows."""
        return ChainHead(), None

    @property
    def keeps_digests(self) -> bool:
        """Whether this store writes signed digests of its trail (:meth:`append_digest`)."""
        return type(self).append_digest is not AuditTrail.append_digest

    def append_digest(self, digest: AuditDigest) -> bool:
        """Write `digest` unless one with its number exists (another worker wrote it first): False then.
        A store that keeps no digests refuses (:class:`MissingCapability`)."""
        raise MissingCapability(type(self).__name__, "keep signed audit digests", _DIGESTS_FIX)


class WaitingIndex(ConversationStore):
    """A store that indexes the calls waiting for approval, for the inbox (docs/approvals.md, "One
    inbox"). The built-in stores keep it; without it the inbox is refused by name."""

    ability: ClassVar[str] = "list the calls waiting for approval"
    fix: ClassVar[str] = _INBOX_FIX

    # The inbox (docs/approvals.md, "One inbox"): the calls waiting for approval, indexed as each save
    # writes them (:func:`~dcaf_like.application.waiting.index_changes`) and dropped with their
    # conversation, so that reading them costs what they hold, not what every conversation does.
    @property
    def keeps_waiting_index(self) -> bool:
        """Whether this store indexes the calls waiting for approval (:meth:`list_waiting`)."""
        return type(self).list_waiting is not WaitingIndex.list_waiting

    def list_waiting(self) -> list[WaitingEntry]:
        """Every call waiting for approval in this store, in no particular order (the inbox sorts,
        filters and pages them). A store without the index refuses (:class:`MissingCapability`)."""
        raise MissingCapability(type(self).__name__, "list the calls waiting for approval", _INBOX_FIX)

    async def alist_waiting(self) -> list[WaitingEntry]:
        """:meth:`list_waiting` without blocking the event loop."""
        if not self.keeps_waiting_index:
            return self.list_waiting()  # refused at once: nothing to wait for
        return await asyncio.to_thread(self.list_waiting)


class CancelFlags(ConversationStore):
    """A store that keeps cancel requests: a mark per conversation that any worker may set, read by
    the worker running the conversation's turn (docs/runs.md). A store several processes share keeps
    it where they all see it. ``POST /api/conversations/{id}/cancel`` needs it; on a store without it
    a turn is never asked to stop. Implement :meth:`request_cancel` and :meth:`cancel_requested`."""

    ability = "keep cancel requests"
    fix = "subclass CancelFlags and implement request_cancel and cancel_requested (docs/stores.md)"

    @abstractmethod
    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        """Ask the turn running on this conversation (if any, on any worker) to stop."""

    @abstractmethod
    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        """True if a cancel of this conversation was requested at `since` or later."""

    async def arequest_cancel(self, conversation_id: str, *, at: float) -> None:
        self.request_cancel(conversation_id, at=at)

    async def acancel_requested(self, conversation_id: str, *, since: float) -> bool:
        return self.cancel_requested(conversation_id, since=since)


class GrantStore(ConversationStore):
    """A store that keeps standing grants (docs/approvals.md, "Grants"): the approvals given ahead of
    time that every worker's turns read as they begin. The in-memory and SQLite stores keep them;
    ``/api/grants`` on a store without them is refused by name (HTTP 501).
    Implement :meth:`add_grant`, :meth:`revoke_grant` and :meth:`list_grants`."""

    ability = "keep standing grants"
    fix = "subclass GrantStore and implement add_grant, revoke_grant and list_grants (docs/approvals.md)"

    @abstractmethod
    def add_grant(self, grant: Grant) -> None:
        """Keep a new grant."""

    @abstractmethod
    def revoke_grant(self, grant_id: str, *, by: str, at: float) -> Grant | None:
        """Revoke the grant `grant_id` (one revoked already stays as it was): the grant as it is now,
        or None if there is none by that id."""

    @abstractmethod
    def list_grants(self) -> list[Grant]:
        """Every grant kept, expired and revoked ones included, in no particular order."""

    def forget_grants(self, ended_before: float, *, dry_run: bool = False) -> int:
        """Forget the grants that ended (expired, or were revoked) before `ended_before`: they approve
        nothing any more, and the audit trail keeps their making and their revocation. Returns how many
        (with `dry_run`, would be; nothing is deleted). ``dcaf-like prune`` calls it."""
        ended = [grant.id for grant in self.list_grants() if grant.ended_at < ended_before]
        if ended and not dry_run:
            self.delete_grants(ended)
        return len(ended)

    def delete_grants(self, grant_ids: Sequence[str]) -> None:
        """Delete these grants (those gone already are no error). The built-in stores implement it."""
        raise MissingCapability(type(self).__name__, "forget ended grants", _GRANTS_FIX)

    async def alist_grants(self) -> list[Grant]:
        """:meth:`list_grants` without blocking the event loop."""
        return await asyncio.to_thread(self.list_grants)


CapabilityT = TypeVar("CapabilityT", bound=ConversationStore)


def require(store: ConversationStore, capability: type[CapabilityT]) -> CapabilityT:
    """`store` as a `capability` it declares (a subclass of :class:`ConversationStore`); raises
    :class:`~dcaf_like.application.errors.MissingCapability` naming the store and the capability when
    it does not: what an action that needs it calls first."""
    if isinstance(store, capability):
        return store
    named = f"{capability.ability} ({capability.__name__})"
    raise MissingCapability(type(store).__name__, named, capability.fix)


# What a turn asks of a store's capabilities when it has them, and does without when it has not.
def record_decisions(store: ConversationStore, records: Sequence[DecisionRecord]) -> None:
    """Append refused decisions to `store`'s audit trail; nothing for a store that keeps none."""
    if isinstance(store, AuditTrail):
        store.record_decisions(records)


async def arecord_decisions(store: ConversationStore, records: Sequence[DecisionRecord]) -> None:
    """:func:`record_decisions` on the event loop."""
    if isinstance(store, AuditTrail):
        await store.arecord_decisions(records)


def grants_in_force(store: ConversationStore, now: float) -> tuple[Grant, ...]:
    """The grants a turn beginning at `now` may approve calls by; none for a store that keeps none."""
    if not isinstance(store, GrantStore):
        return ()
    return tuple(g for g in store.list_grants() if g.is_active(now))


async def agrants_in_force(store: ConversationStore, now: float) -> tuple[Grant, ...]:
    """:func:`grants_in_force` on the event loop."""
    if not isinstance(store, GrantStore):
        return ()
    return tuple(g for g in await store.alist_grants() if g.is_active(now))


def cancel_requested(store: ConversationStore, conversation_id: str, *, since: float) -> bool:
    """Whether a cancel of the conversation was asked at `since` or later; False for a store that
    keeps no cancel requests (no one can ask)."""
    return isinstance(store, CancelFlags) and store.cancel_requested(conversation_id, since=since)


async def acancel_requested(store: ConversationStore, conversation_id: str, *, since: float) -> bool:
    """:func:`cancel_requested` on the event loop."""
    return isinstance(store, CancelFlags) and await store.acancel_requested(conversation_id, since=since)


class ConversationRepository(Retention, AuditTrail, CancelFlags, WaitingIndex):
    """A store with every capability (:class:`ConversationStore` and :class:`Listing`,
    :class:`Retention`, :class:`AuditTrail`, :class:`CancelFlags`): what the built-in stores are, and
    what a store of your own subclasses to be one. Required: :meth:`get`, :meth:`save`, :meth:`delete`,
    :meth:`list_ids`, :meth:`record_decisions` and :meth:`decision_records`; the rest have defaults.

    Its cancel requests default to this process's memory only (correct for one process); a store
    several processes share overrides :meth:`request_cancel` and :meth:`cancel_requested`."""

    ability = "keep conversations, their list, the audit trail and cancel requests"
    fix = "subclass ConversationRepository"

    def ping(self) -> None:
        """One cheap round trip to the store; this default lists one id."""
        self.list_ids(1)

    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        """Ask the turn running on this conversation to stop (this default: in this process only)."""
        _local_cancels(self)[conversation_id] = at

    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        """True if a cancel of this conversation was requested at `since` or later."""
        at = _local_cancels(self).get(conversation_id)
        return at is not None and at >= since


_CANCELS: weakref.WeakKeyDictionary[ConversationRepository, dict[str, float]] = weakref.WeakKeyDictionary()


def _local_cancels(store: ConversationRepository) -> dict[str, float]:
    """The in-process cancel marks of a store that keeps none of its own, kept beside it (never on it)."""
    cancels = _CANCELS.get(store)
    if cancels is None:
        with _CANCELS_LOCK:
            cancels = _CANCELS.setdefault(store, {})
    return cancels


_CANCELS_LOCK = threading.Lock()
