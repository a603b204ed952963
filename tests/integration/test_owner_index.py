"""An owner's page of the conversation list read from an index (docs/stores.md, "Stores of any size"):
SQLite and PostgreSQL list only that owner's conversations; a SQLite file written before the owner
column gets each row's owner from its stored header when it is opened."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from dcaf_like import SqliteConversationRepository
from dcaf_like.domain import Conversation
from dcaf_like.stores import _codec
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
