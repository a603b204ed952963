"""A cancel mark is kept an hour (CANCEL_KEPT), as Redis's key and DynamoDB's TTL keep theirs: the
SQLite and PostgreSQL stores prune older marks as they write a new one, so no id that was ever
cancelled stays in the table for good (issue 34)."""

from __future__ import annotations

import pytest

from dcaf_like import PostgresConversationRepository, SqliteConversationRepository
from dcaf_like.stores._shared import CANCEL_KEPT

pytestmark = pytest.mark.integration


def marks(store: object) -> int:
    if isinstance(store, SqliteConversationRepository):
        with store._reading(store._connection()) as db:
            return int(db.execute("SELECT count(*) FROM dcaf_cancels").fetchone()[0])
    assert isinstance(store, PostgresConversationRepository)
    return int(store._one(f"SELECT count(*) FROM {store.table}_cancels", ())[0])


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        made = SqliteConversationRepository(tmp_path / "c.sqlite3")
    else:
        made = PostgresConversationRepository(
            request.getfixturevalue("postgres_url"), table=request.getfixturevalue("postgres_table")
        )
    yield made
    made.close()


def test_marks_older_than_an_hour_are_pruned_as_a_new_one_is_written(store):
    store.request_cancel("conv-old", at=1_000.0)
    store.request_cancel("conv-recent", at=1_000.0 + CANCEL_KEPT - 1)
    assert marks(store) == 2

    store.request_cancel("conv-new", at=1_000.0 + CANCEL_KEPT + 1)

    assert marks(store) == 2  # the old one went, the recent one stays
    assert not store.cancel_requested("conv-old", since=0.0)
    assert store.cancel_requested("conv-recent", since=0.0)
    assert store.cancel_requested("conv-new", since=0.0)
