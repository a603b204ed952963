"""Stopping a run: the one use case behind every entrance that cancels a conversation's turn
(``POST /api/conversations/{id}/cancel``, the chat page's Stop, Ctrl-C in ``dcaf-like chat``,
``Agent.cancel``).

It applies, in one place, what every other action applies: the id is well formed, the caller holds
the scope (``chat``: whoever may send a conversation a message may stop its turn), the conversation
is the caller's (another identity's is not found, as on every read), and a refusal for a missing
scope joins the audit trail. Only then is the cancel mark written, so no id a caller invents is
ever written to the store.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from dcaf_like.application.errors import ConversationNotFound, InvalidRequest, MissingScope
from dcaf_like.application.ports import (
    CancelFlags,
    ConversationStore,
    arecord_decisions,
    record_decisions,
    require,
)
from dcaf_like.concurrency.bridges import at_once
from dcaf_like.domain import DecisionRecord, Identity

#: What a conversation id may be: at most 128 of A-Z a-z 0-9 . _ : -
CONVERSATION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
SCOPE = "chat"


def check_conversation_id(conversation_id: str) -> None:
    """InvalidRequest unless `conversation_id` is one a conversation can have."""
    if not CONVERSATION_ID.fullmatch(conversation_id):
        raise InvalidRequest("conversation_id", "at most 128 characters of A-Z a-z 0-9 . _ : -")


@dataclass(frozen=True, slots=True)
class CancelRun:
    """Ask the turn running on a conversation (on any worker sharing the store) to stop."""

    repository: ConversationStore
    clock: Callable[[], float]

    async def __call__(
        self, conversation_id: str, *, identity: Identity | None, entrance: str, blocking: bool = False
    ) -> None:
        """`identity` is who the server authenticated (None: a server without keys, or the Python
        facade, which trust their callers). Raises InvalidRequest, MissingScope or
        ConversationNotFound, and writes no cancel then. `blocking` uses the store's blocking methods
        (nothing is awaited that waits: see :meth:`blocking`)."""
        store = self.repository
        check_conversation_id(conversation_id)
        if identity is not None and not identity.can(SCOPE):
            refusal = MissingScope(SCOPE, "stop runs")
            reason = f"cancel refused: {refusal}"
            at = self.clock()
            records = [
                DecisionRecord.refused(conversation_id, reason, by=identity.name, entrance=entrance, at=at)
            ]
            record_decisions(store, records) if blocking else await arecord_decisions(store, records)
            raise refusal
        flags = require(store, CancelFlags)
        found = store.get_recent(conversation_id) if blocking else await store.aget_recent(conversation_id)
        if found is None or not found.is_visible_to(identity):
            raise ConversationNotFound(conversation_id)  # another identity's: as if it did not exist
        at = self.clock()
        if blocking:
            flags.request_cancel(conversation_id, at=at)
        else:
            await flags.arequest_cancel(conversation_id, at=at)

    def blocking(self, conversation_id: str, *, identity: Identity | None, entrance: str) -> None:
        """The same, from blocking code (``Agent.cancel``)."""
        at_once(self(conversation_id, identity=identity, entrance=entrance, blocking=True))
