"""InMemoryConversationRepository: for tests, scripts and a single process that may forget on exit."""

from __future__ import annotations

import threading

from dcaf_like.adapters.serialization import decode, encode
from dcaf_like.application.errors import ConcurrencyConflict
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.domain import Conversation


class InMemoryConversationRepository(ConversationRepository):
    """Keeps each conversation as the JSON text a persistent store writes: a change is visible only
    once saved, a loaded conversation shares nothing with the store, and it costs less than a deep
    copy."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> Conversation | None:
        with self._lock:
            item = self._items.get(conversation_id)
        return None if item is None else decode(item[1], conversation_id)

    def save(self, conversation: Conversation, expected_version: int) -> None:
        body = encode(conversation)
        with self._lock:
            current = self._items.get(conversation.id)
            actual = 0 if current is None else current[0]
            if actual != expected_version:
                raise ConcurrencyConflict(conversation.id, expected_version, actual)
            # Re-inserting moves the id to the end: the dict's order is recency.
            self._items.pop(conversation.id, None)
            self._items[conversation.id] = (conversation.version, body)

    def delete(self, conversation_id: str) -> bool:
        with self._lock:
            return self._items.pop(conversation_id, None) is not None

    def list_ids(self, limit: int = 100) -> list[str]:
        with self._lock:
            return list(reversed(self._items))[:limit]

    def __len__(self) -> int:
        return len(self._items)
