"""An owner's page of the conversation list read from an index (docs/stores.md, "Stores of any size"):
SQLite, PostgreSQL, Redis and DynamoDB list only that owner's conversations; a SQLite file written
before the owner column gets each row's owner from its stored header when it is opened; a Redis
namespace an earlier version started, or a DynamoDB table made before the owners' index, lists
everyone's; a prune or a delete takes a conversation out of its owner's sorted set on Redis."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from dcaf_like import (
    DynamoDBConversationRepository,
    RedisConversationRepository,
    SqliteConversationRepository,
)
from dcaf_like.domain import Conversation
from dcaf_like.stores import _codec
from dcaf_like.stores.dynamodb import OWNERS_MARK
from dcaf_like.stores.sqlite import _SCHEMA, TABLE


def test_a_sqlite_file_written_before_the_owner_column_lists_each_owners_conversations(tmp_path: Path):
    path = tmp_path / "earlier.sqlite3"
    with sqlite3.connect(path) as db:  # the layout of the version before: no owner column
        db.executescript(_SCHEMA)
        for column, kind in (
            ("waiting_until", "REAL"),
            ("window_message", "INTEGER"),
            ("window_call", "INTEGER"),
        ):
            db.execute(f"ALTER TABLE {TABLE} ADD COLUMN {column} {kind}")
        for n, owner in enumerate(["alice", "bob", None, "alice"]):
            c = Conversation.start(f"conv-{n}", owner=owner)
            c.replace_session({"log": "a NUL \u0000 in a session"})
            header = _codec.encode_header(c)
            assert json.loads(header).get("owner") == owner
            db.execute(
                f"INSERT INTO {TABLE} (namespace, id, version, updated_at, body) VALUES (?, ?, ?, ?, ?)",
                ("default", c.id, 1, float(n), header),
            )

    store = SqliteConversationRepository(path)

    assert [p.conversation_id for p in store.list_after(None, 10, owner="alice")] == ["conv-3", "conv-0"]
    assert [p.conversation_id for p in store.list_after(None, 10, owner="bob")] == ["conv-1"]
    assert len(store.list_after(None, 10)) == 4
    fresh = Conversation.start("conv-4", owner="bob")
    fresh.add_user_message("hi")
    store.save(fresh, 0)
    assert [p.conversation_id for p in store.list_after(None, 10, owner="bob")] == ["conv-4", "conv-1"]


def saved(store, conversation_id: str, owner: str | None) -> None:
    c = Conversation.start(conversation_id, owner=owner)
    c.add_user_message("hi")
    store.save(c, 0)


def ids(places) -> list[str]:
    return [p.conversation_id for p in places]


def test_a_redis_namespace_keeps_each_owners_set_and_prune_and_delete_keep_it_true(redis_url, redis_prefix):
    now = [1_700_000_000.0]
    store = RedisConversationRepository(redis_url, prefix=redis_prefix, clock=lambda: now[0])
    for n, owner in enumerate(["alice", "bob", "alice", "alice"]):
        now[0] += 1
        saved(store, f"conv-{n}", owner)

    assert ids(store.list_after(None, 10, owner="alice")) == ["conv-3", "conv-2", "conv-0"]
    assert store.delete("conv-2")
    now[0] += 100
    assert store.prune(50, now=now[0]) == 3
    saved(store, "conv-4", "alice")

    assert ids(store.list_after(None, 10, owner="alice")) == ["conv-4"]
    assert store._sync.zcard(store._owned("alice")) == 1  # no entry left behind for a forgotten one
    store.close()


def test_a_redis_namespace_an_earlier_version_started_lists_everyones_for_an_owner(redis_url, redis_prefix):
    store = RedisConversationRepository(redis_url, prefix=redis_prefix)
    store._sync.zadd(store._index, {"from-before": 1.0})  # an index made before owners were kept
    saved(store, "conv-0", "alice")
    saved(store, "conv-1", "bob")

    assert not store._sync.exists(store._owners)
    assert ids(store.list_after(None, 10, owner="alice")) == ["conv-1", "conv-0", "from-before"]
    store.close()


def test_a_dynamodb_table_made_before_the_owners_index_lists_everyones_for_an_owner(dynamodb_endpoint):
    table = f"owners-{uuid.uuid4().hex[:8]}"
    made = DynamoDBConversationRepository(table, region="eu-west-1", endpoint_url=dynamodb_endpoint)
    made.create_table()
    saved(made, "conv-0", "alice")
    saved(made, "conv-1", "bob")
    assert ids(made.list_after(None, 10, owner="alice")) == ["conv-0"]

    made.client.delete_item(TableName=table, Key={"pk": {"S": OWNERS_MARK}})  # as a table made before
    earlier = DynamoDBConversationRepository(table, region="eu-west-1", endpoint_url=dynamodb_endpoint)

    assert ids(earlier.list_after(None, 10, owner="alice")) == ["conv-1", "conv-0"]
