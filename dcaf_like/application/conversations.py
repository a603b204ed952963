"""Reading, listing and forgetting conversations: the use cases behind ``GET /api/conversations``,
``GET`` and ``DELETE /api/conversations/{id}``, the chat page's list, and ``Agent.conversation``.

Each applies, in one place, what every action applies (:mod:`dcaf_like.application.cancel` does the
same for stopping a run): the id is well formed, the caller holds the scope (``read`` to read or list,
``chat`` to forget: whoever may write to a conversation may delete it), and the conversation is the
caller's (:meth:`Conversation.is_visible_to`; another identity's is not found). A delete refused for
its scope joins the audit trail, as a refused cancel or decision does.

`identity` is who the server authenticated; None (a server without keys, the Python API) trusts the
caller with every conversation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from dcaf_like.application.cancel import CONVERSATION_ID, check_conversation_id
from dcaf_like.application.cursors import InvalidCursor, make_cursor, read_cursor
from dcaf_like.application.errors import ConversationNotFound, MissingScope, StoredConversationUnreadable
from dcaf_like.application.ports import (
    READ_CONCURRENCY,
    ConversationStore,
    Listing,
    Position,
    arecord_decisions,
    require,
)
from dcaf_like.domain import Conversation, DecisionRecord, Identity

logger = logging.getLogger("dcaf_like")

#: A caller who sees only its own conversations: how many a page looks through at most.
SCAN_LIMIT = 5000

_LIST = "this conversation list"


def _require(identity: Identity | None, scope: str, doing: str) -> None:
    if identity is not None and not identity.can(scope):
        raise MissingScope(scope, doing)


@dataclass(frozen=True, slots=True)
class ReadConversation:
    """One conversation whole, as the caller may see it."""

    repository: ConversationStore

    async def __call__(self, conversation_id: str, *, identity: Identity | None) -> Conversation:
        """Raises InvalidRequest (a malformed id), MissingScope (``read``) or ConversationNotFound (none,
        or another identity's)."""
        check_conversation_id(conversation_id)
        _require(identity, "read", "read conversations")
        conversation = await self.repository.aget(conversation_id)
        if conversation is None or not conversation.is_visible_to(identity):
            raise ConversationNotFound(conversation_id)
        return conversation


@dataclass(frozen=True, slots=True)
class Listed:
    """The conversations a list found, most recently updated first; the stored records it could not
    read (shown only to a caller who sees every conversation: no owner can be read from them); the
    cursor of the next page (None: this was the last)."""

    conversations: list[Conversation]
    unreadable: list[StoredConversationUnreadable]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class ListConversations:
    """A page of the caller's conversations, most recent first."""

    repository: ConversationStore

    async def __call__(self, *, identity: Identity | None, limit: int, cursor: str | None = None) -> Listed:
        """At most `limit` of them, from the place `cursor` names (None: the newest). Each page starts
        where the last ended in the store's index (:meth:`Listing.list_after`), so a middle page costs
        what the first does. For a caller who sees only its own, a store that indexes owners lists
        those; on one that lists every owner's, a page reads on until it has `limit` or has looked
        through SCAN_LIMIT conversations, and may then hold fewer (even none) with a cursor for the
        rest. Every conversation read is checked. Raises MissingScope (``read``), InvalidCursor."""
        _require(identity, "read", "list conversations")
        store = require(self.repository, Listing)
        position = None if cursor is None else _position(cursor)
        sees_all = identity is None or identity.can("admin")
        owner = None if sees_all or identity is None else identity.name
        found: list[Conversation] = []
        unreadable: list[StoredConversationUnreadable] = []
        asked, looked = limit, 0
        while True:
            places = await asyncio.to_thread(store.list_after, position, asked + 1, owner=owner)
            page, more = places[:asked], len(places) > asked
            items = await _load(store, [place.conversation_id for place in page])
            for n, (place, item) in enumerate(zip(page, items, strict=True)):
                position = place
                if isinstance(item, StoredConversationUnreadable):
                    logger.warning("%s", item)
                    unreadable.append(item)
                elif item is not None and item.is_visible_to(identity):
                    found.append(item)
                if len(found) == limit:
                    more = more or n + 1 < len(page)
                    break
            looked += len(page)
            if len(found) == limit or not more or looked >= SCAN_LIMIT:
                next_cursor = make_cursor(position) if more and position is not None else None
                return Listed(found, unreadable if sees_all else [], next_cursor)
            asked = min(asked * 4, SCAN_LIMIT - looked)


def _position(cursor: str) -> Position:
    order, rest = read_cursor(cursor, of=_LIST)
    match rest:
        case [str() as conversation_id] if CONVERSATION_ID.fullmatch(conversation_id):
            return Position(order, conversation_id)
    raise InvalidCursor("it does not name a place in the list", of=_LIST)


@dataclass(frozen=True, slots=True)
class DeleteConversation:
    """Forget a conversation: its pending calls can no longer be approved; the audit trail keeps the
    decisions made in it."""

    repository: ConversationStore
    clock: Callable[[], float]

    async def __call__(self, conversation_id: str, *, identity: Identity | None, entrance: str) -> None:
        """Raises InvalidRequest, MissingScope (``chat``; audited) or ConversationNotFound."""
        check_conversation_id(conversation_id)
        store = require(self.repository, Listing)
        if identity is not None and not identity.can("chat"):
            refusal = MissingScope("chat", "delete conversations")
            reason = f"delete refused: {refusal}"
            record = DecisionRecord.refused(
                conversation_id, reason, by=identity.name, entrance=entrance, at=self.clock()
            )
            await arecord_decisions(store, [record])
            raise refusal
        if identity is not None and not identity.can("admin"):
            conversation = await store.aget_recent(conversation_id)
            if conversation is None or not conversation.is_visible_to(identity):
                raise ConversationNotFound(conversation_id)
        if not await asyncio.to_thread(store.delete, conversation_id):
            raise ConversationNotFound(conversation_id)


async def _load(store: Listing, ids: list[str]) -> list[Conversation | StoredConversationUnreadable | None]:
    """A page in one batch read (one round trip on Redis, never a connection per id); when one record
    in it is damaged, each is read on its own, READ_CONCURRENCY at once, so the others still list."""
    try:
        return list(await store.aget_many(ids))
    except StoredConversationUnreadable:
        pass
    limit = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(conversation_id: str) -> Conversation | StoredConversationUnreadable | None:
        async with limit:
            try:
                return await store.aget(conversation_id)
            except StoredConversationUnreadable as damaged:
                return damaged

    return list(await asyncio.gather(*(one(i) for i in ids)))
