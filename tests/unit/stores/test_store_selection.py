"""Which store a served agent uses: URLs, the environment, the embedded default, and retention."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dcaf_like import (
    Agent,
    DynamoDBConversationRepository,
    FunctionAgent,
    InMemoryConversationRepository,
    PostgresConversationRepository,
    RedisConversationRepository,
    SqliteConversationRepository,
    StoreConfigError,
    open_store,
)
from dcaf_like.domain import Conversation
from dcaf_like.server.store_choice import DEFAULT_STORE, configured, with_retention
from dcaf_like.stores import redact
from dcaf_like.testing import FakeRuntime

ROOT = Path(__file__).resolve().parents[3]


def agent(**options) -> Agent:
    return Agent(runtime=FakeRuntime(), name="ops", **options)


# -- URLs ---------------------------------------------------------------------------------------------


def test_a_sqlite_url_with_three_slashes_is_relative_and_four_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()

    relative = open_store("sqlite:///data/c.db")
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db")

    assert isinstance(relative, SqliteConversationRepository)
    assert relative.path == Path("data/c.db")
    assert isinstance(absolute, SqliteConversationRepository)
    assert absolute.path == tmp_path / "abs.db"


def test_url_options_reach_the_store(redis_url):
    redis = open_store(f"{redis_url}?prefix=myapp:&ttl=3600&namespace=billing", namespace="ops")
    dynamo = open_store(
        "dynamodb://convs?region=eu-west-1&endpoint=http://127.0.0.1:9&ttl=60", namespace="ops"
    )

    assert isinstance(redis, RedisConversationRepository)
    assert (redis.prefix, redis.ttl, redis.namespace) == ("myapp:", 3600.0, "billing")
    assert isinstance(dynamo, DynamoDBConversationRepository)
    assert (dynamo.table, dynamo.ttl, dynamo.namespace) == ("convs", 60.0, "ops")
    assert dynamo.client.meta.endpoint_url == "http://127.0.0.1:9"
    redis.close()


def test_memory_url_and_a_repository_pass_through():
    given = InMemoryConversationRepository()

    assert isinstance(open_store("memory://"), InMemoryConversationRepository)
    assert open_store(given) is given


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("mysql://user:pw@db/x", "no store for 'mysql://user:***@db/x'"),
        ("postgres://user:pw@db/x?tabel=t", "'tabel' is not an option of a PostgreSQL store URL"),
        ("postgresql://user:pw@db/x?table=Robert');DROP", "table must be a lower-case SQL name"),
        ("postgresql://user:pw@db/x?pool_max=many", "pool_max must be a number, not 'many'"),
        ("sqlite://host/x.db", "sqlite:///relative/path"),
        ("sqlite:///x.db?prefix=a", "does not take prefix"),
        ("redis://:s3cret@127.0.0.1:6379/0?ttl=soon", "ttl must be seconds, not 'soon'"),
        ("memory://?ttl=-1", "ttl must be positive"),
        ("dynamodb://?region=eu-west-1", "names its table"),
        ("dynamodb://convs?region=eu-west-1&namespace=a%23b", "namespace is a non-empty name without '#'"),
    ],
)
def test_a_bad_store_url_is_a_clear_error_without_its_password(url, complaint):
    with pytest.raises(StoreConfigError) as raised:
        open_store(url)

    assert complaint in str(raised.value)
    assert "s3cret" not in str(raised.value)
    assert "pw@" not in str(raised.value)


def test_a_misspelt_postgres_option_is_named_with_the_options_taken_not_a_url_never_typed():
    typed = "postgresql://ops:s3cret@db.internal/ops?sslmdoe=require"

    with pytest.raises(StoreConfigError) as raised:
        open_store(with_retention(typed, 30))  # what `serve --store` opens: ttl added to what was typed

    assert str(raised.value) == (
        "'sslmdoe' is not an option of a PostgreSQL store URL (did you mean 'sslmode'?); the store takes "
        "namespace, ttl, audit_ttl, table, pool_min, pool_max, and libpq its connection parameters "
        "(sslmode, connect_timeout, application_name, ...: "
        "https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS)"
    )


def test_libpq_options_still_reach_the_postgres_store():
    store = open_store("postgresql://ops@db.internal/ops?sslmode=require&connect_timeout=3&table=t")

    assert isinstance(store, PostgresConversationRepository)
    assert store.table == "t"


def test_a_sqlite_url_in_a_folder_that_does_not_exist_is_refused_not_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    with pytest.raises(StoreConfigError) as raised:
        open_store("sqlite:///nonexistent/dir/x.db")

    assert str(raised.value) == (
        "the SQLite store's folder nonexistent/dir does not exist: create it (mkdir -p nonexistent/dir) "
        "or correct the path (sqlite:///relative/path.db, sqlite:////absolute/path.db)"
    )
    assert list(tmp_path.iterdir()) == []


def test_redact_hides_only_the_password():
    assert redact("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact("redis://user:pw@h/0") == "redis://user:***@h/0"
    assert redact("redis://h:1/0") == "redis://h:1/0"


def test_repr_of_a_redis_store_shows_where_not_the_password():
    store = RedisConversationRepository("redis://:hunter2@127.0.0.1:6399/3")

    assert "127.0.0.1:6399/3" in repr(store)
    assert "hunter2" not in repr(store)
    store.close()


# -- which store serve() uses ------------------------------------------------------------------------


def test_serve_keeps_conversations_in_the_embedded_sqlite_file_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DCAF_STORE", raising=False)
    given = agent()

    served, _ = configured(given, None, default=DEFAULT_STORE)
    served.get_or_create_conversation("kept")

    assert isinstance(served.repository, SqliteConversationRepository)
    assert (tmp_path / "dcaf_like.sqlite3").is_file()
    reopened = SqliteConversationRepository(tmp_path / "dcaf_like.sqlite3", namespace="ops")
    assert reopened.get("kept") is not None


def test_the_environment_variable_beats_the_default_and_code_beats_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DCAF_STORE", f"sqlite:///{tmp_path}/from-env.db")
    chosen = InMemoryConversationRepository()

    defaulted, _ = configured(agent(), None, default=DEFAULT_STORE)
    explicit, _ = configured(agent(repository=chosen), None, default=DEFAULT_STORE)

    assert isinstance(defaulted.repository, SqliteConversationRepository)
    assert defaulted.repository.path == tmp_path / "from-env.db"
    assert explicit.repository is chosen


def test_a_store_given_to_serve_beats_everything(tmp_path, monkeypatch):
    monkeypatch.setenv("DCAF_STORE", f"sqlite:///{tmp_path}/from-env.db")
    served, described = configured(
        agent(repository=InMemoryConversationRepository()),
        f"sqlite:///{tmp_path}/given.db",
        default=DEFAULT_STORE,
    )

    assert isinstance(served.repository, SqliteConversationRepository)
    assert served.repository.path == tmp_path / "given.db"
    assert described == f"sqlite:///{tmp_path}/given.db"


def test_create_app_leaves_the_in_memory_store_alone_without_a_store_or_environment(monkeypatch):
    monkeypatch.delenv("DCAF_STORE", raising=False)
    given = agent()

    served, described = configured(given, None, default=None)

    assert served.repository is given.repository
    assert described is None


def test_a_function_agent_takes_no_store():
    def echo(messages, context):
        return "hi"

    with pytest.raises(TypeError, match="keeps no conversations"):
        configured(FunctionAgent(echo), "memory://", default=None)
    served, described = configured(FunctionAgent(echo), None, default=DEFAULT_STORE)
    assert served.repository is None
    assert described is None


def test_an_agent_store_url_is_namespaced_by_the_agents_name(tmp_path):
    url = f"sqlite:///{tmp_path}/shared.db"
    ops = Agent(runtime=FakeRuntime(), name="ops", repository=url)
    billing = Agent(runtime=FakeRuntime(), name="billing", repository=url)

    ops.get_or_create_conversation("c1")

    assert ops.conversation_ids() == ["c1"]
    assert billing.conversation_ids() == []
    assert billing.conversation("c1") is None
    assert ops.delete_conversation("c1") is True
    assert ops.conversation_ids() == []


def test_the_cli_refuses_a_bad_store_with_a_message():
    command = str(Path(sys.executable).parent / "dcaf-like")

    result = subprocess.run(
        [command, "serve", "examples/triage_function.py:triage", "--store", "sqlite:///x.db"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 2
    assert "keeps no conversations" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_agent_given_to_the_server_is_left_as_it_is(tmp_path, monkeypatch):
    """docs/stores.md, "Choosing a store" (ADR 40): the server serves the agent ``configured`` builds
    on the chosen store and tracer; the one it was given keeps its own store and conversations."""
    given = agent()
    before = given.repository
    given.get_or_create_conversation("before")
    wrapped: list[object] = []

    def tracer(inner):
        wrapped.append(inner)
        return inner

    served, _ = configured(given, f"sqlite:///{tmp_path}/given.db", default=None, tracer=tracer)

    assert given.repository is before
    assert given.conversation("before") is not None
    assert served is not given
    assert isinstance(served.repository, SqliteConversationRepository)
    assert served.conversation("before") is None
    assert len(wrapped) == 1
    served.get_or_create_conversation("served")
    assert before.get("served") is None


# -- retention -----------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def saved(store, conversation_id: str) -> Conversation:
    conversation = Conversation.start(conversation_id)
    conversation.add_user_message("hi")
    store.save(conversation, 0)
    return conversation


def test_sqlite_forgets_conversations_idle_longer_than_the_ttl(tmp_path):
    clock = Clock()
    store = SqliteConversationRepository(tmp_path / "c.db", ttl=60, clock=clock)
    saved(store, "old")
    clock.now += 30
    saved(store, "young")
    clock.now += 45  # "old" is 75 s idle, "young" 45 s

    assert store.get("old") is None
    assert store.list_ids() == ["young"]
    saved(store, "old")  # an expired id may start afresh
    assert store.get("old") is not None


def test_dynamodb_treats_items_past_their_ttl_as_gone(dynamodb_endpoint):
    clock = Clock()
    store = DynamoDBConversationRepository(
        "ttl-table", region="eu-west-1", endpoint_url=dynamodb_endpoint, ttl=60, clock=clock
    )
    store.create_table()
    saved(store, "old")
    clock.now += 61

    assert store.get("old") is None
    assert store.list_ids() == []
    saved(store, "old")
    assert store.get("old") is not None


def test_redis_sets_the_ttl_on_each_save(redis_url, redis_prefix):
    import redis

    store = RedisConversationRepository(redis_url, prefix=redis_prefix, ttl=120)
    saved(store, "c1")
    client = redis.Redis.from_url(redis_url)

    remaining = client.pttl(f"{redis_prefix}{{default}}:c:c1")

    assert 0 < remaining <= 120_000
    assert 0 < client.pttl(f"{redis_prefix}{{default}}:index") <= 120_000
    client.close()
    store.close()


# -- retention ---------------------------------------------------------------------------------------


def test_serve_keeps_conversations_30_days_unless_the_url_or_the_caller_says_otherwise(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DCAF_STORE", raising=False)
    default, _ = configured(agent(), None, default=DEFAULT_STORE, retention_days=30)
    own_ttl, _ = configured(agent(), "sqlite:///c.db?ttl=60", default=None, retention_days=30)
    forever, _ = configured(agent(), "sqlite:///c.db", default=None, retention_days=None)
    memory, _ = configured(agent(), "memory://", default=None, retention_days=30)

    assert default.repository.ttl == 30 * 86_400
    assert own_ttl.repository.ttl == 60
    assert forever.repository.ttl is None
    assert isinstance(memory.repository, InMemoryConversationRepository)


def test_a_repository_chosen_in_code_keeps_its_own_retention(tmp_path):
    mine = SqliteConversationRepository(tmp_path / "c.db")
    chosen, _ = configured(agent(repository=mine), None, default=DEFAULT_STORE, retention_days=30)

    assert chosen.repository is mine
    assert mine.ttl is None


def test_retention_is_added_to_a_url_without_changing_the_rest_of_it():
    from dcaf_like.server.store_choice import with_retention

    assert with_retention("sqlite:////var/lib/c.db", 30) == "sqlite:////var/lib/c.db?ttl=2592000"
    assert with_retention("sqlite:///c.db?namespace=ops", 0.5) == "sqlite:///c.db?namespace=ops&ttl=43200"
    assert with_retention("redis://:pw@h:6379/0?ttl=60", 30) == "redis://:pw@h:6379/0?ttl=60"
    assert with_retention("memory://", 30) == "memory://"
    assert with_retention("sqlite:///c.db", 0) == "sqlite:///c.db"
