"""InMemoryConversationRepository: for tests, scripts and a single process that may forget on exit."""

from __future__ import annotations

import copy
import threading
from typing import Any

from dcaf_like.adapters.serialization import conversation_from_dict, conversation_to_dict
from dcaf_like.application.errors import ConcurrencyConflict
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.domain import Conversation


class InMemoryConversationRepository(ConversationRepository):
    """Keeps a snapshot per conversation, so a change is visible only once saved, as with a real store."""

    def __init__(self) -> None:
        self._items: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> Conversation | None:
        with self._lock:
            snapshot = self._items.get(conversation_id)
        return None if snapshot is None else conversation_from_dict(copy.deepcopy(snapshot))

    def save(self, conversation: Conversation, expected_version: int) -> None:
        snapshot = conversation_to_dict(conversation)
        with self._lock:
            current = self._items.get(conversation.id)
            actual = 0 if current is None else current["version"]
            if actual != expected_version:
                raise ConcurrencyConflict(conversation.id, expected_version, actual)
            # Re-inserting moves the id to the end: the dict's order is recency.
            self._items.pop(conversation.id, None)
            self._items[conversation.id] = copy.deepcopy(snapshot)

    def delete(self, conversation_id: str) -> bool:
        with self._lock:
            return self._items.pop(conversation_id, None) is not None

    def list_ids(self, limit: int = 100) -> list[str]:
        with self._lock:
            return list(reversed(self._items))[:limit]

    def __len__(self) -> int:
        return len(self._items)
