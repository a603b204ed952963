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

from dcaf_like.application.cancel import check_conversation_id
from dcaf_like.application.errors import ConversationNotFound, MissingScope, StoredConversationUnreadable
from dcaf_like.application.ports import (
    READ_CONCURRENCY,
    ConversationStore,
    Listing,
    arecord_decisions,
    require,
)
from dcaf_like.domain import Conversation, DecisionRecord, Identity

logger = logging.getLogger("dcaf_like")

#: A caller who sees only its own conversations: how many of the most recent a list looks through.
SCAN_LIMIT = 5000


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
    """The conversations a list found, most recently updated first, and the stored records it could not
    read (shown only to a caller who sees every conversation: no owner can be read from them)."""

    conversations: list[Conversation]
    unreadable: list[StoredConversationUnreadable]


@dataclass(frozen=True, slots=True)
class ListConversations:
    """The caller's most recent conversations."""

    repository: ConversationStore

    async def __call__(self, *, identity: Identity | None, limit: int) -> Listed:
        """At most `limit` of them. The store lists every owner's: for a caller who sees only its own,
        ever more of the most recent are read, up to SCAN_LIMIT. Raises MissingScope (``read``)."""
        _require(identity, "read", "list conversations")
        store, asked = require(self.repository, Listing), limit
        read: set[str] = set()
        found: list[Conversation] = []
        unreadable: list[StoredConversationUnreadable] = []
        while True:
            ids = await asyncio.to_thread(store.list_ids, asked)
            unread = [i for i in ids if i not in read]
            read.update(unread)
            for item in await _load(store, unread):
                if isinstance(item, StoredConversationUnreadable):
                    logger.warning("%s", item)
                    unreadable.append(item)
                elif item is not None and item.is_visible_to(identity):
                    found.append(item)
            if len(found) >= limit or len(ids) < asked or asked >= SCAN_LIMIT:
                sees_all = identity is None or identity.can("admin")
                return Listed(found[:limit], unreadable if sees_all else [])
            asked = min(asked * 4, SCAN_LIMIT)


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
