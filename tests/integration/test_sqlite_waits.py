"""The SQLite store on an event loop: it answers on the loop when SQLite can answer at once, and waits
for a busy database in a worker thread, never on the loop."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from dcaf_like import ConcurrencyConflict, SqliteConversationRepository, StoreUnavailable
from dcaf_like.domain import Conversation
from dcaf_like.stores import sqlite as sqlite_store


def conversation(conversation_id: str) -> Conversation:
    c = Conversation.start(conversation_id)
    c.add_user_message("which pods run?")
    return c


async def test_a_save_waits_for_another_writer_without_stalling_the_loop(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db")
    store.save(conversation("first"), 0)  # creates the file and its table
    other = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(tick())
    saving = asyncio.create_task(store.asave(conversation("second"), 0))
    # The lock is let go only once the loop has served other work while the save waited: a save that
    # waited on the loop would block it until its busy timeout and fail.
    while ticks < 50:
        await asyncio.sleep(0)
    assert not saving.done()  # it is waiting for the lock ...
    other.execute("COMMIT")
    await saving  # ... and takes it once free
    ticking.cancel()

    assert store.get("second") is not None
    other.close()
    store.close()


async def test_on_the_loop_a_conflict_is_still_a_conflict_and_a_read_sees_the_latest(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db")
    first = conversation("c1")
    await store.asave(first, 0)

    with pytest.raises(ConcurrencyConflict):
        await store.asave(conversation("c1"), 0)
    loaded = await store.aget("c1")

    assert loaded is not None
    assert loaded.version == first.version
    store.close()


async def test_a_writer_that_never_lets_go_is_a_store_error_after_the_busy_timeout(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db", busy_timeout=0.2)
    store.save(conversation("first"), 0)
    other = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")

    with pytest.raises(StoreUnavailable, match="database is locked"):
        await store.asave(conversation("second"), 0)

    other.execute("ROLLBACK")
    other.close()
    store.close()


async def save_many(store: SqliteConversationRepository, count: int, *, quiet: bool = False) -> None:
    """`count` saves on the loop; with `quiet`, none while a checkpoint runs (a server between
    bursts of requests), otherwise without a pause."""
    for i in range(count):
        conversation = Conversation.start(f"conv-{i}", at=1.0)
        conversation.add_user_message("which pods in namespace prod are crash-looping?", at=1.0)
        await store.asave(conversation, 0)
        if quiet:
            await until_checkpointed(store)
    await until_checkpointed(store)


async def until_checkpointed(store: SqliteConversationRepository) -> None:
    for _ in range(500):
        if not store._checkpointing:
            return
        await asyncio.sleep(0.01)


# 2,000 commits of one small conversation each leave about 28 MB of log when nothing checkpoints it.


async def test_saves_on_the_loop_are_checkpointed_by_a_worker_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "LOG_LIMIT", 1_000_000)  # the loop's connection never does it
    store = SqliteConversationRepository(tmp_path / "c.db")

    await save_many(store, 2_000, quiet=True)

    assert (tmp_path / "c.db-wal").stat().st_size < 6 * 1024 * 1024
    assert len(store.list_ids(limit=5_000)) == 2_000
    store.close()


async def test_under_writes_that_never_pause_the_log_still_stops_growing(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "LOG_LIMIT", 500)  # pages: a smaller limit, for a short test
    # The worker thread is left out (it never gets a turn while writes never pause): the loop's own
    # connection must checkpoint once the log holds LOG_LIMIT pages, whatever the machine's speed.
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_EVERY", 10**9)
    store = SqliteConversationRepository(tmp_path / "c.db")

    await save_many(store, 2_000)

    assert (tmp_path / "c.db-wal").stat().st_size < 4 * 1024 * 1024
    assert len(store.list_ids(limit=5_000)) == 2_000
    store.close()
