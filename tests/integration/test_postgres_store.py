"""The PostgreSQL store beyond the contract: its schema and migrations, expiry, URLs, failures and its
round trips, against the real server (a database of the session's own, dropped at the end)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest

from dcaf_like import (
    Agent,
    PostgresConversationRepository,
    StoreConfigError,
    StoreUnavailable,
    ToolDecision,
    open_store,
)
from dcaf_like.domain import Conversation
from dcaf_like.stores import postgres as postgres_store
from dcaf_like.stores._codec import encode
from dcaf_like.testing import FakeRuntime, tool_call

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def saved(store: PostgresConversationRepository, conversation_id: str) -> Conversation:
    conversation = Conversation.start(conversation_id)
    conversation.add_user_message("hi")
    store.save(conversation, 0)
    return conversation


def schema_version(url: str, table: str) -> int:
    with psycopg.connect(url) as db:
        row = db.execute(f"SELECT version FROM {table}_schema_version").fetchone()
    assert row is not None
    return int(row[0])


# -- schema ----------------------------------------------------------------------------------------


def test_the_first_use_creates_the_schema_at_the_current_version(postgres_url, postgres_table):
    store = PostgresConversationRepository(postgres_url, table=postgres_table)

    saved(store, "c1")

    assert schema_version(postgres_url, postgres_table) == postgres_store.SCHEMA_VERSION == 10
    with psycopg.connect(postgres_url) as db:
        columns = {r[0] for r in db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", (postgres_table,)
        )}  # fmt: skip
    assert columns == {"namespace", "id", "version", "updated_at", "expires_at", "body", "owner"}
    store.close()


def test_a_database_made_by_the_first_version_is_migrated_and_keeps_its_conversations(
    postgres_url, postgres_table
):
    old = Conversation.start("from-v1", owner="alice")
    old.add_user_message("stored before the migration")
    old.replace_session({"log": "a NUL \u0000 that PostgreSQL's jsonb would refuse"})
    with psycopg.connect(postgres_url) as db:
        for statement in postgres_store.MIGRATIONS[0]:
            db.execute(statement.format(table=postgres_table))
        db.execute(f"CREATE TABLE {postgres_table}_schema_version (version integer NOT NULL)")
        db.execute(f"INSERT INTO {postgres_table}_schema_version VALUES (1)")
        db.execute(
            f"INSERT INTO {postgres_table} VALUES (%s, %s, %s, %s, %s)",
            ("default", old.id, old.version, 1.0, encode(old)),
        )
    store = PostgresConversationRepository(postgres_url, table=postgres_table)

    assert store.migrate() == 1
    loaded = store.get("from-v1")

    assert loaded is not None
    assert loaded.messages[0].text == "stored before the migration"
    assert schema_version(postgres_url, postgres_table) == 10
    loaded.add_assistant_message("after")
    store.save(loaded, old.version)
    assert store.list_ids() == ["from-v1"]
    assert [p.conversation_id for p in store.list_after(None, 10, owner="alice")] == ["from-v1"]
    assert store.list_after(None, 10, owner="bob") == []
    store.close()


def test_a_schema_newer_than_this_code_is_refused_by_name(postgres_url, postgres_table):
    with psycopg.connect(postgres_url) as db:
        db.execute(f"CREATE TABLE {postgres_table}_schema_version (version integer NOT NULL)")
        db.execute(f"INSERT INTO {postgres_table}_schema_version VALUES (99)")
    store = PostgresConversationRepository(postgres_url, table=postgres_table)

    with pytest.raises(StoreUnavailable, match="schema version 99, newer than this dcaf_like knows"):
        store.get("anything")


def test_workers_starting_together_migrate_once(postgres_url, postgres_table):
    stores = [PostgresConversationRepository(postgres_url, table=postgres_table) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    found: list[int] = []
    errors: list[BaseException] = []

    def start(store: PostgresConversationRepository) -> None:
        barrier.wait()
        try:
            found.append(store.migrate())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    current = postgres_store.SCHEMA_VERSION
    assert sorted(found) == [0, *[current] * 5]  # one created it; the others found it made
    assert schema_version(postgres_url, postgres_table) == current


# -- expiry ---------------------------------------------------------------------------------------


def test_conversations_idle_longer_than_the_ttl_are_gone_and_purged(postgres_url, postgres_table):
    clock = Clock()
    store = PostgresConversationRepository(postgres_url, table=postgres_table, ttl=60, clock=clock)
    saved(store, "old")
    clock.now += 30
    saved(store, "young")
    clock.now += 45  # "old" is 75 s idle, "young" 45 s

    assert store.get("old") is None
    assert store.list_ids() == ["young"]
    saved(store, "old")  # an expired id may start afresh
    assert store.get("old") is not None

    clock.now += 61
    for n in range(postgres_store.PURGE_EVERY):
        saved(store, f"filler-{n}")
    with psycopg.connect(postgres_url) as db:
        left = {r[0] for r in db.execute(f"SELECT id FROM {postgres_table}")}
    assert "old" not in left
    assert "young" not in left
    store.close()


# -- URLs and failures ------------------------------------------------------------------------------


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_a_url_opens_the_store_with_its_options(scheme):
    store = open_store(
        f"{scheme}://ops:s3cret@db.internal:6543/agents?table=ops_conversations&ttl=3600"
        "&pool_min=2&pool_max=20&sslmode=require&namespace=billing",
        namespace="ops",
    )

    assert isinstance(store, PostgresConversationRepository)
    assert (store.table, store.namespace, store.ttl) == ("ops_conversations", "billing", 3600.0)
    assert (store.pool_min, store.pool_max) == (2, 20)
    assert store.where == "db.internal:6543/agents"
    assert "s3cret" not in repr(store)


def test_an_unknown_option_is_a_clear_error_without_the_password():
    with pytest.raises(StoreConfigError) as raised:
        open_store("postgresql://ops:s3cret@db.internal/agents?prefix=x")

    assert str(raised.value).startswith(
        "'prefix' is not an option of a PostgreSQL store URL; the store takes"
    )
    assert "s3cret" not in str(raised.value)


def test_a_server_that_does_not_answer_is_store_unavailable_naming_where(closed_port: int):
    store = PostgresConversationRepository(
        f"postgresql://ops:s3cret@127.0.0.1:{closed_port}/agents", timeout=1
    )

    with pytest.raises(StoreUnavailable) as raised:
        store.get("c1")

    assert f"postgres store at 127.0.0.1:{closed_port}/agents" in str(raised.value)
    assert "s3cret" not in str(raised.value)
    store.close()


async def test_the_async_methods_report_a_server_that_does_not_answer(closed_port: int):
    store = PostgresConversationRepository(f"postgresql://ops@127.0.0.1:{closed_port}/agents", timeout=1)

    with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{closed_port}"):
        await store.aget("c1")
    await store.aclose()


# -- round trips --------------------------------------------------------------------------------------


class Counting(PostgresConversationRepository):
    statements: list[str]

    def _run(self, db: Any, sql: str, params: Any) -> Any:
        self.statements.append(sql.split()[0])
        return super()._run(db, sql, params)

    async def _arun(self, db: Any, sql: str, params: Any) -> Any:
        self.statements.append(sql.split()[0])
        return await super()._arun(db, sql, params)


def test_a_sync_turn_reads_once_and_saves_its_message_then_its_outcome(postgres_url, postgres_table, cluster):
    store = Counting(postgres_url, table=postgres_table)
    store.statements = []
    agent = Agent(tools=cluster.tools(), runtime=FakeRuntime(["one", "two"]), repository=store)
    first = agent.run("hello")
    store.statements.clear()

    agent.run("again", conversation_id=first.conversation_id)

    # the read, the user's message saved as the turn starts (docs/runs.md, "A crash keeps the user's
    # message"), the save at its end (one statement each)
    assert store.statements == ["SELECT", "WITH", "WITH"]
    store.close()


async def test_an_async_turn_reads_once_saves_its_message_then_its_outcome_and_an_approval_adds_its_claim(
    postgres_url, postgres_table, cluster
):
    store = Counting(postgres_url, table=postgres_table)
    store.statements = []
    runtime = FakeRuntime(["one", tool_call("delete_pod", name="web-2"), "deleted"])
    agent = Agent(tools=cluster.tools(), runtime=runtime, repository=store)
    first = await agent.arun("hello")
    # A new id is looked up, and the conversation saved, before the model is called (a run is
    # readable and cancellable from its first moment: docs/runs.md); its outcome saved after.
    assert store.statements == ["SELECT", "WITH", "WITH"]
    store.statements.clear()

    proposed = await agent.arun("delete web-2", conversation_id=first.conversation_id)
    turn = list(store.statements)
    store.statements.clear()
    await agent.adecide(first.conversation_id, [ToolDecision.approved(proposed.pending_tool_calls[0].id)])

    # the read, the message saved at the start, the standing grants in force (read once, as the call
    # waits for a person: docs/approvals.md, "Grants"), the save
    assert turn == ["SELECT", "WITH", "SELECT", "WITH"]
    # read, claim the approval (its audit record in the same transaction, after the statement that
    # locks the audit chain's head and reads it: ADR 34), ask whether the run was cancelled before the
    # model's next call, save the outcome
    assert store.statements == ["SELECT", "WITH", "INSERT", "SELECT", "WITH"]
    assert [r.outcome for r in store.decision_records(first.conversation_id)] == ["approved"]
    assert cluster.deleted == [("default", "web-2")]
    await store.aclose()


def recording_pools(store: PostgresConversationRepository) -> list[Any]:
    """The asyncio pools `store` opens from now on, in a list."""
    made: list[Any] = []

    class Recorded(store._pools.AsyncConnectionPool):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    store._pools = type(
        "Pools", (), {"AsyncConnectionPool": Recorded, "ConnectionPool": store._pools.ConnectionPool}
    )
    return made


async def test_requests_arriving_at_once_on_a_new_loop_leave_one_pool_open_and_close_the_others(
    postgres_url, postgres_table
):
    store = PostgresConversationRepository(postgres_url, table=postgres_table)
    made = recording_pools(store)

    found = await asyncio.gather(*(store.aget(f"conv_{i}") for i in range(8)))
    open_pools = [pool for pool in made if not pool.closed]
    await store.aclose()

    assert found == [None] * 8
    assert len(made) >= 1
    assert len(open_pools) == 1  # the others were closed, not dropped with their connections open
    assert all(pool.closed for pool in made)


def test_a_script_running_a_loop_per_call_leaves_no_pool_open_when_each_loop_ends(
    postgres_url, postgres_table
):
    store = PostgresConversationRepository(postgres_url, table=postgres_table)
    made = recording_pools(store)

    for n in range(3):  # asyncio.run(agent.arun(...)) per request, never closing the store
        assert asyncio.run(store.aget(f"conv_{n}")) is None
        assert len(made) == n + 1
        assert made[-1].closed  # closed as its loop ended, its connections with it
    store.close()
