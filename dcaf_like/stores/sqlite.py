"""SqliteConversationRepository: conversations in one SQLite file, with nothing else to run.

The embedded default of ``serve()``. Several processes may share the file (WAL mode, a busy timeout):
every write is a compare-and-set on the version inside an ``IMMEDIATE`` transaction, so of two workers
saving the same conversation exactly one wins.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any

from dcaf_like.application.errors import ConcurrencyConflict, StoredConversationUnreadable, StoreUnavailable
from dcaf_like.application.ports import ConversationRepository, GrantStore, Position
from dcaf_like.application.retention import waiting_until
from dcaf_like.application.waiting import WaitingEntry, decode_entries, index_changes
from dcaf_like.domain import Conversation, DecisionRecord, ToolCallStatus
from dcaf_like.domain.grant import Grant
from dcaf_like.domain.trail import AuditDigest, ChainHead, Trail
from dcaf_like.stores._codec import Changes, changes, decode_parts
from dcaf_like.stores._shared import CANCEL_KEPT, check_retention, entries_to_fill

logger = logging.getLogger("dcaf_like.stores")

TABLE = "dcaf_conversations"
# A conversation's messages and tool calls, one row each, keyed by their position (ADR 16): a save
# writes the rows that changed; the header in TABLE counts them. Deleting a header deletes its rows.
MESSAGES = "dcaf_messages"
CALLS = "dcaf_calls"
# The audit trail: one row per decision, appended in the transaction of the save that carries it,
# never updated, and never deleted with its conversation (only by `audit_ttl`).
AUDIT_TABLE = "dcaf_decisions"
# The chain over AUDIT_TABLE (ADR 34): its head per namespace, read and moved in the transaction that
# appends (IMMEDIATE: one writer at a time, across processes), and the signed digests by number.
HEADS = "dcaf_audit_heads"
DIGESTS = "dcaf_audit_digests"
CANCELS = "dcaf_cancels"
# Standing grants (docs/approvals.md, "Grants"): each as its JSON, read by every turn as it begins.
GRANTS = "dcaf_grants"
# The inbox's index (docs/approvals.md, "One inbox"): per conversation with calls waiting for approval,
# their entries as JSON, written in the transaction of the save that changed them and deleted with the
# conversation's header.
WAITING = "dcaf_waiting"
# What the file holds whole, of every namespace, a row each by name. WAITING_WHOLE: every
# conversation's entries are in WAITING (saves keep them so from then on).
MARKS = "dcaf_marks"
WAITING_WHOLE = "waiting-whole"
_CANCELS = (
    f"CREATE TABLE IF NOT EXISTS {CANCELS} "
    "(namespace TEXT NOT NULL, id TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (namespace, id))"
)

# A conversation's JSON this long or longer is stored zlib-compressed, as a BLOB (shorter ones stay
# text, readable with the sqlite3 shell). The table is WITHOUT ROWID, whose B-tree cells hold at most
# ~1,000 bytes of a row on a 4 KiB page: a body just over that spilled into an overflow page of its
# own, mostly empty. Compressed (level 1, the cheapest), such a body fits its cell, and a long
# conversation's save writes far fewer pages (the figures are in docs/stores.md, "SQLite";
# tests/integration/test_sqlite_bodies.py holds the file's size to them).
COMPRESS_FROM = 512

# Checkpoints of the write-ahead log, kept off the event loop where they can be. A checkpoint copies
# the log's pages into the database file and syncs it: run inline by a commit on the loop every 1,000
# pages (SQLite's default), it put the p99 of an answer over HTTP up several-fold (ADR 9). So every
# CHECKPOINT_EVERY saves on the loop, a worker thread runs a PASSIVE checkpoint, which waits for no one;
# the log starts over at the first write after one that caught up (a quiet moment). Under writes that
# never pause none does, and the loop's connection checkpoints by itself once the log holds LOG_LIMIT
# pages, with most of them already copied: the log never grows without bound, and a checkpoint on the
# loop is rarer and shorter (ADR 9 has the figures, from `benchmarks/http_load.py`).
CHECKPOINT_EVERY = 64
LOG_LIMIT = 4000

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
CREATE TABLE IF NOT EXISTS {MESSAGES} (
    namespace TEXT    NOT NULL,
    id        TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    body      TEXT    NOT NULL,
    PRIMARY KEY (namespace, id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {CALLS} (
    namespace TEXT    NOT NULL,
    id        TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    body      TEXT    NOT NULL,
    PRIMARY KEY (namespace, id, seq)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS {TABLE}_parts AFTER DELETE ON {TABLE}
BEGIN
    DELETE FROM {MESSAGES} WHERE namespace = old.namespace AND id = old.id;
    DELETE FROM {CALLS} WHERE namespace = old.namespace AND id = old.id;
END;
CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} (
    seq             INTEGER PRIMARY KEY,
    namespace       TEXT    NOT NULL,
    conversation_id TEXT    NOT NULL,
    at              REAL    NOT NULL,
    record          TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS {AUDIT_TABLE}_conversation ON {AUDIT_TABLE} (namespace, conversation_id, at);
CREATE INDEX IF NOT EXISTS {AUDIT_TABLE}_recent ON {AUDIT_TABLE} (namespace, at);
CREATE TRIGGER IF NOT EXISTS {AUDIT_TABLE}_append_only BEFORE UPDATE ON {AUDIT_TABLE}
BEGIN SELECT RAISE(ABORT, 'decision records are append-only'); END;
CREATE TABLE IF NOT EXISTS {HEADS} (
    namespace TEXT    PRIMARY KEY,
    seq       INTEGER NOT NULL,
    hash      TEXT    NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {GRANTS} (
    namespace TEXT NOT NULL,
    id        TEXT NOT NULL,
    body      TEXT NOT NULL,
    PRIMARY KEY (namespace, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {DIGESTS} (
    namespace TEXT    NOT NULL,
    number    INTEGER NOT NULL,
    digest    TEXT    NOT NULL,
    PRIMARY KEY (namespace, number)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {MARKS} (name TEXT PRIMARY KEY) WITHOUT ROWID;
"""

