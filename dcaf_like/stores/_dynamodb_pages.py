"""The pages of a DynamoDB conversation item that a windowed read needs (ADR 22), and what a repository
remembers of them between a turn's read and its save.

A conversation's messages, and its calls, are stored in pages of :data:`PAGE` records, each page an
attribute of the item (``m0``, ``m1``, ...; ``c0``, ...). A windowed read asks its one ``GetItem`` for
the header and the pages from the one holding the window's start on (:class:`Pages`); which those are
it learns from the header, so it asks for those its repository last saw, and asks again if the header
it gets needs others. The first of those pages also holds records before the window, which the read
leaves out of the conversation but which a save rewriting that page must write back: they never change
(ADR 22), so the repository keeps that page as it read or wrote it (:class:`PageMemory`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

# Records per page: a save rewrites the pages holding what changed (usually the last page of the
# messages), at most this many records each, whatever the length of the conversation (ADR 16).
PAGE = 64


def pages_for(records: int) -> int:
    """How many pages `records` records take."""
    return -(-records // PAGE)


@dataclass(frozen=True, slots=True)
class Pages:
    """Pages of a conversation's item: those of its messages in `messages`, of its calls in `calls`."""

    messages: range
    calls: range

    @classmethod
    def window(cls, start: int, first_call: int, messages: int, calls: int) -> Pages:
        """The pages holding message `start` and call `first_call` on, of `messages` and `calls`."""
        return cls(range(start // PAGE, pages_for(messages)), range(first_call // PAGE, pages_for(calls)))

    def covers(self, other: Pages) -> bool:
        return _within(other.messages, self.messages) and _within(other.calls, self.calls)

    def and_next(self) -> Pages:
        """These and the page after each: what a read asks for, in case another worker's save has
        added a page since these were needed."""
        return Pages(
            range(self.messages.start, self.messages.stop + 1), range(self.calls.start, self.calls.stop + 1)
        )

    def attributes(self) -> list[str]:
        return [f"m{k}" for k in self.messages] + [f"c{k}" for k in self.calls]


#: What a read asks for a conversation its repository knows nothing of: the first two pages of each,
#: all of a conversation of up to 128 messages and 128 calls.
FIRST_PAGES = Pages(range(2), range(2))


def _within(inner: range, outer: range) -> bool:
    return not inner or (outer.start <= inner.start and inner.stop <= outer.stop)


@dataclass(frozen=True, slots=True)
class Remembered:
    """What a repository last read or wrote of a conversation: at `version`, the pages its window
    needed, and the first of them (of messages, of calls) as stored then, compressed (None: not known)."""

    version: int
    pages: Pages
    first_message_page: bytes | None
    first_call_page: bytes | None

    def stored(self, attribute: str, version: int) -> bytes | None:
        """Page `attribute` (``m3``, ``c0``) as stored at `version`, if this is it."""
        if version != self.version:
            return None
        if attribute == f"m{self.pages.messages.start}":
            return self.first_message_page
        if attribute == f"c{self.pages.calls.start}":
            return self.first_call_page
        return None

    @property
    def size(self) -> int:
        """Bytes it takes, roughly: its pages, and its own for the rest."""
        return 256 + len(self.first_message_page or b"") + len(self.first_call_page or b"")


class PageMemory:
    """:class:`Remembered` of the conversations a repository read or wrote last, up to `budget` bytes
    of pages (the least recently used go first). Threads share it: the async methods run in workers."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[str, Remembered] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> Remembered | None:
        with self._lock:
            found = self._entries.get(conversation_id)
            if found is not None:
                self._entries.move_to_end(conversation_id)
            return found

    def put(self, conversation_id: str, remembered: Remembered) -> None:
        with self._lock:
            self._drop(conversation_id)
            if remembered.size > self.budget:
                return
            self._entries[conversation_id] = remembered
            self._size += remembered.size
            while self._size > self.budget:
                self._drop(next(iter(self._entries)))

    def forget(self, conversation_id: str) -> None:
        with self._lock:
            self._drop(conversation_id)

    def _drop(self, conversation_id: str) -> None:
        old = self._entries.pop(conversation_id, None)
        if old is not None:
            self._size -= old.size

    def __len__(self) -> int:
        return len(self._entries)
