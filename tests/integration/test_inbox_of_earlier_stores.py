"""The inbox of a store an earlier version wrote, before the index of waiting calls or with the index
as the version that made it left it, without the entries of the conversations saved before
(docs/approvals.md, "One inbox"; docs/stores.md, "The inbox's index in a store of before"): a SQLite
file gets the index filled when it is opened, a PostgreSQL database when it is migrated to schema
version 10, a Redis namespace and a DynamoDB namespace at their first inbox read; every call waiting
for approval is listed once, no settled one, and a fill racing a newer save never brings back entries
that save removed."""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from dcaf_like import (
    DynamoDBConversationRepository,
    PostgresConversationRepository,
    RedisConversationRepository,
    SqliteConversationRepository,
)
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.application.waiting import encode_entries, waiting_entries
from dcaf_like.domain import Conversation, ToolInput
from dcaf_like.stores import postgres as postgres_store
from dcaf_like.stores._codec import changes, encode
from dcaf_like.stores.dynamodb import WAITING_MARK
from dcaf_like.stores.sqlite import MARKS, TABLE, WAITING


def proposing(conversation_id: str, *names: str) -> Conversation:
    """A conversation with a call waiting for approval for each of `names`, and one rejected."""
    c = Conversation.start(conversation_id, owner="carol")
    c.add_user_message("clean up")
    c.add_assistant_message("Deleting.")
    for name in (*names, "rejected"):
        c.request_tool_call("delete_pod", ToolInput.of({"name": name}), requires_approval=True)
    [rejected] = [
        call for call in c.tool_calls.values() if call.proposed_input.as_dict()["name"] == "rejected"
    ]
    c.reject_tool_call(rejected.id.value, "no", by="bob")
    return c


def idle(conversation_id: str) -> Conversation:
    c = Conversation.start(conversation_id)
    c.add_user_message("nothing to approve")
    return c


def listed(store: ConversationRepository) -> list[tuple[str, str]]:
    return sorted((w.conversation_id, w.input["name"]) for w in store.list_waiting())


LISTED = [("a", "web-1"), ("a", "web-2"), ("b", "web-3")]


def settled(store: ConversationRepository, conversation_id: str) -> Conversation:
    """The conversation as a newer save leaves it: its waiting calls rejected."""
    c = store.get(conversation_id)
    assert c is not None
    read_at = c.version
    for call in c.pending_tool_calls:
        c.reject_tool_call(call.id.value, "not now", by="alice")
    store.save(c, read_at)
    return c


def test_a_sqlite_file_written_before_the_index_lists_every_waiting_call_once_opened(tmp_path: Path):
    path = tmp_path / "earlier.sqlite3"
    for namespace in ("ops", "billing"):
        store = SqliteConversationRepository(path, namespace=namespace)
        store.save(proposing("a", "web-1", "web-2"), 0)
        store.save(proposing("b", "web-3"), 0)
        store.save(idle("c"), 0)
        store.close()
    with sqlite3.connect(path) as db:  # as the version before the index left the file
        db.execute(f"DROP TRIGGER {TABLE}_waiting")
        db.execute(f"DROP TABLE {WAITING}")
        db.execute(f"DROP TABLE {MARKS}")

    ops, billing = (SqliteConversationRepository(path, namespace=n) for n in ("ops", "billing"))

    assert listed(ops) == listed(billing) == LISTED
    settled(ops, "a")
    assert listed(ops) == [("b", "web-3")]
    reopened = SqliteConversationRepository(path, namespace="ops")  # the index is made once
    assert listed(reopened) == [("b", "web-3")]
    for store in (ops, billing, reopened):
        store.close()