# Columns added since the table was first released: added to a file that lacks them when it is opened
# (a row an earlier version wrote has NULL there). waiting_until: when the approval window of the
# conversation's last pending call closes (see dcaf_like.application.retention). window_message,
# window_call: where a windowed read starts (ADR 22), NULL as 0. owner: the identity whose the
# conversation is (never changes), indexed for an owner's list; a file of an earlier version gets it
# from each header's JSON when the column is added.
_ADDED_COLUMNS = {
    "waiting_until": "REAL",
    "window_message": "INTEGER",
    "window_call": "INTEGER",
    "owner": "TEXT",
}
# The inbox's index, made apart from the schema above and filled once, in the transaction that
# writes the mark WAITING_WHOLE: a file an earlier version wrote may hold conversations with calls
# waiting and no entries for them, with no index (before it existed) or with one (the version that
# made it did not fill it).
_WAITING_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {WAITING} (namespace TEXT NOT NULL, id TEXT NOT NULL, "
    "body TEXT NOT NULL, PRIMARY KEY (namespace, id)) WITHOUT ROWID",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_waiting AFTER DELETE ON {TABLE} "
    f"BEGIN DELETE FROM {WAITING} WHERE namespace = old.namespace AND id = old.id; END",
)
_MARKED = f"SELECT 1 FROM {MARKS} WHERE name = ?"
# The conversations without entries, which the fill reads (those with entries have the right ones).
_UNINDEXED = (
    f"SELECT t.namespace, t.id FROM {TABLE} t LEFT JOIN {WAITING} w "
    "ON w.namespace = t.namespace AND w.id = t.id WHERE w.id IS NULL"
)
_OWNERS_FILLED = f"UPDATE {TABLE} SET owner = json_extract(body, '$.owner') WHERE json_valid(body)"
_OWNERS_INDEX = f"CREATE INDEX IF NOT EXISTS {TABLE}_owner ON {TABLE} (namespace, owner, updated_at)"


