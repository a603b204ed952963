"""How the SQLite store keeps a conversation's body: JSON text while it is short, zlib-compressed once
it is long, and either read back, whichever version of dcaf_like wrote it."""

from __future__ import annotations

import sqlite3
import zlib

import pytest

from dcaf_like import SqliteConversationRepository, StoreUnavailable
from dcaf_like.adapters.serialization import conversation_to_dict, encode
from dcaf_like.adapters.sqlite_store import COMPRESS_FROM, TABLE
from dcaf_like.domain import Conversation


def conversation(messages: int) -> Conversation:
    c = Conversation.start(at=1_700_000_000.0)
    for i in range(messages):
        c.add_user_message(f"question {i}: which pods in namespace prod are crash-looping?", at=1.0 + i)
    c.collect_events()
    return c


def stored_body(path, conversation_id: str) -> str | bytes:
    with sqlite3.connect(path) as db:
        (body,) = db.execute(f"SELECT body FROM {TABLE} WHERE id = ?", (conversation_id,)).fetchone()
    return body


def test_a_short_conversation_is_stored_as_json_text_a_long_one_compressed(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db")
    short, long = conversation(3), conversation(1000)
    assert len(encode(short)) < COMPRESS_FROM <= len(encode(long))
    store.save(short, 0)
    store.save(long, 0)

    assert stored_body(tmp_path / "c.db", short.id) == encode(short)
    body = stored_body(tmp_path / "c.db", long.id)
    assert isinstance(body, bytes)
    assert len(body) < len(encode(long)) / 5
    assert zlib.decompress(body).decode() == encode(long)
    loaded = store.get(long.id)
    assert loaded is not None
    assert conversation_to_dict(loaded) == conversation_to_dict(long)


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