def test_a_sqlite_file_whose_index_an_earlier_version_made_unfilled_lists_every_waiting_call_once_opened(
    tmp_path: Path,
):
    path = tmp_path / "earlier.sqlite3"
    for namespace in ("ops", "billing"):
        store = SqliteConversationRepository(path, namespace=namespace)
        store.save(proposing("a", "web-1", "web-2"), 0)
        store.save(proposing("b", "web-3"), 0)
        store.save(idle("c"), 0)
        store.close()
    with sqlite3.connect(path) as db:  # as the version that made the index left the file: "a" saved
        db.execute(f"DROP TABLE {MARKS}")  # before it, "b" since
        db.execute(f"DELETE FROM {WAITING} WHERE id = 'a'")
        kept = db.execute(f"SELECT namespace, body FROM {WAITING} WHERE id = 'b' ORDER BY 1").fetchall()

    ops, billing = (SqliteConversationRepository(path, namespace=n) for n in ("ops", "billing"))

    assert listed(ops) == listed(billing) == LISTED
    with sqlite3.connect(path) as db:
        assert (
            db.execute(f"SELECT namespace, body FROM {WAITING} WHERE id = 'b' ORDER BY 1").fetchall() == kept
        )
    settled(ops, "a")
    reopened = SqliteConversationRepository(path, namespace="ops")  # marked whole: no second fill
    assert listed(reopened) == [("b", "web-3")]
    for store in (ops, billing, reopened):
        store.close()


def test_a_new_sqlite_file_is_marked_whole_with_its_empty_index(tmp_path: Path):
    store = SqliteConversationRepository(tmp_path / "new.sqlite3")

    assert store.list_waiting() == []
    with sqlite3.connect(store.path) as db:
        assert db.execute(f"SELECT name FROM {MARKS}").fetchall() == [("waiting-whole",)]
    store.close()


def test_a_conversation_the_fill_cannot_read_is_logged_and_left_out(tmp_path: Path, caplog):
    path = tmp_path / "earlier.sqlite3"
    store = SqliteConversationRepository(path)
    store.save(proposing("b", "web-3"), 0)
    store.close()
    with sqlite3.connect(path) as db:
        db.execute(f"DROP TRIGGER {TABLE}_waiting")
        db.execute(f"DROP TABLE {WAITING}")
        db.execute(f"DROP TABLE {MARKS}")
        db.execute(  # a damaged header
            f"INSERT INTO {TABLE} (namespace, id, version, updated_at, body) VALUES (?, ?, ?, ?, ?)",
            ("default", "x", 1, 1.0, "{"),
        )

    caplog.set_level(logging.WARNING, logger="dcaf_like.stores")  # whatever the root's level here
    reopened = SqliteConversationRepository(path)

    assert listed(reopened) == [("b", "web-3")]
    assert "inbox index not filled for x" in caplog.text
    reopened.close()


def test_a_postgres_database_of_schema_version_5_lists_every_waiting_call_once_migrated(
    postgres_url, postgres_table
):
    psycopg = pytest.importorskip("psycopg")
    whole = proposing("b", "web-3")  # a whole document (format 1), as the first versions stored
    with psycopg.connect(postgres_url) as db:
        for step in postgres_store.MIGRATIONS[:5]:
            for statement in step:
                assert isinstance(statement, str)
                db.execute(statement.format(table=postgres_table))
        db.execute(f"CREATE TABLE {postgres_table}_schema_version (version integer NOT NULL)")
        db.execute(f"INSERT INTO {postgres_table}_schema_version VALUES (5)")
        for namespace in ("ops", "billing"):
            for c in (proposing("a", "web-1", "web-2"), idle("c")):  # a header and its rows (ADR 16)
                parts = changes(c, 0)
                db.execute(
                    f"INSERT INTO {postgres_table} (namespace, id, version, updated_at, body) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (namespace, c.id, c.version, 1.0, parts.header),
                )
                for part, rows in (("messages", enumerate(parts.messages)), ("calls", parts.calls)):
                    for seq, body in rows:
                        db.execute(
                            f"INSERT INTO {postgres_table}_{part} VALUES (%s, %s, %s, %s)",
                            (namespace, c.id, seq, body),
                        )
            db.execute(
                f"INSERT INTO {postgres_table} (namespace, id, version, updated_at, body) "
                "VALUES (%s, %s, %s, %s, %s)",
                (namespace, whole.id, whole.version, 1.0, encode(whole)),
            )

    ops, billing = (
        PostgresConversationRepository(postgres_url, table=postgres_table, namespace=n)
        for n in ("ops", "billing")
    )
    assert ops.migrate() == 5

    assert listed(ops) == listed(billing) == LISTED
    settled(ops, "a")
    assert listed(ops) == [("b", "web-3")]
    ops.close()
    billing.close()