class SqliteConversationRepository(ConversationRepository, GrantStore):
    """Conversations in the SQLite file at `path` (created with its directory if missing).

    `namespace` keeps agents sharing one file apart (``serve`` uses the agent's name). With `ttl`
    (seconds), a conversation untouched for longer reads as absent and is purged on later writes,
    unless it waits for a decision whose approval window is still open. Decision records (the audit
    trail) live in their own table; with `audit_ttl` they are purged that long after they were made.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        namespace: str = "default",
        ttl: float | None = None,
        audit_ttl: float | None = None,
        busy_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if str(path) in ("", ":memory:") or str(path).startswith("file::memory:"):
            raise ValueError(
                "SqliteConversationRepository needs a file; use InMemoryConversationRepository "
                "for conversations that may be forgotten"
            )
        check_retention(ttl, audit_ttl)
        self.path = Path(path).expanduser()
        self.namespace = namespace
        self.ttl = ttl
        self.audit_ttl = audit_ttl
        self.busy_timeout = busy_timeout
        self.clock = clock
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._loop_saves = 0
        self._checkpointing = False
        self._checkpoint_run: asyncio.Future[None] | None = None  # held so the running one is not collected
        self._lock = threading.Lock()
        # Threads of this process take turns to write: waiting on SQLite's own lock means its busy
        # handler's sleeps (up to 100 ms each); other processes still wait on the file lock.
        self._write_lock = threading.Lock()

    # -- the port ---------------------------------------------------------------------------------

    def get(self, conversation_id: str) -> Conversation | None:
        return self._get(conversation_id, self._connection())

    def get_recent(self, conversation_id: str) -> Conversation | None:
        return self._get(conversation_id, self._connection(), windowed=True)

    def save(self, conversation: Conversation, expected_version: int) -> None:
        self._save(
            conversation, expected_version, _rows(conversation, expected_version), self._connection(),
            self._write_lock,
        )  # fmt: skip

    def _get(
        self, conversation_id: str, connection: sqlite3.Connection, *, windowed: bool = False
    ) -> Conversation | None:
        """The header and its rows (`windowed`: those from the window its last save recorded on), in
        one statement (one snapshot of the file)."""
        key = (self.namespace, conversation_id)
        with self._reading(connection) as db:
            if windowed:
                rows = db.execute(_READ_WINDOW, (*key, *self._kept(), *key, *key, *key, *key)).fetchall()
            else:
                rows = db.execute(_READ, (*key, *self._kept(), *key, *key)).fetchall()
        return _decoded(rows, conversation_id, windowed=windowed)

    def _save(
        self,
        conversation: Conversation,
        expected_version: int,
        rows: _Rows,
        connection: sqlite3.Connection,
        lock: AbstractContextManager[Any],
    ) -> None:
        now = self.clock()
        waiting = waiting_until(conversation)
        body, (window_message, window_call) = rows.header, rows.window
        key = (self.namespace, conversation.id)
        with self._writing(connection, lock, synced=rows.claims) as db:
            if self.ttl is not None:
                db.execute(
                    f"DELETE FROM {TABLE} WHERE namespace = ? AND {_GONE}",
                    (self.namespace, *self._kept()),
                )
            if expected_version == 0:
                written = db.execute(
                    f"INSERT INTO {TABLE} (namespace, id, version, updated_at, body, waiting_until, "
                    "window_message, window_call, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (namespace, id) DO NOTHING",
                    (
                        self.namespace,
                        conversation.id,
                        conversation.version,
                        now,
                        body,
                        waiting,
                        window_message,
                        window_call,
                        conversation.owner,
                    ),
                ).rowcount
            else:
                written = db.execute(
                    f"UPDATE {TABLE} SET version = ?, updated_at = ?, body = ?, waiting_until = ?, "
                    "window_message = ?, window_call = ? WHERE namespace = ? AND id = ? AND version = ?",
                    (
                        conversation.version,
                        now,
                        body,
                        waiting,
                        window_message,
                        window_call,
                        self.namespace,
                        conversation.id,
                        expected_version,
                    ),
                ).rowcount
            if written != 1:
                row = db.execute(
                    f"SELECT version FROM {TABLE} WHERE namespace = ? AND id = ?",
                    (self.namespace, conversation.id),
                ).fetchone()
                raise ConcurrencyConflict(conversation.id, expected_version, None if row is None else row[0])
            # A new conversation has no rows to drop: its header did not exist (the INSERT wrote), and
            # rows never outlive their header (the trigger deletes them with it).
            if rows.whole and expected_version != 0:
                db.execute(f"DELETE FROM {MESSAGES} WHERE namespace = ? AND id = ?", key)
                db.execute(f"DELETE FROM {CALLS} WHERE namespace = ? AND id = ?", key)
            if rows.messages:  # a message stored before may have changed (it proposed a call): replaced
                db.executemany(
                    f"INSERT OR REPLACE INTO {MESSAGES} (namespace, id, seq, body) VALUES (?, ?, ?, ?)",
                    [(*key, rows.first + i, body) for i, body in enumerate(rows.messages)],
                )
            if rows.calls:
                db.executemany(
                    f"INSERT OR REPLACE INTO {CALLS} (namespace, id, seq, body) VALUES (?, ?, ?, ?)",
                    [(*key, seq, body) for seq, body in rows.calls],
                )
            if rows.waiting:
                db.execute(
                    f"INSERT OR REPLACE INTO {WAITING} (namespace, id, body) VALUES (?, ?, ?)",
                    (*key, rows.waiting),
                )
            elif rows.waiting is not None and expected_version != 0:
                db.execute(f"DELETE FROM {WAITING} WHERE namespace = ? AND id = ?", key)
            if conversation.unsaved_decisions:
                self._append(db, conversation.unsaved_decisions)
        conversation.unsaved_decisions.clear()
        conversation.mark_saved()

    def _append(self, db: sqlite3.Connection, records: Sequence[DecisionRecord]) -> None:
        """Inside a write transaction."""
        if self.audit_ttl is not None:
            db.execute(
                f"DELETE FROM {AUDIT_TABLE} WHERE namespace = ? AND at < ?",
                (self.namespace, self.clock() - self.audit_ttl),
            )
        row = db.execute(_HEAD, (self.namespace,)).fetchone()
        linked, head = (ChainHead() if row is None else ChainHead(*row)).link(records)
        db.executemany(
            f"INSERT INTO {AUDIT_TABLE} (namespace, conversation_id, at, record) VALUES (?, ?, ?, ?)",
            [(self.namespace, r.conversation_id, r.at, r.to_json()) for r in linked],
        )
        db.execute(
            f"INSERT OR REPLACE INTO {HEADS} (namespace, seq, hash) VALUES (?, ?, ?)",
            (self.namespace, head.seq, head.hash),
        )

    def audit_trail(self) -> Trail:
        """Read in one transaction: a snapshot, so an append meanwhile never looks like a deletion."""
        with self._reading(self._connection()) as db, _snapshot(db):
            rows = db.execute(
                f"SELECT record FROM {AUDIT_TABLE} WHERE namespace = ? ORDER BY seq", (self.namespace,)
            ).fetchall()
            digests = db.execute(
                f"SELECT digest FROM {DIGESTS} WHERE namespace = ? ORDER BY number", (self.namespace,)
            ).fetchall()
            head = db.execute(_HEAD, (self.namespace,)).fetchone()
        return Trail(
            [DecisionRecord.from_json(row[0]) for row in rows],
            [AuditDigest.from_json(row[0]) for row in digests],
            ChainHead() if head is None else ChainHead(*head),
        )

    def audit_tip(self) -> tuple[ChainHead, AuditDigest | None]:
        with self._reading(self._connection()) as db:
            head = db.execute(_HEAD, (self.namespace,)).fetchone()
            last = db.execute(
                f"SELECT digest FROM {DIGESTS} WHERE namespace = ? ORDER BY number DESC LIMIT 1",
                (self.namespace,),
            ).fetchone()
        return (
            ChainHead() if head is None else ChainHead(*head),
            None if last is None else AuditDigest.from_json(last[0]),
        )

    def append_digest(self, digest: AuditDigest) -> bool:
        with self._writing(self._connection(), self._write_lock) as db:
            written = db.execute(
                f"INSERT OR IGNORE INTO {DIGESTS} (namespace, number, digest) VALUES (?, ?, ?)",
                (self.namespace, digest.number, digest.to_json()),
            ).rowcount
        return written == 1

    def record_decisions(self, records: Sequence[DecisionRecord]) -> None:
        if records:
            with self._writing(self._connection(), self._write_lock) as db:
                self._append(db, records)

    def decision_records(self, conversation_id: str | None = None, limit: int = 100) -> list[DecisionRecord]:
        oldest = float("-inf") if self.audit_ttl is None else self.clock() - self.audit_ttl
        with self._reading(self._connection()) as db:
            if conversation_id is None:
                rows = db.execute(
                    f"SELECT record FROM {AUDIT_TABLE} WHERE namespace = ? AND at >= ? "
                    "ORDER BY at DESC, seq DESC LIMIT ?",
                    (self.namespace, oldest, limit),
                ).fetchall()
            else:
                rows = db.execute(
                    f"SELECT record FROM {AUDIT_TABLE} WHERE namespace = ? AND conversation_id = ? "
                    "AND at >= ? ORDER BY at DESC, seq DESC LIMIT ?",
                    (self.namespace, conversation_id, oldest, limit),
                ).fetchall()
        return [DecisionRecord.from_json(row[0]) for row in rows]

    async def arecord_decisions(self, records: Sequence[DecisionRecord]) -> None:
        if records:
            await asyncio.to_thread(self.record_decisions, records)

    async def adecision_records(
        self, conversation_id: str | None = None, limit: int = 100
    ) -> list[DecisionRecord]:
        return await asyncio.to_thread(self.decision_records, conversation_id, limit)

    def delete(self, conversation_id: str) -> bool:
        with self._writing(self._connection(), self._write_lock) as db:
            deleted = db.execute(
                f"DELETE FROM {TABLE} WHERE namespace = ? AND id = ?", (self.namespace, conversation_id)
            ).rowcount
        return bool(deleted)

    def list_waiting(self) -> list[WaitingEntry]:
        """The index's entries of the conversations still kept (one a `ttl` forgot is not listed)."""
        with self._reading(self._connection()) as db:
            rows = db.execute(_READ_WAITING, (self.namespace, *self._kept())).fetchall()
        return [entry for (body,) in rows for entry in decode_entries(body)]

    # Standing grants (docs/approvals.md, "Grants").
    def add_grant(self, grant: Grant) -> None:
        with self._writing(self._connection(), self._write_lock) as db:
            db.execute(
                f"INSERT INTO {GRANTS} (namespace, id, body) VALUES (?, ?, ?)",
                (self.namespace, grant.id, json.dumps(grant.to_dict())),
            )

    def revoke_grant(self, grant_id: str, *, by: str, at: float) -> Grant | None:
        with self._writing(self._connection(), self._write_lock) as db:
            row = db.execute(
                f"SELECT body FROM {GRANTS} WHERE namespace = ? AND id = ?", (self.namespace, grant_id)
            ).fetchone()
            if row is None:
                return None
            revoked = Grant.from_dict(json.loads(row[0])).revoked(by=by, at=at)
            db.execute(
                f"UPDATE {GRANTS} SET body = ? WHERE namespace = ? AND id = ?",
                (json.dumps(revoked.to_dict()), self.namespace, grant_id),
            )
        return revoked

    def delete_grants(self, grant_ids: Sequence[str]) -> None:
        with self._writing(self._connection(), self._write_lock) as db:
            db.executemany(
                f"DELETE FROM {GRANTS} WHERE namespace = ? AND id = ?",
                [(self.namespace, i) for i in grant_ids],
            )

    def list_grants(self) -> list[Grant]:
        with self._reading(self._connection()) as db:
            rows = db.execute(f"SELECT body FROM {GRANTS} WHERE namespace = ?", (self.namespace,)).fetchall()
        return [Grant.from_dict(json.loads(body)) for (body,) in rows]

    def ping(self) -> None:
        """``SELECT 1`` on this thread's connection: the file opens and answers."""
        with self._reading(self._connection()) as db:
            db.execute("SELECT 1").fetchone()

    def list_ids(self, limit: int = 100) -> list[str]:
        return [place.conversation_id for place in self.list_after(None, limit)]

    def list_after(
        self, position: Position | None, limit: int, *, owner: str | None = None
    ) -> list[Position]:
        """A page of the list read from the index on (namespace, updated_at), or with `owner` on
        (namespace, owner, updated_at), whose entries carry the id (the table's key): its cost
        follows `limit`, not the number stored."""
        whose = "" if owner is None else "AND owner = ? "
        # `updated_at <= ?` alone bounds the index's range (an OR around it would walk from the newest).
        after = "" if position is None else "AND updated_at <= ? AND (updated_at < ? OR id < ?) "
        start = () if position is None else (position.order, position.order, position.conversation_id)
        with self._reading(self._connection()) as db:
            rows = db.execute(
                f"SELECT updated_at, id FROM {TABLE} WHERE namespace = ? {whose}AND {_KEPT} {after}"
                "ORDER BY updated_at DESC, id DESC LIMIT ?",
                (
                    self.namespace,
                    *(() if owner is None else (owner,)),
                    *self._kept(),
                    *start,
                    min(limit, _MAX_LIMIT),
                ),
            ).fetchall()
        return [Position(order, conversation_id) for order, conversation_id in rows]

    def prune(self, retention: float, *, now: float | None = None, dry_run: bool = False) -> int:
        """Delete, in one statement, the conversations last saved more than `retention` seconds ago
        whose approval window has closed. The file keeps its size (SQLite reuses the freed pages);
        ``VACUUM`` gives the space back to the disk."""
        now = self.clock() if now is None else now
        gone = f"FROM {TABLE} WHERE namespace = ? AND {_GONE}", (self.namespace, now - retention, now)
        if dry_run:
            with self._reading(self._connection()) as db:
                (count,) = db.execute(f"SELECT count(*) {gone[0]}", gone[1]).fetchone()
            return int(count)
        with self._writing(self._connection(), self._write_lock) as db:
            return int(db.execute(f"DELETE {gone[0]}", gone[1]).rowcount)

    # Cancel requests, in a table of their own made when the first is asked for.
    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        with self._writing(self._connection(), self._write_lock) as db:
            db.execute(_CANCELS)
            db.execute(
                f"INSERT INTO {CANCELS} (namespace, id, at) VALUES (?, ?, ?) "
                "ON CONFLICT (namespace, id) DO UPDATE SET at = excluded.at",
                (self.namespace, conversation_id, at),
            )
            # Marks older than CANCEL_KEPT can stop no turn: pruned as a new one is written.
            db.execute(
                f"DELETE FROM {CANCELS} WHERE namespace = ? AND at < ?", (self.namespace, at - CANCEL_KEPT)
            )

    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        return self._cancel_requested(conversation_id, since, self._connection())

    async def acancel_requested(self, conversation_id: str, *, since: float) -> bool:
        try:
            return self._cancel_requested(conversation_id, since, self._loop_connection())
        except _WouldWait:
            return await asyncio.to_thread(self.cancel_requested, conversation_id, since=since)

    def _cancel_requested(self, conversation_id: str, since: float, connection: sqlite3.Connection) -> bool:
        try:
            with self._reading(connection) as db:
                row = db.execute(
                    f"SELECT at FROM {CANCELS} WHERE namespace = ? AND id = ?",
                    (self.namespace, conversation_id),
                ).fetchone()
        except StoreUnavailable as exc:
            if "no such table" in str(exc):  # no cancel was ever asked for in this file
                return False
            raise
        return row is not None and row[0] >= since

    # The async twins run on the event loop when SQLite can answer at once (a read in WAL mode, a
    # write when no one else holds the lock: less than handing the call to a thread costs, ADR 9), and
    # in a worker thread, waiting up to the busy timeout, only when it cannot.
    async def aget(self, conversation_id: str) -> Conversation | None:
        try:
            return self._get(conversation_id, self._loop_connection())
        except _WouldWait:
            return await asyncio.to_thread(self.get, conversation_id)

    async def aget_recent(self, conversation_id: str) -> Conversation | None:
        try:
            return self._get(conversation_id, self._loop_connection(), windowed=True)
        except _WouldWait:
            return await asyncio.to_thread(self.get_recent, conversation_id)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        body = _rows(conversation, expected_version)
        if body.claims:  # its commit waits for the disk: never on the event loop
            await asyncio.to_thread(
                self._save, conversation, expected_version, body, self._connection(), self._write_lock
            )
            return
        try:
            self._save(
                conversation, expected_version, body, self._loop_connection(), _NoWait(self._write_lock)
            )
        except _WouldWait:
            await asyncio.to_thread(
                self._save, conversation, expected_version, body, self._connection(), self._write_lock
            )
            return
        self._loop_saves += 1
        if self._loop_saves % CHECKPOINT_EVERY == 0 and not self._checkpointing:
            self._checkpointing = True
            self._checkpoint_run = asyncio.get_running_loop().run_in_executor(None, self._checkpoint)

    def _checkpoint(self) -> None:
        """In a worker thread: copy the log into the database file (see CHECKPOINT_EVERY)."""
        try:
            db = self._connection()
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except Exception as exc:  # nothing is lost: the log keeps every write for the next checkpoint
            logger.warning("SQLite checkpoint of %s failed: %s", self.path, exc)
        finally:
            self._checkpointing = False

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

    def _kept(self) -> tuple[float, float]:
        """The parameters of :data:`_KEPT`: the oldest save kept, and now."""
        now = self.clock()
        return (float("-inf") if self.ttl is None else now - self.ttl), now

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection, which waits up to the busy timeout for another writer."""
        return self._thread_connection("connection", self.busy_timeout)

    def _loop_connection(self) -> sqlite3.Connection:
        """The event loop's connection, which never waits (a busy database is :class:`_WouldWait`)
        and leaves checkpoints to a worker thread (see CHECKPOINT_EVERY)."""
        return self._thread_connection("loop_connection", 0.0, checkpoints=False)

    def _thread_connection(
        self, slot: str, timeout: float, *, checkpoints: bool = True
    ) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, slot, None)
        if connection is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                connection = sqlite3.connect(
                    self.path, timeout=timeout, isolation_level=None, check_same_thread=False
                )
            except (sqlite3.Error, OSError) as exc:
                raise self._unavailable(exc) from exc
            try:
                connection.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
                _use_wal(connection, self.busy_timeout)
                connection.execute("PRAGMA synchronous = NORMAL")
                if not checkpoints:
                    connection.execute(f"PRAGMA wal_autocheckpoint = {int(LOG_LIMIT)}")
                connection.executescript(_SCHEMA)
                _add_columns(connection)
                _make_waiting(connection)
                connection.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            except (sqlite3.Error, OSError) as exc:
                connection.close()
                raise self._unavailable(exc) from exc
            setattr(self._local, slot, connection)
            with self._lock:
                self._connections.append(connection)
        return connection

    @contextmanager
    def _reading(self, connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        try:
            yield connection
        except (sqlite3.Error, OSError) as exc:
            raise self._unavailable(exc, connection) from exc

    @contextmanager
    def _writing(
        self, connection: sqlite3.Connection, lock: AbstractContextManager[Any], *, synced: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock is taken before the version is compared. Under
        `lock`, this process's write lock, so no other thread is in a transaction on `connection`."""
        with lock, self._synced(connection, synced), self._transaction(connection) as db:
            yield db

    @contextmanager
    def _synced(self, connection: sqlite3.Connection, synced: bool) -> Iterator[None]:
        """A commit synced to disk (`synced`: ``synchronous = FULL``) rather than left to the next
        checkpoint (``NORMAL``, the file's setting): a claim survives a power loss, so an approved
        call that ran never reads as waiting for a decision again."""
        if not synced:
            yield
            return
        connection.execute("PRAGMA synchronous = FULL")
        try:
            yield
        finally:
            with suppress(sqlite3.Error):
                connection.execute("PRAGMA synchronous = NORMAL")

    @contextmanager
    def _transaction(self, db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        try:
            db.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, OSError) as exc:
            raise self._unavailable(exc, db) from exc
        try:
            yield db
        except BaseException as exc:
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._unavailable(exc, db) from exc
            raise
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise self._unavailable(exc, db) from exc

    def _unavailable(self, exc: Exception, db: sqlite3.Connection | None = None) -> StoreUnavailable:
        busy = getattr(exc, "sqlite_errorcode", None) in _BUSY
        if busy and db is not None and db is getattr(self._local, "loop_connection", None):
            return _WouldWait(str(exc))
        return StoreUnavailable(f"sqlite store {self.path}: {type(exc).__name__}: {exc}")


