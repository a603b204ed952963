"""RedisConversationRepository: conversations in Redis, shared by every worker and host.

Layout (``{ns}`` is a Redis Cluster hash tag, so a conversation and its index live in one slot):

- ``<prefix>{<namespace>}:c:<id>``: a hash with ``version`` and ``body`` (the conversation's JSON);
- ``<prefix>{<namespace>}:index``: a sorted set of ids scored by the time of their last save.
- ``<prefix>{<namespace>}:cancel:<id>``: when a cancel of the conversation's turn was last asked for
  (kept an hour: a turn that runs longer than that cannot be cancelled by then).

A save is one Lua script (compare the version, write, index, expire): atomic in Redis, one round trip.
A turn costs two round trips: the read and the save (an approval adds the save that claims it).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dcaf_like.adapters.serialization import decode, encode
from dcaf_like.application.errors import ConcurrencyConflict, StoreUnavailable
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.domain import Conversation

if TYPE_CHECKING:
    import redis
    import redis.asyncio

# KEYS: conversation hash, index. ARGV: expected version, new version, body, now (s), id, ttl (ms, 0 = none).
# Returns -1 when written, else the stored version (0 when there is none).
_SAVE = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then
  return current
end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'body', ARGV[3])
local ttl = tonumber(ARGV[6])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tonumber(ARGV[4]) - ttl / 1000))
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return -1
"""

DEFAULT_URL = "redis://127.0.0.1:6379/0"


# Seconds a cancel request is kept: long enough for any turn it may be meant for.
CANCEL_KEPT = 3600


class RedisConversationRepository(ConversationRepository):
    """Conversations in Redis at `url` (or through the clients given), under `prefix` and `namespace`.

    With `ttl` (seconds) Redis forgets a conversation that long after its last save.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefix: str = "dcaf:",
        namespace: str = "default",
        ttl: float | None = None,
        client: redis.Redis | None = None,
        async_client: redis.asyncio.Redis | None = None,
        socket_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be a positive number of seconds, or None to keep conversations")
        import redis as redis_sync
        import redis.asyncio as redis_async

        self.prefix = prefix
        self.namespace = namespace
        self.ttl = ttl
        self.clock = clock
        self._url = url
        self._socket_timeout = socket_timeout
        self._sync = client or redis_sync.Redis.from_url(
            url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
        )
        self._given_async = async_client
        self._async_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._redis_async = redis_async
        self._save_script = self._sync.register_script(_SAVE)
        self._errors: tuple[type[BaseException], ...] = (redis_sync.RedisError,)
        self.where = _where(self._sync)

    # -- keys -------------------------------------------------------------------------------------

    def _key(self, conversation_id: str) -> str:
        return f"{self.prefix}{{{self.namespace}}}:c:{conversation_id}"

    def _cancel_key(self, conversation_id: str) -> str:
        return f"{self.prefix}{{{self.namespace}}}:cancel:{conversation_id}"

    @property
    def _index(self) -> str:
        return f"{self.prefix}{{{self.namespace}}}:index"

    def _save_args(self, conversation: Conversation, expected_version: int) -> list[Any]:
        ttl_ms = 0 if self.ttl is None else int(self.ttl * 1000)
        return [
            expected_version,
            conversation.version,
            encode(conversation),
            repr(self.clock()),
            conversation.id,
            ttl_ms,
        ]

    # -- sync -------------------------------------------------------------------------------------

    def get(self, conversation_id: str) -> Conversation | None:
        try:
            body = self._sync.hget(self._key(conversation_id), "body")
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return None if body is None else decode(body, conversation_id)

    def save(self, conversation: Conversation, expected_version: int) -> None:
        args = self._save_args(conversation, expected_version)
        try:
            outcome = self._save_script(keys=[self._key(conversation.id), self._index], args=args)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        self._check(conversation, expected_version, outcome)

    def delete(self, conversation_id: str) -> bool:
        try:
            pipe = self._sync.pipeline(transaction=True)
            pipe.delete(self._key(conversation_id))
            pipe.zrem(self._index, conversation_id)
            deleted, _ = pipe.execute()
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return bool(deleted)

    def list_ids(self, limit: int = 100) -> list[str]:
        try:
            ids = self._sync.zrevrangebyscore(self._index, "+inf", self._oldest_kept(), start=0, num=limit)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]

    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        try:
            self._sync.set(self._cancel_key(conversation_id), repr(at), ex=CANCEL_KEPT)
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        try:
            at = self._sync.get(self._cancel_key(conversation_id))
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return at is not None and float(at) >= since

    # -- asyncio ----------------------------------------------------------------------------------

    def _async(self) -> tuple[Any, Any]:
        """The asyncio client of the running loop and its save script (redis.asyncio connections
        belong to the loop that opened them)."""
        loop = asyncio.get_running_loop()
        found = self._async_by_loop.get(loop)
        if found is None:
            client = self._given_async or self._redis_async.Redis.from_url(
                self._url, socket_timeout=self._socket_timeout, socket_connect_timeout=self._socket_timeout
            )
            # evalsha, loading the script first on NOSCRIPT (after a Redis restart or flush).
            found = (client, client.register_script(_SAVE))
            self._async_by_loop[loop] = found
        return found

    async def aget(self, conversation_id: str) -> Conversation | None:
        try:
            client, _ = self._async()
            body = await client.hget(self._key(conversation_id), "body")
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return None if body is None else decode(body, conversation_id)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        args = self._save_args(conversation, expected_version)
        _, script = self._async()
        try:
            outcome = await script(keys=[self._key(conversation.id), self._index], args=args)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        self._check(conversation, expected_version, outcome)

    async def arequest_cancel(self, conversation_id: str, *, at: float) -> None:
        try:
            client, _ = self._async()
            await client.set(self._cancel_key(conversation_id), repr(at), ex=CANCEL_KEPT)
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    async def acancel_requested(self, conversation_id: str, *, since: float) -> bool:
        try:
            client, _ = self._async()
            at = await client.get(self._cancel_key(conversation_id))
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return at is not None and float(at) >= since

    async def aclose(self) -> None:
        """Close the asyncio client of the running loop (a server does this at shutdown)."""
        found = self._async_by_loop.pop(asyncio.get_running_loop(), None)
        if found is not None and self._given_async is None:
            await found[0].aclose()

    def close(self) -> None:
        self._sync.close()

    # -- shared -----------------------------------------------------------------------------------

    def _oldest_kept(self) -> float | str:
        return "-inf" if self.ttl is None else self.clock() - self.ttl

    def _check(self, conversation: Conversation, expected_version: int, outcome: Any) -> None:
        stored = int(outcome)
        if stored != -1:
            raise ConcurrencyConflict(conversation.id, expected_version, stored or None)

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"redis store at {self.where}: {type(exc).__name__}: {exc}")

    def __repr__(self) -> str:
        return (
            f"RedisConversationRepository({self.where!r}, prefix={self.prefix!r}, "
            f"namespace={self.namespace!r})"
        )


def _where(client: Any) -> str:
    """host:port/db of a client, never its credentials."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