def test_a_postgres_database_whose_step_6_left_the_index_unfilled_lists_every_waiting_call_once_migrated(
    postgres_url, postgres_table
):
    psycopg = pytest.importorskip("psycopg")
    made = PostgresConversationRepository(postgres_url, table=postgres_table)
    made.migrate()
    made.close()
    old = proposing("d", "web-4")  # a whole document (format 1), stored before step 4, never saved since
    for namespace in ("ops", "billing"):
        store = PostgresConversationRepository(postgres_url, table=postgres_table, namespace=namespace)
        store.save(proposing("a", "web-1", "web-2"), 0)
        store.save(proposing("b", "web-3"), 0)
        store.save(idle("c"), 0)
        store.close()
    with psycopg.connect(postgres_url) as db:  # as the version that made the index left it at 9: "a"
        db.execute(f"DELETE FROM {postgres_table}_waiting WHERE id = 'a'")  # saved before 6, "b" since
        for namespace in ("ops", "billing"):
            db.execute(
                f"INSERT INTO {postgres_table} (namespace, id, version, updated_at, body, owner) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (namespace, old.id, old.version, 1.0, encode(old), old.owner),
            )
        db.execute(f"UPDATE {postgres_table}_schema_version SET version = 9")
        kept = db.execute(  # xmin: the transaction that wrote the row version
            f"SELECT namespace, xmin::text, body FROM {postgres_table}_waiting WHERE id = 'b' ORDER BY 1"
        ).fetchall()

    ops, billing = (
        PostgresConversationRepository(postgres_url, table=postgres_table, namespace=n)
        for n in ("ops", "billing")
    )
    assert ops.migrate() == 9

    assert listed(ops) == listed(billing) == [*LISTED, ("d", "web-4")]
    with psycopg.connect(postgres_url) as db:
        assert (
            kept
            == db.execute(
                f"SELECT namespace, xmin::text, body FROM {postgres_table}_waiting WHERE id = 'b' ORDER BY 1"
            ).fetchall()
        )
    settled(ops, "a")
    assert listed(ops) == [("b", "web-3"), ("d", "web-4")]
    ops.close()
    billing.close()


def test_a_postgres_fill_reads_after_a_save_in_flight_of_a_worker_of_the_earlier_version(
    postgres_url, postgres_table
):
    """docs/stores.md, "The inbox's index in a store of before": migration 10 locks the table against
    writes before it reads, so a worker still running the version at 9 (which keeps the index and does
    not migrate again) saves before the fill reads: its decided calls never come back."""
    psycopg = pytest.importorskip("psycopg")
    made = PostgresConversationRepository(postgres_url, table=postgres_table)
    made.save(proposing("a", "web-1"), 0)
    decided = made.get("a")
    assert decided is not None
    read_at = decided.version
    for call in decided.pending_tool_calls:
        decided.reject_tool_call(call.id.value, "not now", by="alice")
    sql, params = made._save_statement(decided, read_at)  # the save, as the earlier version writes it
    made.close()
    with psycopg.connect(postgres_url, autocommit=True) as db:  # at 9, "a" saved before 6
        db.execute(f"DELETE FROM {postgres_table}_waiting")
        db.execute(f"UPDATE {postgres_table}_schema_version SET version = 9")
    earlier_worker = psycopg.connect(postgres_url)
    earlier_worker.execute(sql, params)  # in flight: its transaction not yet committed
    store = PostgresConversationRepository(postgres_url, table=postgres_table)

    with ThreadPoolExecutor(1) as pool, psycopg.connect(postgres_url, autocommit=True) as watch:
        migrating = pool.submit(store.migrate)
        deadline = time.monotonic() + 60
        while (
            not wait([migrating], timeout=0.01).done
            and not watch.execute(
                "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                " WHERE c.relname = %s AND NOT l.granted)",
                (postgres_table,),
            ).fetchone()[0]
        ):
            assert time.monotonic() < deadline, "the migration neither ended nor waited for the table"
        earlier_worker.commit()
        assert migrating.result(timeout=60) == 9

    assert store.list_waiting() == []
    earlier_worker.close()
    store.close()