_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

# A row still kept, given the oldest save kept and now: saved since, or waiting for a decision whose
# window is still open (dcaf_like.application.retention). NULL: nothing waits. _GONE is its negation,
# written so that the index on (namespace, updated_at) finds the rows.
_KEPT = "(updated_at >= ? OR ifnull(waiting_until, 0) >= ?)"
_GONE = "updated_at < ? AND ifnull(waiting_until, 0) < ?"
# The index first (CROSS JOIN keeps SQLite's planner to that order), each header then by its key: the
# read costs the waiting calls, not the conversations.
_READ_WAITING = (
    f"SELECT w.body FROM {WAITING} w CROSS JOIN {TABLE} t ON t.namespace = w.namespace AND t.id = w.id "
    "WHERE w.namespace = ? AND (t.updated_at >= ? OR ifnull(t.waiting_until, 0) >= ?)"
)

_MAX_LIMIT = 2**63 - 1

# A conversation: (0, header) if kept, then (1, message) and (2, call) rows in order.
_READ = (
    f"SELECT 0, body, 0 FROM {TABLE} WHERE namespace = ? AND id = ? AND {_KEPT} "
    f"UNION ALL SELECT 1, body, seq FROM {MESSAGES} WHERE namespace = ? AND id = ? "
    f"UNION ALL SELECT 2, body, seq FROM {CALLS} WHERE namespace = ? AND id = ? "
    "ORDER BY 1, 3"
)  # SQLite's LIMIT is a signed 64-bit integer
# The same from the window the last save recorded on (ADR 22).
_WINDOW = f"(SELECT ifnull({{}}, 0) FROM {TABLE} WHERE namespace = ? AND id = ?)"
_READ_WINDOW = (
    f"SELECT 0, body, 0 FROM {TABLE} WHERE namespace = ? AND id = ? AND {_KEPT} "
    f"UNION ALL SELECT 1, body, seq FROM {MESSAGES} WHERE namespace = ? AND id = ? "
    f"AND seq >= {_WINDOW.format('window_message')} "
    f"UNION ALL SELECT 2, body, seq FROM {CALLS} WHERE namespace = ? AND id = ? "
    f"AND seq >= {_WINDOW.format('window_call')} "
    "ORDER BY 1, 3"
)


