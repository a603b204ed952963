"""What the stores share: the checks of their retention options, how a client library's errors reach
the application (:class:`ClientErrors`), and the async methods of a store whose client blocks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import TracebackType

from dcaf_like.application.errors import StoredConversationUnreadable, StoreUnavailable
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.application.waiting import encode_entries, waiting_entries
from dcaf_like.concurrency.threads import in_thread
from dcaf_like.domain import Conversation, DecisionRecord

# Seconds a store that keeps cancel requests apart from conversations keeps one: long enough for any
# turn it may be meant for.
CANCEL_KEPT = 3600


def entries_to_fill(conversation_id: str, read: Callable[[], Conversation | None]) -> tuple[int, str]:
    """A stored conversation's version and inbox entries, as a store filling its index for the
    conversations an earlier version saved writes them ("" when none waits; (0, "") when it is gone).
    One that cannot be read is logged and left out: its own page fails to read as well, and the fill
    goes on with the others."""
    try:
        conversation = read()
    except StoredConversationUnreadable as exc:
        logging.getLogger("dcaf_like.stores").warning(
            "inbox index not filled for %s: %s", conversation_id, exc
        )
        return 0, ""
    if conversation is None:
        return 0, ""
    return conversation.version, encode_entries(waiting_entries(conversation))


def check_retention(ttl: float | None, audit_ttl: float | None) -> None:
    """Refuse a time to keep conversations (`ttl`) or decision records (`audit_ttl`) that is not positive."""
    if ttl is not None and ttl <= 0:
        raise ValueError("ttl must be a positive number of seconds, or None to keep conversations")
    if audit_ttl is not None and audit_ttl <= 0:
        raise ValueError("audit_ttl must be a positive number of seconds, or None to keep records")


class ClientErrors:
    """``with`` block in which a client library's error (one of `errors`) becomes a StoreUnavailable
    that names the store (`where`), the error's type and its first line; anything else goes through.
    One instance serves every block of a store, sync or async."""

    def __init__(self, errors: tuple[type[BaseException], ...], where: str) -> None:
        self.errors = errors
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc is not None and isinstance(exc, self.errors):
            raise StoreUnavailable(f"{self.where}: {type(exc).__name__}: {first_line(exc)}") from exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


class BlockingRepository(ConversationRepository):
    """A store whose client blocks: each async method of the port runs its sync twin in a worker thread
    (:func:`~dcaf_like.concurrency.threads.in_thread`), unless the store overrides it with a
    native one."""

    async def aget(self, conversation_id: str) -> Conversation | None:
        return await in_thread(self.get, conversation_id)

    async def aget_recent(self, conversation_id: str) -> Conversation | None:
        return await in_thread(self.get_recent, conversation_id)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        await in_thread(self.save, conversation, expected_version)

    async def arecord_decisions(self, records: Sequence[DecisionRecord]) -> None:
        await in_thread(self.record_decisions, records)

    async def adecision_records(
        self, conversation_id: str | None = None, limit: int = 100
    ) -> list[DecisionRecord]:
        return await in_thread(self.decision_records, conversation_id, limit)

    async def arequest_cancel(self, conversation_id: str, *, at: float) -> None:
        await in_thread(self.request_cancel, conversation_id, at=at)

    async def acancel_requested(self, conversation_id: str, *, since: float) -> bool:
        return await in_thread(self.cancel_requested, conversation_id, since=since)