def test_a_redis_namespace_an_earlier_version_started_lists_every_waiting_call_at_its_first_read(
    redis_url, redis_prefix
):
    store = RedisConversationRepository(redis_url, prefix=redis_prefix)
    store.save(proposing("a", "web-1", "web-2"), 0)
    store.save(proposing("b", "web-3"), 0)
    store.save(idle("c"), 0)
    assert store._sync.exists(store._waiting_whole)  # a namespace this version started: whole
    store._sync.delete(store._waiting, store._waiting_whole)  # as an earlier version left it
    store.close()

    workers = [RedisConversationRepository(redis_url, prefix=redis_prefix) for _ in range(2)]

    with ThreadPoolExecutor(2) as pool:  # two workers' first reads: both may fill, in any order
        assert list(pool.map(listed, workers)) == [LISTED, LISTED]
    assert workers[0]._sync.exists(workers[0]._waiting_whole)
    settled(workers[0], "a")
    assert listed(workers[1]) == [("b", "web-3")]
    for w in workers:
        w.close()


def test_a_redis_fill_never_overwrites_the_entries_of_a_newer_save(redis_url, redis_prefix):
    store = RedisConversationRepository(redis_url, prefix=redis_prefix)
    read = proposing("a", "web-1")
    store.save(read, 0)
    stale = encode_entries(waiting_entries(read))
    newer = settled(store, "a")  # saved since the fill read it: nothing waits

    assert not store._fill_entry("a", read.version, stale)
    assert store.list_waiting() == []
    assert store._fill_entry("a", newer.version, stale)  # at the version it holds: written
    store.close()


def test_a_dynamodb_namespace_of_a_table_made_before_the_index_lists_every_waiting_call_at_its_first_read(
    dynamodb_endpoint,
):
    table = f"inbox-{uuid.uuid4().hex[:8]}"

    def opened(namespace: str) -> DynamoDBConversationRepository:
        return DynamoDBConversationRepository(
            table, region="eu-west-1", endpoint_url=dynamodb_endpoint, namespace=namespace
        )

    made = opened("ops")
    made.create_table()
    for namespace in ("ops", "billing"):
        store = opened(namespace)
        store.save(proposing("a", "web-1", "web-2"), 0)
        store.save(proposing("b", "web-3"), 0)
        store.save(idle("c"), 0)
        for conversation_id in ("a", "b"):  # as an earlier version left the table: no index, no mark
            store.client.delete_item(TableName=table, Key={"pk": {"S": store._waiting_pk(conversation_id)}})
    made.client.delete_item(TableName=table, Key={"pk": {"S": WAITING_MARK}})

    ops, billing = opened("ops"), opened("billing")

    assert listed(ops) == listed(billing) == LISTED
    settled(ops, "a")
    assert listed(opened("ops")) == [("b", "web-3")]  # its namespace's mark: no second fill


def test_a_dynamodb_fill_never_overwrites_the_entries_of_a_newer_save(dynamodb_endpoint):
    store = DynamoDBConversationRepository(
        f"inbox-{uuid.uuid4().hex[:8]}", region="eu-west-1", endpoint_url=dynamodb_endpoint
    )
    store.create_table()
    read = proposing("a", "web-1")
    store.save(read, 0)
    stale = encode_entries(waiting_entries(read))

    assert not store._fill_entry("a", read.version, stale, 1.0)  # the index holds these already
    settled(store, "a")
    assert not store._fill_entry("a", read.version, stale, 1.0)  # saved since the fill read it
    assert store.list_waiting() == []