_HEAD = f"SELECT seq, hash FROM {HEADS} WHERE namespace = ?"


@contextmanager
def _snapshot(db: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: the statements in it see one state of the file."""
    db.execute("BEGIN")
    try:
        yield
    finally:
        db.execute("COMMIT")


def _add_columns(db: sqlite3.Connection) -> None:
    """Add the columns of :data:`_ADDED_COLUMNS` a file written by an earlier version lacks."""
    present = {row[1] for row in db.execute(f"PRAGMA table_info({TABLE})")}
    for name, kind in _ADDED_COLUMNS.items():
        if name not in present:
            try:
                db.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {kind}")
            except sqlite3.OperationalError as exc:  # another process added it first
                if "duplicate column" not in str(exc):
                    raise
            else:
                if name == "owner":
                    db.execute(_OWNERS_FILLED)
    db.execute(_OWNERS_INDEX)


def _make_waiting(db: sqlite3.Connection) -> None:
    """Make the inbox's index whole, once per file: unless it is marked so, make the index if the file
    lacks it, fill the entries of the conversations that have none (of every namespace; none in a new
    file) and mark it, in one write transaction: a save, of this process or another, comes before it
    or after it, never in between. Marked, this is one read."""
    if _whole(db):
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if not _whole(db):  # another process made it whole first
            for statement in _WAITING_SCHEMA:
                db.execute(statement)
            filled = [
                (ns, id_, entries_to_fill(id_, partial(_read_any_age, db, ns, id_))[1])
                for ns, id_ in db.execute(_UNINDEXED).fetchall()
            ]
            db.executemany(
                f"INSERT OR IGNORE INTO {WAITING} (namespace, id, body) VALUES (?, ?, ?)",
                [row for row in filled if row[2]],
            )
            db.execute(f"INSERT INTO {MARKS} (name) VALUES (?)", (WAITING_WHOLE,))
    except BaseException:
        with suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _whole(db: sqlite3.Connection) -> bool:
    return db.execute(_MARKED, (WAITING_WHOLE,)).fetchone() is not None


def _read_any_age(db: sqlite3.Connection, namespace: str, conversation_id: str) -> Conversation | None:
    """A conversation as stored, whatever its age (the index's fill reads the expired ones too)."""
    key = (namespace, conversation_id)
    rows = db.execute(_READ, (*key, float("-inf"), float("-inf"), *key, *key)).fetchall()
    return _decoded(rows, conversation_id)


def _decoded(rows: list[Any], conversation_id: str, *, windowed: bool = False) -> Conversation | None:
    """A conversation from the rows of :data:`_READ` or :data:`_READ_WINDOW` (None: no header)."""
    if not rows or rows[0][0] != 0:
        return None
    return decode_parts(
        _text(rows[0][1], conversation_id),
        [_text(body, conversation_id) for part, body, _ in rows if part == 1],
        [_text(body, conversation_id) for part, body, _ in rows if part == 2],
        conversation_id,
        windowed=windowed,
    )


class _WouldWait(StoreUnavailable):
    """SQLite is busy and the event loop's connection does not wait: try again in a worker thread."""


class _NoWait:
    """The write turn of this process, taken only if it is free (the event loop never waits for it)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            raise _WouldWait("another thread of this process is writing")

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _Rows:
    """What a save writes (:class:`~dcaf_like.stores._codec.Changes`), each text as stored: compressed
    from :data:`COMPRESS_FROM` on."""

    __slots__ = ("calls", "claims", "first", "header", "messages", "waiting", "whole", "window")

    def __init__(self, changed: Changes, window: tuple[int, int], claims: bool, waiting: str | None) -> None:
        self.claims = claims
        self.waiting = waiting  # the inbox's entries (None: unchanged; "": none waits)
        self.header = _stored(changed.header)
        self.window = window
        self.whole = changed.whole
        self.first = changed.first_message
        self.messages = [_stored(m) for m in changed.messages]
        self.calls = [(seq, _stored(c)) for seq, c in changed.calls]


def _rows(conversation: Conversation, expected_version: int) -> _Rows:
    changed = changes(conversation, expected_version)
    waiting = index_changes(conversation, changed.whole, bool(changed.calls))
    return _Rows(changed, conversation.window_start(), _claims(conversation), waiting)


def _claims(conversation: Conversation) -> bool:
    """Whether a save claims an approved call to run (it holds the call's lease): the save that makes
    an approval single-use, which must be on disk before the tool runs."""
    calls = conversation.tool_calls
    changed = calls.keys() if conversation.changed_calls is None else conversation.changed_calls
    return any(
        calls[k].status is ToolCallStatus.APPROVED and calls[k].lease_owner is not None
        for k in changed
        if k in calls
    )


def _stored(text: str) -> str | bytes:
    return text if len(text) < COMPRESS_FROM else zlib.compress(text.encode(), 1)


def _text(body: str | bytes, conversation_id: str) -> str | bytes:
    if isinstance(body, bytes):
        try:
            return zlib.decompress(body)
        except zlib.error as exc:
            raise StoredConversationUnreadable(conversation_id, f"zlib: {exc}") from exc
    return body


def _use_wal(connection: sqlite3.Connection, wait: float) -> None:
    """Put the file in WAL mode. This pragma can be told "database is locked" at once, without SQLite's
    busy handler, while another connection holds the file in a step the handler does not cover (its
    WAL recovery, say): it is tried again, for up to `wait` seconds like any other write."""
    deadline = time.monotonic() + wait
    pause = 0.005
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
