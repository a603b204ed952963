"""A conversation stored whole (format 1, ADR 5) by an earlier version still reads, and its next save
writes it as a header and a record per message and per call (ADR 16): the pinned sample of
``tests/unit/stores/stored/``, put in each store in the layout the earlier version wrote."""

from __future__ import annotations

import json
import sqlite3
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dcaf_like import (
    ConversationRepository,
    DynamoDBConversationRepository,
    PostgresConversationRepository,
    RedisConversationRepository,
    SqliteConversationRepository,
)
from dcaf_like.domain import Conversation
from dcaf_like.stores._codec import conversation_to_dict, decode

SAMPLE = (
    (Path(__file__).parents[1] / "unit" / "stores" / "stored" / "conversation_v1_main.json")
    .read_text("utf-8")
    .strip()
)
WHOLE = decode(SAMPLE, "sample")

# A store holding the sample as the earlier version wrote it, and a function counting its stored
# message records.
Stored = tuple[ConversationRepository, Callable[[], int]]


@pytest.fixture(params=["sqlite", "redis", "postgres", "dynamodb"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stored]:
    store: Any
    if request.param == "sqlite":
        path = tmp_path / "c.db"
        store = SqliteConversationRepository(path)
        store.ping()  # the file and its tables
        with sqlite3.connect(path) as db:
            db.execute(
                "INSERT INTO dcaf_conversations (namespace, id, version, updated_at, body) "
                "VALUES (?, ?, ?, ?, ?)",
                ("default", WHOLE.id, WHOLE.version, 1.0, SAMPLE),
            )

        def count() -> int:
            with sqlite3.connect(path) as db:
                return int(db.execute("SELECT count(*) FROM dcaf_messages").fetchone()[0])

    elif request.param == "redis":
        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        store = RedisConversationRepository(url, prefix=prefix)
        store._sync.hset(store._parts(WHOLE.id)[0], mapping={"version": WHOLE.version, "body": SAMPLE})
        store._sync.zadd(store._index, {WHOLE.id: 1.0})

        def count() -> int:
            return int(store._sync.llen(store._parts(WHOLE.id)[1]))

    elif request.param == "dynamodb":
        endpoint = request.getfixturevalue("dynamodb_endpoint")
        store = DynamoDBConversationRepository(
            f"migrate-{uuid.uuid4().hex[:8]}", region="eu-west-1", endpoint_url=endpoint
        )
        store.create_table()
        store.client.put_item(
            TableName=store.table,
            Item={
                "pk": {"S": f"default#{WHOLE.id}"},
                "ns": {"S": "default"},
                "conversation_id": {"S": WHOLE.id},
                "version": {"N": str(WHOLE.version)},
                "updated_at": {"N": "1"},
                "body": {"B": zlib.compress(SAMPLE.encode())},
            },
        )

        def count() -> int:  # messages in its pages
            item = store.client.get_item(TableName=store.table, Key={"pk": {"S": f"default#{WHOLE.id}"}})[
                "Item"
            ]
            pages = [zlib.decompress(v["B"]) for k, v in item.items() if k[0] == "m" and k[1:].isdigit()]
            return sum(len(json.loads(p)) for p in pages)

    else:
        import psycopg

        url, table = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_table")
        store = PostgresConversationRepository(url, table=table)
        store.migrate()
        with psycopg.connect(url) as db:
            db.execute(
                f"INSERT INTO {table} (namespace, id, version, updated_at, body) VALUES (%s, %s, %s, %s, %s)",
                ("default", WHOLE.id, WHOLE.version, 1.0, SAMPLE),
            )

        def count() -> int:
            with psycopg.connect(url) as db:
                row = db.execute(f"SELECT count(*) FROM {table}_messages").fetchone()
                return int(row[0]) if row else 0

    yield store, count
    getattr(store, "close", lambda: None)()


def test_a_whole_document_reads_and_its_next_save_writes_it_as_records(stored: Stored) -> None:
    store, stored_messages = stored

    loaded = store.get(WHOLE.id)

    assert loaded is not None
    assert conversation_to_dict(loaded) == conversation_to_dict(WHOLE)
    assert stored_messages() == 0
    loaded.add_assistant_message("after the upgrade", at=1_700_000_100.0)
    store.save(loaded, WHOLE.version)
    assert stored_messages() == len(WHOLE.messages) + 1
    again = store.get(WHOLE.id)
    assert again is not None
    assert conversation_to_dict(again) == conversation_to_dict(loaded)
    [pending] = again.pending_tool_calls  # now a save of what changed: an old call, a new message
    again.reject_tool_call(pending.id.value, "not now", by="alice", at=1_700_000_101.0)
    again.add_assistant_message("Rejected.", at=1_700_000_102.0)
    store.save(again, loaded.version)
    third = store.get(WHOLE.id)
    assert third is not None
    assert conversation_to_dict(third) == conversation_to_dict(again)
    assert stored_messages() == len(WHOLE.messages) + 2


def test_a_dynamodb_turn_on_a_long_conversation_sets_its_header_and_last_page(dynamodb_endpoint: str) -> None:
    """Pages of 64 messages: a turn on 200 stored messages rewrites the header and page 3, nothing more."""
    store = DynamoDBConversationRepository(
        f"pages-{uuid.uuid4().hex[:8]}", region="eu-west-1", endpoint_url=dynamodb_endpoint
    )
    store.create_table()
    conversation = Conversation.start()
    for n in range(100):
        conversation.add_user_message(f"question {n}")
        conversation.add_assistant_message(f"answer {n}")
    store.save(conversation, 0)
    loaded = store.get(conversation.id)
    assert loaded is not None
    updates: list[dict[str, Any]] = []
    update_item = store.client.update_item
    store.client.update_item = lambda **request: updates.append(request) or update_item(**request)  # type: ignore[method-assign]

    loaded.add_user_message("one more")
    store.save(loaded, conversation.version)

    [update] = updates
    assert (
        update["UpdateExpression"] == "SET version = :version, updated_at = :updated, body = :body, m3 = :m3"
    )
    again = store.get(conversation.id)
    assert again is not None
    assert [m.text for m in again.messages] == [m.text for m in loaded.messages]
    assert len(again.messages) == 201
