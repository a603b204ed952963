"""PostgresConversationRepository: conversations in PostgreSQL, shared by every worker and host.

One row per conversation in ``<table>`` (default ``dcaf_conversations``): ``(namespace, id)`` is the
primary key, ``version`` is compared by every write, ``body`` is the conversation's JSON as text
(PostgreSQL compresses long values itself). ``<table>_schema_version`` holds the schema's version: the
first use of a database creates the schema, and a database made by an earlier version is migrated
step by step, under an advisory lock so that workers starting together migrate it once.

Every statement runs in autocommit on a pooled connection (psycopg 3 and psycopg-pool, ADR 14): a
read is one round trip, a save is one ``UPDATE ... WHERE version = %s`` (or ``INSERT ... ON CONFLICT``
for a new conversation), so a turn costs two, an approval three (read, claim, save).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from dcaf_like.application.errors import ConcurrencyConflict, StoreUnavailable
from dcaf_like.application.ports import GrantStore, Position
from dcaf_like.application.waiting import WaitingEntry, decode_entries, index_changes
from dcaf_like.concurrency.bridges import PerLoop
from dcaf_like.domain import Conversation, DecisionRecord
from dcaf_like.domain.grant import Grant
from dcaf_like.domain.trail import AuditDigest, ChainHead, Trail
from dcaf_like.stores._codec import Changes, changes, decode_parts
from dcaf_like.stores._shared import (
    CANCEL_KEPT,
    BlockingRepository,
    ClientErrors,
    check_retention,
    entries_to_fill,
)

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_TABLE = "dcaf_conversations"

# Saves between two purges of expired rows (reads never return them in between).
PURGE_EVERY = 64

_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}")


def _fill_owners(db: Any, table: str) -> None:
    """Migration 9's rows: each conversation's owner read from its header's JSON, in Python
    (PostgreSQL's JSON types refuse a ``\u0000`` escape that a stored session may hold), a
    thousand rows at a time through a server-side cursor."""
    with db.cursor(name=f"{table}_owners") as rows:
        rows.execute(f"SELECT namespace, id, body FROM {table}")
        while batch := rows.fetchmany(1000):
            owners = [(json.loads(body).get("owner"), ns, id_) for ns, id_, body in batch]
            with db.cursor() as update:
                update.executemany(
                    f"UPDATE {table} SET owner = %s WHERE namespace = %s AND id = %s",
                    [row for row in owners if row[0] is not None],
                )


def _fill_waiting(db: Any, table: str) -> None:
    """Migration 10's rows: the inbox's entries of every conversation that has none, decoded from its
    header and rows (or its whole document of format 1), two hundred conversations at a time through a
    server-side cursor. Those saved before step 6 have none, and step 6 as released made the index
    without them. In the migration's transaction, which every worker of this version waits for; the
    table is locked against writes first, so a worker of an earlier version (which keeps the index
    but does not migrate again) saves before the fill reads or after it commits, never in between."""
    db.execute(f"LOCK TABLE {table} IN SHARE MODE")
    with db.cursor(name=f"{table}_waiting_fill") as rows:
        rows.execute(
            f"SELECT t.namespace, t.id, t.body,"
            f" ARRAY(SELECT m.body FROM {table}_messages m WHERE (m.namespace, m.id) = (t.namespace, t.id)"
            " ORDER BY m.seq),"
            f" ARRAY(SELECT c.body FROM {table}_calls c WHERE (c.namespace, c.id) = (t.namespace, t.id)"
            f" ORDER BY c.seq) FROM {table} t"
            f" LEFT JOIN {table}_waiting w ON (w.namespace, w.id) = (t.namespace, t.id) WHERE w.id IS NULL"
        )
        while batch := rows.fetchmany(200):
            filled = [
                (ns, id_, entries_to_fill(id_, partial(decode_parts, body, messages, calls, id_))[1])
                for ns, id_, body, messages, calls in batch
            ]
            with db.cursor() as insert:
                insert.executemany(
                    f"INSERT INTO {table}_waiting (namespace, id, body) VALUES (%s, %s, %s)"
                    " ON CONFLICT (namespace, id) DO NOTHING",
                    [row for row in filled if row[2]],
                )


# The schema's versions: each step brings a database from the version before it to its own. Never
# change a step once released; add one. A step is statements (the table's name in `{table}`) or a
# function of the connection and the table, for what SQL cannot do.
MIGRATIONS: tuple[tuple[str | Callable[[Any, str], None], ...], ...] = (
    # 1: the conversations and the index that lists a namespace's most recent ones.
    (
        "CREATE TABLE {table} ("
        " namespace text NOT NULL, id text NOT NULL, version bigint NOT NULL,"
        " updated_at double precision NOT NULL, body text NOT NULL, PRIMARY KEY (namespace, id))",
        "CREATE INDEX {table}_recent ON {table} (namespace, updated_at)",
    ),
    # 2: expiry as a column, fixed at each save, so reads and purges compare one indexed value.
    (
        "ALTER TABLE {table} ADD COLUMN expires_at double precision",
        "CREATE INDEX {table}_expiry ON {table} (namespace, expires_at) WHERE expires_at IS NOT NULL",
    ),
    # 3: the audit trail (one row per decision, appended in the transaction of the save that carries
    # it, refused any UPDATE, never deleted with its conversation) and cancel requests (docs/runs.md).
    (
        "CREATE TABLE {table}_decisions ("
        " seq bigserial PRIMARY KEY, namespace text NOT NULL, conversation_id text NOT NULL,"
        " at double precision NOT NULL, record text NOT NULL)",
        "CREATE INDEX {table}_decisions_conversation ON {table}_decisions (namespace, conversation_id, at)",
        "CREATE INDEX {table}_decisions_recent ON {table}_decisions (namespace, at)",
        "CREATE FUNCTION {table}_decisions_refuse() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'decision records are append-only'; END $$",
        "CREATE TRIGGER {table}_decisions_append_only BEFORE UPDATE ON {table}_decisions"
        " FOR EACH ROW EXECUTE FUNCTION {table}_decisions_refuse()",
        "CREATE TABLE {table}_cancels (namespace text NOT NULL, id text NOT NULL,"
        " at double precision NOT NULL, PRIMARY KEY (namespace, id))",
    ),
    # 4: a conversation's messages and tool calls, a row each, keyed by position (ADR 16): a save
    # writes the rows that changed and the header (the body, which counts them); deleting the
    # conversation deletes them. A body written before (format 1, the whole conversation) still reads.
    (
        "CREATE TABLE {table}_messages ("
        " namespace text NOT NULL, id text NOT NULL, seq integer NOT NULL, body text NOT NULL,"
        " PRIMARY KEY (namespace, id, seq),"
        " FOREIGN KEY (namespace, id) REFERENCES {table} (namespace, id) ON DELETE CASCADE)",
        "CREATE TABLE {table}_calls ("
        " namespace text NOT NULL, id text NOT NULL, seq integer NOT NULL, body text NOT NULL,"
        " PRIMARY KEY (namespace, id, seq),"
        " FOREIGN KEY (namespace, id) REFERENCES {table} (namespace, id) ON DELETE CASCADE)",
    ),
    # 5: the chain over the trail (ADR 34): its head per namespace, a row each writer locks in the
    # transaction that appends, and the signed digests by number. Records written before have no link.
    (
        "CREATE TABLE {table}_audit_heads ("
        " namespace text PRIMARY KEY, seq bigint NOT NULL, hash text NOT NULL)",
        "CREATE TABLE {table}_audit_digests ("
        " namespace text NOT NULL, number bigint NOT NULL, digest text NOT NULL,"
        " PRIMARY KEY (namespace, number))",
    ),
    # 6: the inbox's index (docs/approvals.md, "One inbox"): per conversation with calls waiting for
    # approval, their entries as JSON, written by the save that changed them; deleted with it.
    (
        "CREATE TABLE {table}_waiting ("
        " namespace text NOT NULL, id text NOT NULL, body text NOT NULL, PRIMARY KEY (namespace, id),"
        " FOREIGN KEY (namespace, id) REFERENCES {table} (namespace, id) ON DELETE CASCADE)",
    ),
    # 7: standing grants (docs/approvals.md, "Grants"): each grant's JSON by namespace and id.
    (
        "CREATE TABLE {table}_grants ("
        " namespace text NOT NULL, id text NOT NULL, body text NOT NULL, PRIMARY KEY (namespace, id))",
    ),
    # 8: the list's index carries the id, so a page starts after the last one's (updated_at, id)
    # without reading the rows before it (docs/stores.md, "Stores of any size").
    (
        "CREATE INDEX {table}_list ON {table} (namespace, updated_at, id)",
        "DROP INDEX {table}_recent",
    ),
    # 9: the owner of each conversation (never changes), indexed for an owner's list; the rows written
    # before get it from their header's JSON.
    (
        "ALTER TABLE {table} ADD COLUMN owner text",
        "CREATE INDEX {table}_owner ON {table} (namespace, owner, updated_at, id)",
        _fill_owners,
    ),
    # 10: the inbox's entries of the conversations saved before step 6 and not since, which step 6
    # left out (docs/stores.md, "The inbox's index in a store of before").
    (_fill_waiting,),
)
SCHEMA_VERSION = len(MIGRATIONS)

_LIVE = "(expires_at IS NULL OR expires_at > %s)"


def libpq_parameters() -> list[str]:
    """The connection parameters libpq takes (``sslmode``, ``connect_timeout``, ...), in its order."""
    from psycopg import pq

    return [option.keyword.decode() for option in pq.Conninfo.get_defaults()]


class PostgresConversationRepository(BlockingRepository, GrantStore):
    """Conversations in the PostgreSQL database at `url`, in `table`, under `namespace`.

    With `ttl` (seconds) a conversation is forgotten that long after its last save; decision records
    (the audit trail, table ``<table>_decisions``) only `audit_ttl` after they were made. Each process keeps
    a pool of `pool_min` to `pool_max` connections (one pool for the sync methods, one per event loop
    for the async ones); `timeout` bounds the wait for a connection.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        table: str = DEFAULT_TABLE,
        namespace: str = "default",
        ttl: float | None = None,
        audit_ttl: float | None = None,
        pool_min: int = 1,
        pool_max: int = 10,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_retention(ttl, audit_ttl)
        if not _TABLE_NAME.fullmatch(table):
            raise ValueError(f"table must be a lower-case SQL name of at most 40 characters, not {table!r}")
        if not 0 <= pool_min <= pool_max or pool_max < 1:
            raise ValueError(
                f"pool sizes need 0 <= pool_min <= pool_max and pool_max >= 1, not {pool_min}, {pool_max}"
            )
        import psycopg
        import psycopg_pool
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise ValueError(str(exc)) from None
        self.table = table
        self.namespace = namespace
        self.ttl = ttl
        self.audit_ttl = audit_ttl
        self.pool_min = pool_min
        self.pool_max = pool_max
        self.timeout = timeout
        self.clock = clock
        self.where = (
            f"{params.get('host', 'localhost')}:{params.get('port', 5432)}/{params.get('dbname', '')}"
        )
        self._url = url
        self._psycopg = psycopg
        self._pools = psycopg_pool
        self._failures = ClientErrors(
            (psycopg.Error, psycopg_pool.PoolTimeout, OSError), f"postgres store at {self.where}"
        )
        self._lock = threading.Lock()
        self._schema_ready = False
        self._sync: ConnectionPool[Any] | None = None
        #: The pool of each event loop, closed with its loop (asyncio connections belong to one loop).
        self._async_pools: PerLoop[_LoopPool] = PerLoop(_close_pool)
        self._saves = 0
        t = table
        # One statement (one snapshot, one round trip): the header, then its messages and calls.
        self._get_sql = (
            f"SELECT 0, 0, body FROM {t} WHERE namespace = %(ns)s AND id = %(id)s AND "
            "(expires_at IS NULL OR expires_at > %(now)s) "
            f"UNION ALL SELECT 1, seq, body FROM {t}_messages WHERE namespace = %(ns)s AND id = %(id)s "
            f"UNION ALL SELECT 2, seq, body FROM {t}_calls WHERE namespace = %(ns)s AND id = %(id)s "
            "ORDER BY 1, 2"
        )
        # The same from the window the header's last save recorded on (ADR 22).
        window = (
            f"(SELECT COALESCE((body::json->'window'->>{{}})::integer, 0) FROM {t} "
            "WHERE namespace = %(ns)s AND id = %(id)s)"
        )
        self._get_recent_sql = (
            f"SELECT 0, 0, body FROM {t} WHERE namespace = %(ns)s AND id = %(id)s AND "
            "(expires_at IS NULL OR expires_at > %(now)s) "
            f"UNION ALL SELECT 1, seq, body FROM {t}_messages WHERE namespace = %(ns)s AND id = %(id)s "
            f"AND seq >= {window.format(0)} "
            f"UNION ALL SELECT 2, seq, body FROM {t}_calls WHERE namespace = %(ns)s AND id = %(id)s "
            f"AND seq >= {window.format(1)} "
            "ORDER BY 1, 2"
        )
        insert = (
            f"INSERT INTO {t} AS c (namespace, id, version, updated_at, expires_at, body, owner) "
            "VALUES (%(ns)s, %(id)s, %(version)s, %(now)s, %(expires)s, %(body)s, %(owner)s) "
            "ON CONFLICT (namespace, id) DO UPDATE SET "
            "version = EXCLUDED.version, updated_at = EXCLUDED.updated_at, "
            "expires_at = EXCLUDED.expires_at, body = EXCLUDED.body, owner = EXCLUDED.owner "
            "WHERE c.expires_at IS NOT NULL AND c.expires_at <= %(now)s RETURNING 1"
        )
        update = (
            f"UPDATE {t} SET version = %(version)s, updated_at = %(now)s, expires_at = %(expires)s, "
            "body = %(body)s WHERE namespace = %(ns)s AND id = %(id)s AND version = %(expected)s "
            "AND (expires_at IS NULL OR expires_at > %(now)s) RETURNING 1"
        )
        # A save: one statement, atomic on its own. The header's compare-and-set (h) and, only if it
        # wrote, the changed messages and calls; written whole, the rows past its counts are dropped
        # (those of an expired conversation whose id starts afresh).
        self._save_sql = {
            (new, whole): _save_statement(t, insert if new else update, whole)
            for new in (True, False)
            for whole in (True, False)
        }
        self._version_sql = f"SELECT version FROM {t} WHERE namespace = %s AND id = %s AND {_LIVE}"
        self._delete_sql = f"DELETE FROM {t} WHERE namespace = %s AND id = %s"
        self._waiting_sql = (
            f"SELECT w.body FROM {t}_waiting w JOIN {t} c ON c.namespace = w.namespace AND c.id = w.id "
            f"WHERE w.namespace = %s AND (c.expires_at IS NULL OR c.expires_at > %s)"
        )
        self._page_sql = {
            (first, whose): f"SELECT updated_at, id FROM {t} WHERE namespace = %s AND {_LIVE} "
            + ("" if whose else "AND owner = %s ")
            + ("" if first else "AND (updated_at, id) < (%s, %s) ")
            + "ORDER BY updated_at DESC, id DESC LIMIT %s"
            for first in (True, False)
            for whose in (True, False)
        }
        self._old_sql = f"SELECT id FROM {t} WHERE namespace = %s AND {_LIVE} AND updated_at < %s"
        self._purge_sql = f"DELETE FROM {t} WHERE namespace = %s AND expires_at <= %s"
        self._append_sql = (
            f"INSERT INTO {t}_decisions (namespace, conversation_id, at, record) VALUES (%s, %s, %s, %s)"
        )
        self._forget_sql = f"DELETE FROM {t}_decisions WHERE namespace = %s AND at < %s"
        # The chain's head, created if missing, its row locked until the appending transaction ends:
        # of two workers appending at once, the second reads the head the first moved.
        self._lock_head_sql = (
            f"INSERT INTO {t}_audit_heads (namespace, seq, hash) VALUES (%s, 0, '') "
            f"ON CONFLICT (namespace) DO UPDATE SET seq = {t}_audit_heads.seq RETURNING seq, hash"
        )
        self._move_head_sql = f"UPDATE {t}_audit_heads SET seq = %s, hash = %s WHERE namespace = %s"
        self._head_sql = f"SELECT seq, hash FROM {t}_audit_heads WHERE namespace = %s"
        self._trail_sql = f"SELECT record FROM {t}_decisions WHERE namespace = %s ORDER BY seq"
        self._digests_sql = f"SELECT digest FROM {t}_audit_digests WHERE namespace = %s ORDER BY number"
        self._last_digest_sql = (
            f"SELECT digest FROM {t}_audit_digests WHERE namespace = %s ORDER BY number DESC LIMIT 1"
        )
        self._digest_sql = (
            f"INSERT INTO {t}_audit_digests (namespace, number, digest) VALUES (%s, %s, %s) "
            "ON CONFLICT (namespace, number) DO NOTHING"
        )
        self._records_sql = (
            f"SELECT record FROM {t}_decisions WHERE namespace = %s AND at >= %s "
            "ORDER BY at DESC, seq DESC LIMIT %s"
        )
        self._conversation_records_sql = (
            f"SELECT record FROM {t}_decisions WHERE namespace = %s AND conversation_id = %s AND at >= %s "
            "ORDER BY at DESC, seq DESC LIMIT %s"
        )
        # One statement: the mark, and the marks older than CANCEL_KEPT pruned (they can stop no turn).
        self._cancel_sql = (
            f"WITH pruned AS (DELETE FROM {t}_cancels WHERE namespace = %(ns)s AND at < %(oldest)s) "
            f"INSERT INTO {t}_cancels (namespace, id, at) VALUES (%(ns)s, %(id)s, %(at)s) "
            "ON CONFLICT (namespace, id) DO UPDATE SET at = EXCLUDED.at"
        )
        self._cancelled_sql = f"SELECT at FROM {t}_cancels WHERE namespace = %s AND id = %s"

    # -- statements ---------------------------------------------------------------------------------

    def _save_statement(
        self, conversation: Conversation, expected_version: int
    ) -> tuple[str, dict[str, Any]]:
        now = self.clock()
        changed: Changes = changes(conversation, expected_version)
        params = {
            "ns": self.namespace,
            "id": conversation.id,
            "version": conversation.version,
            "now": now,
            "expires": None if self.ttl is None else now + self.ttl,
            "body": changed.header,
            "owner": conversation.owner,
            "expected": expected_version,
            "messages_seq": list(range(changed.first_message, changed.first_message + len(changed.messages))),
            "messages": changed.messages,
            "calls_seq": [seq for seq, _ in changed.calls],
            "calls": [call for _, call in changed.calls],
            "messages_count": len(conversation.messages),
            "calls_count": len(conversation.tool_calls),
            "waiting": index_changes(conversation, changed.whole, bool(changed.calls)),
        }
        return self._save_sql[expected_version == 0, changed.whole], params

    def _purge_due(self) -> bool:
        self._saves += 1
        return self.ttl is not None and self._saves % PURGE_EVERY == 0

    # -- sync ---------------------------------------------------------------------------------------

    def get(self, conversation_id: str) -> Conversation | None:
        with self._connection() as db:
            rows = self._run(db, self._get_sql, self._get_params(conversation_id)).fetchall()
        return _conversation(rows, conversation_id)

    def get_recent(self, conversation_id: str) -> Conversation | None:
        with self._connection() as db:
            rows = self._run(db, self._get_recent_sql, self._get_params(conversation_id)).fetchall()
        return _conversation(rows, conversation_id, windowed=True)

    def _get_params(self, conversation_id: str) -> dict[str, Any]:
        return {"ns": self.namespace, "id": conversation_id, "now": self.clock()}

    def save(self, conversation: Conversation, expected_version: int) -> None:
        sql, params = self._save_statement(conversation, expected_version)
        records = conversation.unsaved_decisions
        with self._connection() as db:
            # Decisions ride along in one transaction: both written, or neither (a lost race).
            with db.transaction() if records else contextlib.nullcontext():
                written = self._run(db, sql, params).fetchone()[0]
                if written != 1:
                    row = self._run(db, self._version_sql, (self.namespace, conversation.id, self.clock()))
                    actual = row.fetchone()
                    raise ConcurrencyConflict(
                        conversation.id, expected_version, None if actual is None else actual[0]
                    )
                if records:
                    self._append(db, records)
            if self._purge_due():
                self._run(db, self._purge_sql, (self.namespace, self.clock()))
        records.clear()
        conversation.mark_saved()

    def _append(self, db: Any, records: Sequence[DecisionRecord]) -> None:
        if self.audit_ttl is not None:
            self._run(db, self._forget_sql, (self.namespace, self.clock() - self.audit_ttl))
        row = self._run(db, self._lock_head_sql, (self.namespace,)).fetchone()
        linked, head = ChainHead(int(row[0]), row[1]).link(records)
        with db.pipeline(), db.cursor() as cursor:  # the rows and the head's move: one round trip
            cursor.executemany(
                self._append_sql, [(self.namespace, r.conversation_id, r.at, r.to_json()) for r in linked]
            )
            cursor.execute(self._move_head_sql, (head.seq, head.hash, self.namespace))

    def audit_trail(self) -> Trail:
        with self._connection() as db, db.transaction():
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")  # one snapshot
            rows = self._run(db, self._trail_sql, (self.namespace,)).fetchall()
            digests = self._run(db, self._digests_sql, (self.namespace,)).fetchall()
            head = self._run(db, self._head_sql, (self.namespace,)).fetchone()
        return Trail(
            [DecisionRecord.from_json(row[0]) for row in rows],
            [AuditDigest.from_json(row[0]) for row in digests],
            ChainHead() if head is None else ChainHead(int(head[0]), head[1]),
        )

    def audit_tip(self) -> tuple[ChainHead, AuditDigest | None]:
        with self._connection() as db:
            head = self._run(db, self._head_sql, (self.namespace,)).fetchone()
            last = self._run(db, self._last_digest_sql, (self.namespace,)).fetchone()
        return (
            ChainHead() if head is None else ChainHead(int(head[0]), head[1]),
            None if last is None else AuditDigest.from_json(last[0]),
        )

    def append_digest(self, digest: AuditDigest) -> bool:
        with self._connection() as db:
            written = self._run(db, self._digest_sql, (self.namespace, digest.number, digest.to_json()))
            return bool(written.rowcount == 1)

    def record_decisions(self, records: Sequence[DecisionRecord]) -> None:
        if not records:
            return
        with self._connection() as db, db.transaction():
            self._append(db, records)

    def decision_records(self, conversation_id: str | None = None, limit: int = 100) -> list[DecisionRecord]:
        oldest = float("-inf") if self.audit_ttl is None else self.clock() - self.audit_ttl
        params: tuple[Any, ...]
        if conversation_id is None:
            sql, params = self._records_sql, (self.namespace, oldest, limit)
        else:
            sql, params = self._conversation_records_sql, (self.namespace, conversation_id, oldest, limit)
        with self._connection() as db:
            rows = self._run(db, sql, params).fetchall()
        return [DecisionRecord.from_json(row[0]) for row in rows]

    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        params = {"ns": self.namespace, "id": conversation_id, "at": at, "oldest": at - CANCEL_KEPT}
        with self._connection() as db:
            self._run(db, self._cancel_sql, params)

    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        row = self._one(self._cancelled_sql, (self.namespace, conversation_id))
        return row is not None and row[0] >= since

    def delete(self, conversation_id: str) -> bool:
        with self._connection() as db:
            return bool(self._run(db, self._delete_sql, (self.namespace, conversation_id)).rowcount)

    def list_waiting(self) -> list[WaitingEntry]:
        """The index joined to the conversations still live, planned afresh at each call (never a
        prepared statement): a plan psycopg cached while the table was small, a hash join that reads
        every conversation, would otherwise outlive the table's growth until the next ANALYZE (which
        never comes where autovacuum is off), as would the list's sort of every row
        (docs/stores.md, "Stores of any size")."""
        with self._connection() as db:
            rows = db.execute(self._waiting_sql, (self.namespace, self.clock()), prepare=False).fetchall()
        return [entry for (body,) in rows for entry in decode_entries(body)]

    # Standing grants (docs/approvals.md, "Grants").
    def add_grant(self, grant: Grant) -> None:
        with self._connection() as db:
            self._run(
                db,
                f"INSERT INTO {self.table}_grants (namespace, id, body) VALUES (%s, %s, %s)",
                (self.namespace, grant.id, json.dumps(grant.to_dict())),
            )

    def revoke_grant(self, grant_id: str, *, by: str, at: float) -> Grant | None:
        """Read under a row lock and marked in one transaction: of two racing revocations, the first stays."""
        with self._connection() as db, db.transaction():
            row = self._run(
                db,
                f"SELECT body FROM {self.table}_grants WHERE namespace = %s AND id = %s FOR UPDATE",
                (self.namespace, grant_id),
            ).fetchone()
            if row is None:
                return None
            revoked = Grant.from_dict(json.loads(row[0])).revoked(by=by, at=at)
            self._run(
                db,
                f"UPDATE {self.table}_grants SET body = %s WHERE namespace = %s AND id = %s",
                (json.dumps(revoked.to_dict()), self.namespace, grant_id),
            )
        return revoked

    def delete_grants(self, grant_ids: Sequence[str]) -> None:
        with self._connection() as db:
            sql = f"DELETE FROM {self.table}_grants WHERE namespace = %s AND id = ANY(%s)"
            self._run(db, sql, (self.namespace, list(grant_ids)))

    def list_grants(self) -> list[Grant]:
        with self._connection() as db:
            rows = self._run(
                db, f"SELECT body FROM {self.table}_grants WHERE namespace = %s", (self.namespace,)
            ).fetchall()
        return [Grant.from_dict(json.loads(body)) for (body,) in rows]

    def list_after(
        self, position: Position | None, limit: int, *, owner: str | None = None
    ) -> list[Position]:
        """A page of the list read from the index on (namespace, updated_at, id), or with `owner` on
        (namespace, owner, updated_at, id): its cost follows `limit`, not the number stored."""
        start = () if position is None else (position.order, position.conversation_id)
        whose = () if owner is None else (owner,)
        with self._connection() as db:
            sql = self._page_sql[position is None, owner is None]
            params = (self.namespace, self.clock(), *whose, *start, limit)
            rows = db.execute(sql, params, prepare=False).fetchall()  # planned afresh: list_waiting
        return [Position(order, conversation_id) for order, conversation_id in rows]

    def saved_before(self, moment: float) -> list[str]:
        """From the index on (namespace, updated_at, id): the oldest, whatever the table holds."""
        with self._connection() as db:
            params = (self.namespace, self.clock(), moment)
            rows = db.execute(self._old_sql, params, prepare=False).fetchall()  # planned afresh: list_waiting
        return [conversation_id for (conversation_id,) in rows]

    def list_ids(self, limit: int = 100) -> list[str]:
        return [place.conversation_id for place in self.list_after(None, limit)]

    def _one(self, sql: str, params: Sequence[Any]) -> Any:
        with self._connection() as db:
            return self._run(db, sql, params).fetchone()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """A connection of the sync pool; a failure of the server or the pool, in the pool or in the
        block, is a StoreUnavailable."""
        with self._failures, self._pool().connection(timeout=self.timeout) as db:
            yield db

    def _run(self, db: Any, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> Any:
        """Every statement of the sync methods: one round trip."""
        return db.execute(sql, params)

    def _pool(self) -> ConnectionPool[Any]:
        pool = self._sync
        if pool is None:
            self.migrate()
            with self._lock:
                if self._sync is None:
                    self._sync = self._pools.ConnectionPool(
                        self._url, **self._pool_options(f"dcaf-{self.table}")
                    )
                    self._sync.open(wait=False)
                pool = self._sync
        return pool

    def _pool_options(self, name: str) -> dict[str, Any]:
        """Of both pools: autocommit connections, opened when the pool is first used."""
        return {
            "min_size": self.pool_min,
            "max_size": self.pool_max,
            "kwargs": {"autocommit": True},
            "timeout": self.timeout,
            "name": name,
            "open": False,
        }

    # -- asyncio ------------------------------------------------------------------------------------

    async def aget(self, conversation_id: str) -> Conversation | None:
        async with self._aconnection() as db:
            cursor = await self._arun(db, self._get_sql, self._get_params(conversation_id))
            rows = await cursor.fetchall()
        return _conversation(rows, conversation_id)

    async def aget_recent(self, conversation_id: str) -> Conversation | None:
        async with self._aconnection() as db:
            cursor = await self._arun(db, self._get_recent_sql, self._get_params(conversation_id))
            rows = await cursor.fetchall()
        return _conversation(rows, conversation_id, windowed=True)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        if conversation.unsaved_decisions:  # a decision's save: rare, and one transaction in a thread
            await asyncio.to_thread(self.save, conversation, expected_version)
            return
        sql, params = self._save_statement(conversation, expected_version)
        async with self._aconnection() as db:
            written = (await (await self._arun(db, sql, params)).fetchone())[0]
            if written != 1:
                cursor = await self._arun(
                    db, self._version_sql, (self.namespace, conversation.id, self.clock())
                )
                actual = await cursor.fetchone()
                raise ConcurrencyConflict(
                    conversation.id, expected_version, None if actual is None else actual[0]
                )
            if self._purge_due():
                await self._arun(db, self._purge_sql, (self.namespace, self.clock()))
        conversation.mark_saved()

    async def acancel_requested(self, conversation_id: str, *, since: float) -> bool:
        async with self._aconnection() as db:
            cursor = await self._arun(db, self._cancelled_sql, (self.namespace, conversation_id))
            row = await cursor.fetchone()
        return row is not None and row[0] >= since

    @contextlib.asynccontextmanager
    async def _aconnection(self) -> AsyncIterator[Any]:
        """:meth:`_connection` from the pool of the running event loop."""
        with self._failures:
            pool = await self._apool()
            async with pool.connection(timeout=self.timeout) as db:
                yield db

    async def _arun(self, db: Any, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> Any:
        """Every statement of the async methods: one round trip."""
        return await db.execute(sql, params)

    async def _apool(self) -> AsyncConnectionPool[Any]:
        """The pool of the running event loop (asyncio connections belong to the loop that opened them)."""
        found = self._async_pools.get()
        if found is not None:
            return found.pool
        if not self._schema_ready:
            await asyncio.to_thread(self.migrate)
        # The requests arriving at once on a new loop each got here: one pool is kept, the others
        # closed (dropped unclosed, a pool leaves its connections open and its workers pending).
        _quiet_cancelled_workers()
        made = _LoopPool()
        pool = self._pools.AsyncConnectionPool(
            self._url, configure=made.opened, **self._pool_options(f"dcaf-{self.table}-async")
        )
        made.pool = pool
        try:
            # Its first connections made before it serves: no worker of it is still connecting when
            # a script's single request is done and its loop ends (the worker's warning, for nothing).
            await pool.open(wait=True, timeout=self.timeout)
        except BaseException:
            await _close_pool(made)
            raise
        kept = self._async_pools.put(made)
        if kept is not made:
            await _close_pool(made)
        return kept.pool

    async def aclose(self) -> None:
        """Close the pool of the running event loop (a server does this at shutdown)."""
        await self._async_pools.aclose()

    def close(self) -> None:
        """Close the sync pool (each event loop's pool closes with :meth:`aclose`)."""
        with self._lock:
            pool, self._sync = self._sync, None
        if pool is not None:
            pool.close()

    # -- schema -------------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Create the schema, or bring it up to :data:`SCHEMA_VERSION`; returns the version found.

        Runs once per repository, on first use, in one transaction holding an advisory lock named
        after the table: of several processes starting at once, one migrates and the others wait."""
        if self._schema_ready:
            return SCHEMA_VERSION
        versions = f"{self.table}_schema_version"
        with (
            self._failures,
            self._psycopg.connect(self._url, connect_timeout=max(1, round(self.timeout))) as db,
            db.transaction(),
        ):
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"dcaf_like:{self.table}",))
            db.execute(f"CREATE TABLE IF NOT EXISTS {versions} (version integer NOT NULL)")
            row = db.execute(f"SELECT version FROM {versions}").fetchone()
            found = 0 if row is None else int(row[0])
            if row is None:
                db.execute(f"INSERT INTO {versions} (version) VALUES (0)")
            if found > SCHEMA_VERSION:
                raise StoreUnavailable(
                    f"postgres store at {self.where}: table {self.table} has schema version {found}, "
                    f"newer than this dcaf_like knows ({SCHEMA_VERSION}); upgrade dcaf_like"
                )
            for step in MIGRATIONS[found:]:
                for statement in step:
                    if isinstance(statement, str):
                        db.execute(statement.format(table=self.table))
                    else:
                        statement(db, self.table)
            db.execute(f"UPDATE {versions} SET version = %s", (max(found, SCHEMA_VERSION),))
        self._schema_ready = True
        return found

    # -- shared -------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"PostgresConversationRepository({self.where!r}, table={self.table!r}, "
            f"namespace={self.namespace!r})"
        )


def _save_statement(table: str, header: str, whole: bool) -> str:
    """The statement of a save: `header` (an INSERT or UPDATE of the header, RETURNING a row when it
    wrote) and the rows of the changed messages and calls, written only if it did. Their arrays go in
    binary (``%b``): as text, psycopg escapes every quote of every JSON record with a regular
    expression (its cost is in docs/benchmarks.md, "Figures behind the code's choices")."""
    parts = [f"h AS ({header})"]
    for part in ("messages", "calls"):
        parts.append(
            f"{part} AS (INSERT INTO {table}_{part} (namespace, id, seq, body) "
            f"SELECT %(ns)s, %(id)s, x.seq, x.body FROM h, "
            f"unnest(%({part}_seq)b::integer[], %({part})b::text[]) AS x(seq, body) "
            "ON CONFLICT (namespace, id, seq) DO UPDATE SET body = EXCLUDED.body)"
        )
        if whole:
            parts.append(
                f"{part}_past AS (DELETE FROM {table}_{part} WHERE namespace = %(ns)s AND id = %(id)s "
                f"AND seq >= %({part}_count)s AND EXISTS (SELECT FROM h))"
            )
    # The inbox's entries (None: unchanged; "": none waits any more).
    parts.append(
        f"waiting AS (INSERT INTO {table}_waiting (namespace, id, body) SELECT %(ns)s, %(id)s, %(waiting)s "
        "FROM h WHERE %(waiting)s::text <> '' ON CONFLICT (namespace, id) DO UPDATE SET body = EXCLUDED.body)"
    )
    parts.append(
        f"waiting_past AS (DELETE FROM {table}_waiting WHERE namespace = %(ns)s AND id = %(id)s "
        "AND %(waiting)s::text = '' AND EXISTS (SELECT FROM h))"
    )
    return f"WITH {', '.join(parts)} SELECT count(*) FROM h"


def _conversation(
    rows: Sequence[Any], conversation_id: str, *, windowed: bool = False
) -> Conversation | None:
    """A conversation from the rows of the read: (0, 0, header), then (1, seq, message) and
    (2, seq, call), in order (`windowed`: from the header's window on); None without a header."""
    if not rows or rows[0][0] != 0:
        return None
    messages = [body for part, _, body in rows if part == 1]
    calls = [body for part, _, body in rows if part == 2]
    return decode_parts(rows[0][2], messages, calls, conversation_id, windowed=windowed)


class _CancelledAsItsLoopEnded(logging.Filter):
    """Drops psycopg's warning that a worker of one of our pools failed with ``CancelledError``: a
    script's ``asyncio.run`` cancels every task as its loop ends, a worker still connecting then
    included, and that is no error. The record held the exception, and with it the half-made
    connection, for as long as a log handler kept it. Other pools' records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        cancelled = any(isinstance(arg, asyncio.CancelledError) for arg in args)
        return not (cancelled and any("'dcaf-" in str(arg) or str(arg).startswith("dcaf-") for arg in args))


class _LoopPool:
    """An event loop's pool, with every connection it opened (by its ``configure`` hook)."""

    pool: AsyncConnectionPool[Any]

    def __init__(self) -> None:
        self.connections: weakref.WeakSet[Any] = weakref.WeakSet()

    async def opened(self, connection: Any) -> None:
        self.connections.add(connection)


def _quiet_cancelled_workers() -> None:
    pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, _CancelledAsItsLoopEnded) for f in pool_log.filters):
        pool_log.addFilter(_CancelledAsItsLoopEnded())


async def _close_pool(found: _LoopPool) -> None:
    """Close the pool and every connection it opened. A pool whose worker tasks were cancelled (its
    loop ending: asyncio.run cancels every task) raises CancelledError from ``close()`` before it
    closes its idle connections, which then stayed open on the server until the process exited."""
    try:
        await found.pool.close()
    finally:
        for connection in list(found.connections):
            await connection.close()
