"""SqliteConversationRepository: conversations in one SQLite file, with nothing else to run.

The embedded default of ``serve()``. Several processes may share the file (WAL mode, a busy timeout):
every write is a compare-and-set on the version inside an ``IMMEDIATE`` transaction, so of two workers
saving the same conversation exactly one wins.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from dcaf_like.adapters.serialization import decode, encode
from dcaf_like.application.errors import ConcurrencyConflict, StoreUnavailable
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.domain import Conversation

TABLE = "dcaf_conversations"

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    namespace  TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    updated_at REAL    NOT NULL,
    body       TEXT    NOT NULL,
    PRIMARY KEY (namespace, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {TABLE}_recent ON {TABLE} (namespace, updated_at);
"""


class SqliteConversationRepository(ConversationRepository):
    """Conversations in the SQLite file at `path` (created with its directory if missing).

    `namespace` keeps agents sharing one file apart (``serve`` uses the agent's name). With `ttl`
    (seconds), a conversation untouched for longer reads as absent and is purged on later writes.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        namespace: str = "default",
        ttl: float | None = None,
        busy_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if str(path) in ("", ":memory:") or str(path).startswith("file::memory:"):
            raise ValueError(
                "SqliteConversationRepository needs a file; use InMemoryConversationRepository "
                "for conversations that may be forgotten"
            )
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be a positive number of seconds, or None to keep conversations")
        self.path = Path(path).expanduser()
        self.namespace = namespace
        self.ttl = ttl
        self.busy_timeout = busy_timeout
        self.clock = clock
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    # -- the port ---------------------------------------------------------------------------------

    def get(self, conversation_id: str) -> Conversation | None:
        with self._reading() as db:
            row = db.execute(
                f"SELECT body FROM {TABLE} WHERE namespace = ? AND id = ? AND updated_at >= ?",
                (self.namespace, conversation_id, self._oldest_kept()),
            ).fetchone()
        return None if row is None else decode(row[0], conversation_id)

    def save(self, conversation: Conversation, expected_version: int) -> None:
        body = encode(conversation)
        now = self.clock()
        with self._writing() as db:
            if self.ttl is not None:
                db.execute(
                    f"DELETE FROM {TABLE} WHERE namespace = ? AND updated_at < ?",
                    (self.namespace, self._oldest_kept()),
                )
            if expected_version == 0:
                written = db.execute(
                    f"INSERT INTO {TABLE} (namespace, id, version, updated_at, body) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (namespace, id) DO NOTHING",
                    (self.namespace, conversation.id, conversation.version, now, body),
                ).rowcount
            else:
                written = db.execute(
                    f"UPDATE {TABLE} SET version = ?, updated_at = ?, body = ? "
                    "WHERE namespace = ? AND id = ? AND version = ?",
                    (conversation.version, now, body, self.namespace, conversation.id, expected_version),
                ).rowcount
            if written != 1:
                row = db.execute(
                    f"SELECT version FROM {TABLE} WHERE namespace = ? AND id = ?",
                    (self.namespace, conversation.id),
                ).fetchone()
                raise ConcurrencyConflict(conversation.id, expected_version, None if row is None else row[0])

    def delete(self, conversation_id: str) -> bool:
        with self._writing() as db:
            deleted = db.execute(
                f"DELETE FROM {TABLE} WHERE namespace = ? AND id = ?", (self.namespace, conversation_id)
            ).rowcount
        return bool(deleted)

    def list_ids(self, limit: int = 100) -> list[str]:
        with self._reading() as db:
            rows = db.execute(
                f"SELECT id FROM {TABLE} WHERE namespace = ? AND updated_at >= ? "
                "ORDER BY updated_at DESC LIMIT ?",
                (self.namespace, self._oldest_kept(), limit),
            ).fetchall()
        return [row[0] for row in rows]

    # SQLite blocks: the async twins run in worker threads, each with its own connection.
    async def aget(self, conversation_id: str) -> Conversation | None:
        return await asyncio.to_thread(self.get, conversation_id)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        await asyncio.to_thread(self.save, conversation, expected_version)

    def close(self) -> None:
        """Close every connection this repository opened (in any thread)."""
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"SqliteConversationRepository({str(self.path)!r}, namespace={self.namespace!r})"

    # -- connections ------------------------------------------------------------------------------

    def _oldest_kept(self) -> float:
        return float("-inf") if self.ttl is None else self.clock() - self.ttl

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
            try:
                connection.execute("PRAGMA journal_mode = WAL")
                connection.execute("PRAGMA synchronous = NORMAL")
                connection.executescript(_SCHEMA)
            except sqlite3.Error:
                connection.close()
                raise
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self._connection()
        except (sqlite3.Error, OSError) as exc:
            raise self._unavailable(exc) from exc

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock is taken before the version is compared."""
        try:
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, OSError) as exc:
            raise self._unavailable(exc) from exc
        try:
            yield db
        except BaseException as exc:
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._unavailable(exc) from exc
            raise
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(f"sqlite store {self.path}: {type(exc).__name__}: {exc}")
