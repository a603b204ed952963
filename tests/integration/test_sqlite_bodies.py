"""How the SQLite store keeps a conversation's header and its records: JSON text while short,
zlib-compressed once they would not fit a B-tree cell, and either read back, whichever version of
dcaf_like wrote them (a whole body of format 1 too); the file stays within 1.8 times the JSON it holds
(it was 4.2 times: issue 26)."""

from __future__ import annotations

import os
import sqlite3
import zlib

import pytest

from dcaf_like import SqliteConversationRepository, StoreUnavailable
from dcaf_like.domain import Conversation, ToolInput
from dcaf_like.stores._codec import conversation_to_dict, encode, encode_header
from dcaf_like.stores._schema import MESSAGE
from dcaf_like.stores.sqlite import COMPRESS_FROM, MESSAGES, TABLE


def conversation(messages: int) -> Conversation:
    c = Conversation.start(at=1_700_000_000.0)
    for i in range(messages):
        c.add_user_message(f"question {i}: which pods in namespace prod are crash-looping?", at=1.0 + i)
    return c


def stored_body(path, conversation_id: str) -> str | bytes:
    with sqlite3.connect(path) as db:
        (body,) = db.execute(f"SELECT body FROM {TABLE} WHERE id = ?", (conversation_id,)).fetchone()
    return body


def test_a_short_record_is_stored_as_json_text_a_long_one_compressed(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db")
    c = conversation(1)
    c.add_assistant_message("pods: " + ", ".join(f"web-{i} Running" for i in range(100)), at=2.0)
    short, long = (MESSAGE.write(m) for m in c.messages)
    assert len(short) < COMPRESS_FROM <= len(long)
    store.save(c, 0)

    assert stored_body(tmp_path / "c.db", c.id) == encode_header(c)
    with sqlite3.connect(tmp_path / "c.db") as db:
        rows = db.execute(f"SELECT seq, body FROM {MESSAGES} WHERE id = ? ORDER BY seq", (c.id,)).fetchall()
    assert rows[0] == (0, short)
    assert isinstance(rows[1][1], bytes)
    assert len(rows[1][1]) < len(long) / 5
    assert zlib.decompress(rows[1][1]).decode() == long
    loaded = store.get(c.id)
    assert loaded is not None
    assert conversation_to_dict(loaded) == conversation_to_dict(c)


def test_a_long_body_written_as_text_by_an_earlier_version_is_still_read(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db")
    long = conversation(1000)
    store.save(long, 0)
    with sqlite3.connect(tmp_path / "c.db") as db:
        db.execute(f"UPDATE {TABLE} SET body = ? WHERE id = ?", (encode(long), long.id))

    loaded = store.get(long.id)

    assert loaded is not None
    assert conversation_to_dict(loaded) == conversation_to_dict(long)


def test_a_damaged_compressed_body_is_a_store_error_naming_the_conversation(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db")
    long = conversation(1000)
    store.save(long, 0)
    with sqlite3.connect(tmp_path / "c.db") as db:
        db.execute(f"UPDATE {TABLE} SET body = ? WHERE id = ?", (b"x\x01not zlib", long.id))

    with pytest.raises(StoreUnavailable, match=long.id):
        store.get(long.id)


def finished(n: int) -> Conversation:
    """A proposal approved and run, about 1.1 KiB of JSON: the size that spilled into a page of its own."""
    c = Conversation.start(at=1_700_000_000.0 + n)
    c.add_user_message(f"delete pod web-{n} in namespace prod please", at=1_700_000_000.0 + n)
    c.add_assistant_message("", at=1_700_000_000.0 + n)
    call = c.request_tool_call(
        "delete_pod", ToolInput.of({"name": f"web-{n}", "namespace": "prod"}), requires_approval=True,
        description="Delete a pod.", at=1_700_000_000.0 + n,
    )  # fmt: skip
    c.approve_tool_call(call.id.value, by="alice", at=1_700_000_001.0 + n)
    c.record_tool_result(call.id.value, f'pod "web-{n}" deleted', at=1_700_000_002.0 + n)
    c.add_assistant_message(
        f'Done: pod "web-{n}" deleted; it was in CrashLoopBackOff, OOMKilled twice since 10:42 UTC'
        f" (limit 256Mi, peak {n % 300 + 200}Mi), and its replacement web-{n + 1} is Running.",
        at=1_700_000_002.0 + n,
    )
    return c


def test_a_file_of_3000_conversations_of_a_kilobyte_is_at_most_1_8_times_their_json(tmp_path):
    """A header and a row per message and per call, each keyed by the conversation's (namespace, id):
    1.68 times (ADR 16; 0.82 when the whole conversation was one compressed body, ADR 5)."""
    store = SqliteConversationRepository(tmp_path / "c.db")
    conversations = [finished(n) for n in range(3000)]
    json_bytes = sum(len(encode(c).encode()) for c in conversations)
    for c in conversations:
        store.save(c, 0)
    store.close()  # the last connection checkpoints the write-ahead log into the file

    on_disk = sum(os.path.getsize(p) for p in tmp_path.iterdir() if p.name.startswith("c.db"))
    assert 1000 < json_bytes / len(conversations) < 1500
    assert on_disk / json_bytes <= 1.8


def test_a_file_written_before_retention_opens_and_its_rows_are_read_and_pruned(tmp_path):
    old = conversation(2)
    with sqlite3.connect(tmp_path / "c.db") as db:  # the table as dcaf_like 0.1 wrote it
        db.executescript(
            f"""CREATE TABLE {TABLE} (namespace TEXT NOT NULL, id TEXT NOT NULL, version INTEGER NOT NULL,
            updated_at REAL NOT NULL, body TEXT NOT NULL, PRIMARY KEY (namespace, id)) WITHOUT ROWID;"""
        )
        db.execute(f"INSERT INTO {TABLE} VALUES ('default', ?, 1, 1000.0, ?)", (old.id, encode(old)))
    store = SqliteConversationRepository(tmp_path / "c.db")

    loaded = store.get(old.id)
    newer = conversation(1)
    store.save(newer, 0)

    assert loaded is not None
    assert conversation_to_dict(loaded) == conversation_to_dict(old)
    assert store.list_ids() == [newer.id, old.id]
    assert store.prune(3600, now=5000.0) == 1
    assert store.list_ids() == [newer.id]
