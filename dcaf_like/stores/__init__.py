"""Conversation stores, and how a store named by a URL is opened.

========================================  ====================================================
URL                                       store
========================================  ====================================================
``memory://``                             InMemoryConversationRepository (forgets on exit)
``sqlite:///relative/path.db``            SqliteConversationRepository (three slashes: relative)
``sqlite:////absolute/path.db``           (four slashes: absolute)
``redis://[:password@]host:port/db``      RedisConversationRepository (also ``rediss://``)
``dynamodb://table?region=eu-west-1``     DynamoDBConversationRepository
``postgresql://user:pw@host:5432/db``     PostgresConversationRepository (also ``postgres://``)
========================================  ====================================================

A SQLite URL's folder must exist (a mistyped path is refused, not served from a new, empty file); the
file is created in it. Query options every store takes: ``namespace`` (defaults to the agent's name),
``ttl`` (seconds) and ``audit_ttl`` (seconds a decision record is kept; none: for good).
Redis also takes ``prefix``; DynamoDB ``region``, ``endpoint`` and ``create=1`` (create the table);
PostgreSQL ``table``, ``pool_min`` and ``pool_max``, and libpq's own parameters (``sslmode``, ...).
The SQLite, Redis, DynamoDB and PostgreSQL classes are imported from here lazily, with their client
libraries.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from dcaf_like.application.ports import ConversationRepository, ConversationStore
from dcaf_like.extras import install
from dcaf_like.stores.memory import InMemoryConversationRepository

if TYPE_CHECKING:
    from dcaf_like.stores.dynamodb import DynamoDBConversationRepository
    from dcaf_like.stores.postgres import PostgresConversationRepository
    from dcaf_like.stores.redis import RedisConversationRepository
    from dcaf_like.stores.sqlite import SqliteConversationRepository

ENV_VAR = "DCAF_STORE"
DEFAULT_SQLITE_PATH = "dcaf_like.sqlite3"

StoreT = TypeVar("StoreT", bound=ConversationStore)

__all__ = [
    "DEFAULT_SQLITE_PATH",
    "ENV_VAR",
    "DynamoDBConversationRepository",
    "InMemoryConversationRepository",
    "PostgresConversationRepository",
    "RedisConversationRepository",
    "SqliteConversationRepository",
    "StoreConfigError",
    "open_store",
    "redact",
]


class StoreConfigError(ValueError):
    """A store URL that names no store, or options a store does not take."""


@overload
def open_store(store: str, *, namespace: str = "default") -> ConversationRepository: ...
@overload
def open_store(store: StoreT, *, namespace: str = "default") -> StoreT: ...


def open_store(store: str | ConversationStore, *, namespace: str = "default") -> ConversationStore:
    """A store as is (a :class:`~dcaf_like.application.ports.ConversationStore`); a URL opened as the
    store it names (see the module's table)."""
    if isinstance(store, ConversationStore):
        return store
    if not isinstance(store, str):
        raise TypeError(f"a store is a ConversationRepository or a URL, not {type(store).__name__}")
    parts = urlsplit(store)
    options = dict(parse_qsl(parts.query))
    url = _StoreUrl(
        store,
        parts,
        options,
        namespace=options.pop("namespace", namespace),
        ttl=_ttl(options.pop("ttl", None), store),
        audit_ttl=_ttl(options.pop("audit_ttl", None), store),
    )
    found = _SCHEMES.get(parts.scheme.lower())
    if found is None:
        raise StoreConfigError(
            f"no store for {redact(store)!r}: use memory://, sqlite:///PATH, redis://HOST:PORT/DB, "
            "dynamodb://TABLE?region=REGION or postgresql://USER@HOST:PORT/DB"
        )
    extra, opener = found
    try:
        return opener(url)
    except StoreConfigError:
        raise
    except ImportError as exc:
        raise StoreConfigError(_missing(extra, exc)) from exc
    except (TypeError, ValueError) as exc:  # what the store's constructor refused
        raise StoreConfigError(f"store {redact(store)!r}: {exc}") from exc


@dataclass
class _StoreUrl:
    """A store URL taken apart: the options every store takes, and those left for the store's own."""

    text: str
    parts: SplitResult
    options: dict[str, str]
    namespace: str
    ttl: float | None
    audit_ttl: float | None

    def no_more(self) -> None:
        """Refuse the options left: the store takes none of them."""
        if self.options:
            raise StoreConfigError(
                f"store {redact(self.text)!r} does not take {', '.join(sorted(self.options))}"
            )

    def without_options(self) -> str:
        """The URL with only the options left, for a client library that reads its own from it."""
        return urlunsplit(self.parts._replace(query=urlencode(self.options)))


def _memory(url: _StoreUrl) -> ConversationRepository:
    url.no_more()
    return InMemoryConversationRepository(audit_ttl=url.audit_ttl)


def _sqlite(url: _StoreUrl) -> ConversationRepository:
    from dcaf_like.stores.sqlite import SqliteConversationRepository

    path = url.parts.path[1:] if url.parts.path.startswith("/") else url.parts.path
    if url.parts.netloc or not path:
        raise StoreConfigError(
            f"a sqlite URL is sqlite:///relative/path or sqlite:////absolute/path, not {redact(url.text)!r}"
        )
    url.no_more()
    folder = Path(path).expanduser().parent
    if not folder.exists():  # a typo in a path would otherwise serve from a new, empty store
        raise StoreConfigError(
            f"the SQLite store's folder {folder} does not exist: create it (mkdir -p {folder}) or correct "
            "the path (sqlite:///relative/path.db, sqlite:////absolute/path.db)"
        )
    return SqliteConversationRepository(path, namespace=url.namespace, ttl=url.ttl, audit_ttl=url.audit_ttl)


def _redis(url: _StoreUrl) -> ConversationRepository:
    """The Redis store; query options that are not ours go to redis-py."""
    prefix = url.options.pop("prefix", "dcaf:")
    from dcaf_like.stores.redis import RedisConversationRepository

    redis_url = url.without_options()
    _check_redis_options(redis_url, url.text)
    return RedisConversationRepository(
        redis_url, prefix=prefix, namespace=url.namespace, ttl=url.ttl, audit_ttl=url.audit_ttl
    )


def _dynamodb(url: _StoreUrl) -> ConversationRepository:
    table = url.parts.netloc or url.parts.path.strip("/")
    if not table:
        raise StoreConfigError(
            f"a dynamodb URL names its table: dynamodb://TABLE?region=..., not {url.text!r}"
        )
    region = url.options.pop("region", None)
    endpoint = url.options.pop("endpoint", None)
    create = url.options.pop("create", "0").lower() in ("1", "true", "yes")
    url.no_more()
    from botocore.exceptions import NoRegionError

    from dcaf_like.stores.dynamodb import DynamoDBConversationRepository

    try:
        repository = DynamoDBConversationRepository(
            table,
            region=region,
            endpoint_url=endpoint,
            namespace=url.namespace,
            ttl=url.ttl,
            audit_ttl=url.audit_ttl,
        )
    except NoRegionError:
        raise StoreConfigError(
            f"store {redact(url.text)!r} names no AWS region: add ?region=REGION to the URL "
            "(dynamodb://TABLE?region=eu-west-1) or set AWS_REGION"
        ) from None
    if create:
        repository.create_table()
    return repository


def _postgres(url: _StoreUrl) -> ConversationRepository:
    """The PostgreSQL store; query options that are not ours go to libpq, which refuses unknown ones."""
    table = url.options.pop("table", "dcaf_conversations")
    pool_min = _count(url.options.pop("pool_min", "1"), "pool_min", url.text)
    pool_max = _count(url.options.pop("pool_max", "10"), "pool_max", url.text)
    from dcaf_like.stores.postgres import PostgresConversationRepository, libpq_parameters

    libpq = libpq_parameters()
    if unknown := sorted(set(url.options) - set(libpq)):
        # Not the URL: `serve` adds ttl to the one typed, and the option alone says what to fix.
        ours = ("namespace", "ttl", "audit_ttl", "table", "pool_min", "pool_max")
        guess = _did_you_mean(unknown[0], [*ours, *libpq])
        raise StoreConfigError(
            f"{unknown[0]!r} is not an option of a PostgreSQL store URL{guess}; "
            f"the store takes {', '.join(ours)}, and libpq its connection parameters (sslmode, "
            "connect_timeout, application_name, ...: "
            "https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS)"
        )

    return PostgresConversationRepository(
        url.without_options(),
        table=table,
        namespace=url.namespace,
        ttl=url.ttl,
        audit_ttl=url.audit_ttl,
        pool_min=pool_min,
        pool_max=pool_max,
    )


# URL scheme: the extra to install for its client library (named when it is missing), and its opener.
_SCHEMES: dict[str, tuple[str, Callable[[_StoreUrl], ConversationRepository]]] = {
    "memory": ("", _memory),
    "sqlite": ("", _sqlite),
    "redis": ("redis", _redis),
    "rediss": ("redis", _redis),
    "unix": ("redis", _redis),
    "dynamodb": ("dynamodb", _dynamodb),
    "postgres": ("postgres", _postgres),
    "postgresql": ("postgres", _postgres),
}


def store_from_environment() -> str | None:
    """The store URL in ``DCAF_STORE``, if set."""
    return os.environ.get(ENV_VAR) or None


def redact(url: str) -> str:
    """`url` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))


def _ttl(value: str | None, store: str) -> float | None:
    if value is None:
        return None
    try:
        ttl = float(value)
    except ValueError:
        raise StoreConfigError(f"store {redact(store)!r}: ttl must be seconds, not {value!r}") from None
    if ttl <= 0:
        raise StoreConfigError(f"store {redact(store)!r}: ttl must be positive, not {value!r}")
    return ttl


def _count(value: str, option: str, store: str) -> int:
    if not value.isdigit():
        raise StoreConfigError(f"store {redact(store)!r}: {option} must be a number, not {value!r}")
    return int(value)


def _check_redis_options(redis_url: str, store: str) -> None:
    """Refuse now an option redis-py would only refuse on its first connection, mid-request.

    redis-py hands every query option it does not parse to its connection class, which raises a
    TypeError when the first connection is made; making one here (it does not connect) finds it."""
    import redis

    pool = redis.ConnectionPool.from_url(redis_url)
    try:
        pool.make_connection()
    except TypeError as exc:
        named = re.search(r"keyword argument '(\w+)'", str(exc))
        option = repr(named.group(1)) if named else "an option"
        raise StoreConfigError(
            f"{option} is not an option of a Redis store URL or of redis-py; this store takes namespace, "
            "ttl, audit_ttl and prefix, and redis-py its connection options (socket_timeout, "
            "health_check_interval, ...): check the spelling"
        ) from None
    finally:
        pool.disconnect()


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _missing(extra: str, exc: ImportError) -> str:
    return f"this store needs {exc.name or 'its client library'}: {install(extra)}"


# The classes of the stores with a client library, imported when first named.
_LAZY = {
    "SqliteConversationRepository": "dcaf_like.stores.sqlite",
    "RedisConversationRepository": "dcaf_like.stores.redis",
    "DynamoDBConversationRepository": "dcaf_like.stores.dynamodb",
    "PostgresConversationRepository": "dcaf_like.stores.postgres",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
