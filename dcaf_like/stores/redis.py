"""RedisConversationRepository: conversations in Redis, shared by every worker and host.

Layout (``{ns}`` is a Redis Cluster hash tag, so a conversation and its index live in one slot):

- ``<prefix>{<namespace>}:c:<id>``: a hash with ``version`` and ``body`` (the conversation's header:
  its JSON but its messages and calls, which it counts; ADR 16), and ``waiting_until``;
- ``<prefix>{<namespace>}:m:<id>`` and ``<prefix>{<namespace>}:t:<id>``: lists of its messages and of
  its tool calls (JSON), in order; a save replaces the tail of messages from the first that changed
  and the calls that changed, so it writes what the turn changed, not the whole conversation;
- ``<prefix>{<namespace>}:index``: a sorted set of ids scored by the time of their last save;
- ``<prefix>{<namespace>}:owner:<owner>``: the same for one owner's conversations (the hash keeps
  ``owner``), kept when ``<prefix>{<namespace>}:owners`` exists: set by the save that made the index,
  so a namespace an earlier version started lists everyone's for an owner (and the list checks each);
- ``<prefix>{<namespace>}:audit`` and ``<prefix>{<namespace>}:audit:c:<id>``: the audit trail, of the
  namespace and of one conversation: sorted sets of decision records (JSON) scored by their time,
  appended by the save that carries them (in its script) and never deleted with the conversation;
- ``<prefix>{<namespace>}:audit:chain``, ``:audit:head`` and ``:audit:digests``: the chain over the
  trail (ADR 34): its records in the order appended (a list), its head (a hash: seq, hash), and the
  signed digests by number (a hash);
- ``<prefix>{<namespace>}:waiting``: the inbox's index (docs/approvals.md, "One inbox"), a hash from
  the id of each conversation with calls waiting for approval to their entries (JSON), set by the
  save that changed them; whole when ``<prefix>{<namespace>}:waiting:whole`` exists (set with the
  ``owners`` mark): a namespace an earlier version started gets it filled from its conversations at
  the first inbox read, then marked;
- ``<prefix>{<namespace>}:cancel:<id>``: when a cancel of the conversation's turn was last asked for
  (kept an hour: a turn that runs longer than that cannot be cancelled by then).

A save is one Lua script (compare the version, write, index, expire): atomic in Redis, one round trip;
so is a read (a script reading the three keys). A turn costs two round trips: the read and the save (an
approval adds the save that claims it). A hash whose body is a whole conversation (format 1, written
before headers) is read as such, and written as a header and lists by its next save.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from dcaf_like.application.errors import ConcurrencyConflict, StoreUnavailable
from dcaf_like.application.ports import ConversationRepository, GrantStore, Position
from dcaf_like.application.retention import kept_until, waiting_until
from dcaf_like.application.waiting import WaitingEntry, decode_entries, index_changes
from dcaf_like.concurrency.bridges import PerLoop
from dcaf_like.domain import Conversation, DecisionRecord
from dcaf_like.domain.grant import Grant
from dcaf_like.domain.trail import AuditDigest, ChainHead, Trail
from dcaf_like.stores._codec import changes, decode_parts
from dcaf_like.stores._shared import CANCEL_KEPT, ClientErrors, check_retention, entries_to_fill

if TYPE_CHECKING:
    import redis
    import redis.asyncio

# KEYS: conversation hash, index, its messages list, its calls list, the waiting hash, its owner's sorted
# set, the namespace's `owners` and `waiting:whole` marks (set when the index is first made). ARGV: expected
# version, new version, header, now (s), id, ttl (ms, 0 = none), the conversation's own expiry (ms from now:
# the ttl, or longer while an approval window is open), waiting_until (s, '' = nothing waits), '1' to write
# it whole (drop the lists first), the index of the first message written, their count n, the n messages,
# the count k of calls written, then k pairs (position, call), then the inbox's entries: 's' and the JSON to
# set them (KEYS[5], the waiting hash, field id), 'd' and '' to drop them, '-' and '' to leave them; then
# its owner ('' = nobody's). Returns -1 when written, else the stored version (0: none). Messages from the
# first written replace the list's tail; a call replaces the one at its position, or is appended (ADR 16).
#: The save script's own keys; the audited save's come after them.
_SAVE_KEYS = 8
_SAVE = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then
  return current
end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'body', ARGV[3])
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'waiting_until', ARGV[8])
elseif current ~= 0 then
  redis.call('HDEL', KEYS[1], 'waiting_until')
end
local whole = ARGV[9] == '1'
if whole then
  redis.call('DEL', KEYS[3], KEYS[4])
end
local first = tonumber(ARGV[10])
local n = tonumber(ARGV[11])
if n > 0 then
  if first == 0 then
    if not whole then
      redis.call('DEL', KEYS[3])
    end
  else
    redis.call('LTRIM', KEYS[3], 0, first - 1)
  end
  for i = 12, 11 + n, 1000 do
    redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, 11 + n)))
  end
end
local k = tonumber(ARGV[12 + n])
local length = 0
if k > 0 then
  length = redis.call('LLEN', KEYS[4])
end
for i = 13 + n, 12 + n + 2 * k, 2 do
  if tonumber(ARGV[i]) < length then
    redis.call('LSET', KEYS[4], ARGV[i], ARGV[i + 1])
  else
    redis.call('RPUSH', KEYS[4], ARGV[i + 1])
    length = length + 1
  end
end
local w = 13 + n + 2 * k
if ARGV[w] == 's' then
  redis.call('HSET', KEYS[5], ARGV[5], ARGV[w + 1])
elseif ARGV[w] == 'd' then
  redis.call('HDEL', KEYS[5], ARGV[5])
end
local ttl = tonumber(ARGV[6])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
  redis.call('PEXPIRE', KEYS[4], ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tonumber(ARGV[4]) - ttl / 1000))
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[7], '1')
  redis.call('SET', KEYS[8], '1')
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
if ARGV[w + 2] ~= '' then
  redis.call('HSET', KEYS[1], 'owner', ARGV[w + 2])
  redis.call('ZADD', KEYS[6], ARGV[4], ARGV[5])
  if ttl > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. (tonumber(ARGV[4]) - ttl / 1000))
    redis.call('PEXPIRE', KEYS[6], ttl)
  end
end
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return -1
"""

# KEYS: a conversation's hash, the waiting hash. ARGV: the version read, its id, its entries. The fill of
# a namespace an earlier version started: the entries are set only if the conversation is still at the
# version they were read from, so a fill never overwrites the entries of a save made since.
_FILL = """
if redis.call('HGET', KEYS[1], 'version') == ARGV[1] then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
return 0
"""

# KEYS: the conversation's hash, messages list, calls list. One snapshot of the three, one round trip.
_READ = """
return {redis.call('HGET', KEYS[1], 'body'), redis.call('LRANGE', KEYS[2], 0, -1),
        redis.call('LRANGE', KEYS[3], 0, -1)}
"""

# The same from the window the header's last save recorded on (ADR 22): the header ends with it,
# ``"window":[message,call]}``, when a windowed read leaves something out.
_READ_RECENT = """
local header = redis.call('HGET', KEYS[1], 'body')
local first, first_call = 0, 0
if header then
  local m, c = string.match(header, '"window":%[(%d+),(%d+)%]}$')
  if m then
    first, first_call = tonumber(m), tonumber(c)
  end
end
return {header, redis.call('LRANGE', KEYS[2], first, -1), redis.call('LRANGE', KEYS[3], first_call, -1)}
"""

# KEYS: index, then the hash, messages, calls and owner's sorted set of each id of ARGV[4..]. ARGV:
# oldest save kept (s), now (s), '1' for a dry run, then ids. Forgets each conversation last saved
# before ARGV[1] whose approval window has closed (a save since moved its score, so it is kept); drops
# index entries whose hash Redis already expired. Returns how many conversations were (with a dry
# run, would be) forgotten.
_PRUNE = """
local gone = 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local key = KEYS[4 * i - 14]
  local score = tonumber(redis.call('ZSCORE', KEYS[1], id))
  if score and score < tonumber(ARGV[1]) then
    if redis.call('EXISTS', key) == 0 then
      if ARGV[3] ~= '1' then redis.call('ZREM', KEYS[1], id) end
    elseif tonumber(redis.call('HGET', key, 'waiting_until') or '0') < tonumber(ARGV[2]) then
      gone = gone + 1
      if ARGV[3] ~= '1' then
        redis.call('DEL', key, KEYS[4 * i - 13], KEYS[4 * i - 12])
        redis.call('ZREM', KEYS[1], id)
        redis.call('ZREM', KEYS[4 * i - 11], id)
      end
    end
  end
end
return gone
"""

_PRUNE_BATCH = 200
# The save that carries decisions: the same compare-and-set, and, once written, the records appended
# to the two audit sets and to the chain (ADR 34). Its own arguments come last (KEYS: the chain's head
# and list, the namespace's and the conversation's audit sets; ARGV: the head the records were linked
# after (seq, hash) and the head after them, audit ttl in ms (0 = none), now, then score and record for
# each, then their count), so it reads them from the end whatever the save script takes before them.
# It first checks that the chain's head is still the one the records were linked after: if another
# worker moved it, nothing is written and it returns STALE_HEAD (the caller links them again).
_HEAD_CHECK = """
local chain_first = #ARGV - 2 * tonumber(ARGV[#ARGV])
local chain_head = redis.call('HMGET', KEYS[#KEYS - 3], 'seq', 'hash')
if (chain_head[1] or '0') ~= ARGV[chain_first - 6] or (chain_head[2] or '') ~= ARGV[chain_first - 5] then
  return -2
end
"""
STALE_HEAD = -2
_AUDIT = """
local n = tonumber(ARGV[#ARGV])
local first = #ARGV - 2 * n
local ttl = tonumber(ARGV[first - 2])
local now = tonumber(ARGV[first - 1])
for _, key in ipairs({KEYS[#KEYS - 1], KEYS[#KEYS]}) do
  for i = first, #ARGV - 1, 2 do
    redis.call('ZADD', key, ARGV[i], ARGV[i + 1])
  end
  if ttl > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (now - ttl / 1000))
    redis.call('PEXPIRE', key, ttl)
  end
end
local chain = KEYS[#KEYS - 2]
for i = first, #ARGV - 1, 2 do
  redis.call('RPUSH', chain, ARGV[i + 1])
end
redis.call('HSET', KEYS[#KEYS - 3], 'seq', ARGV[first - 4], 'hash', ARGV[first - 3])
if ttl > 0 then
  local cutoff = now - ttl / 1000
  while true do
    local oldest = redis.call('LINDEX', chain, 0)
    if not oldest or cjson.decode(oldest).at >= cutoff then break end
    redis.call('LPOP', chain)
  end
end
"""
if not _SAVE.rstrip().endswith("return -1"):  # the audited save is the save with the audit before its end
    raise RuntimeError("redis_store: _SAVE must end with 'return -1' for _SAVE_AUDITED to extend it")
_SAVE_AUDITED = _HEAD_CHECK + _SAVE.rstrip()[: -len("return -1")] + _AUDIT + "return -1\n"
_APPEND = _HEAD_CHECK + _AUDIT + "return n\n"
# KEYS: the chain's head, the digests. The head (seq, hash) and the digest numbered their count.
_TIP = """
return {redis.call('HMGET', KEYS[1], 'seq', 'hash'), redis.call('HGET', KEYS[2], redis.call('HLEN', KEYS[2]))}
"""

DEFAULT_URL = "redis://127.0.0.1:6379/0"


class RedisConversationRepository(ConversationRepository, GrantStore):
    """Conversations in Redis at `url` (or through the clients given), under `prefix` and `namespace`.

    With `ttl` (seconds) Redis forgets a conversation that long after its last save; with `audit_ttl`
    a decision record that long after it was made.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefix: str = "dcaf:",
        namespace: str = "default",
        ttl: float | None = None,
        audit_ttl: float | None = None,
        client: redis.Redis | None = None,
        async_client: redis.asyncio.Redis | None = None,
        socket_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_retention(ttl, audit_ttl)
        import redis as redis_sync
        import redis.asyncio as redis_async

        self.prefix = prefix
        self.namespace = namespace
        self.ttl = ttl
        self.audit_ttl = audit_ttl
        self.clock = clock
        self._url = url
        self._socket_timeout = socket_timeout
        self._sync = client or redis_sync.Redis.from_url(
            url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
        )
        self._given_async = async_client
        #: The asyncio client of each event loop and its scripts, closed with its loop.
        self._async_clients: PerLoop[tuple[Any, ...]] = PerLoop(self._close_client)
        self._redis_async = redis_async
        self._save_script = self._sync.register_script(_SAVE)
        self._read_script = self._sync.register_script(_READ)
        self._read_recent_script = self._sync.register_script(_READ_RECENT)
        self._prune_script = self._sync.register_script(_PRUNE)
        self._audited_script = self._sync.register_script(_SAVE_AUDITED)
        self._append_script = self._sync.register_script(_APPEND)
        self._tip_script = self._sync.register_script(_TIP)
        self._fill_script = self._sync.register_script(_FILL)
        #: The chain's head as this repository last saw it: a hint (a write checks it in its script).
        self._head: ChainHead | None = None
        self._owners_seen = False  # the namespace keeps owners' sorted sets (its mark found once)
        self._waiting_seen = False  # the namespace's inbox index is whole (its mark found once)
        self.where = _where(self._sync)
        self._failures = ClientErrors((redis_sync.RedisError,), f"redis store at {self.where}")

    # -- keys -------------------------------------------------------------------------------------

    def _parts(self, conversation_id: str) -> list[str]:
        """The keys of a conversation: its hash, its messages list, its calls list."""
        tagged = f"{self.prefix}{{{self.namespace}}}"
        return [
            f"{tagged}:c:{conversation_id}",
            f"{tagged}:m:{conversation_id}",
            f"{tagged}:t:{conversation_id}",
        ]

    def _cancel_key(self, conversation_id: str) -> str:
        return f"{self.prefix}{{{self.namespace}}}:cancel:{conversation_id}"

    @property
    def _waiting(self) -> str:
        return f"{self.prefix}{{{self.namespace}}}:waiting"

    @property
    def _waiting_whole(self) -> str:
        """Set with the `owners` mark, or once the inbox's index of a namespace an earlier version
        started is filled: every conversation's waiting calls are in it."""
        return f"{self.prefix}{{{self.namespace}}}:waiting:whole"

    def _fill_waiting(self) -> None:
        """Fill the inbox's index from the namespace's conversations unless its mark says it is whole,
        then set the mark: once per namespace (each entry written only if its conversation is still at
        the version read, so workers filling at once, or saving meanwhile, leave the newest entries)."""
        if self._waiting_seen or self._sync.exists(self._waiting_whole):
            self._waiting_seen = True
            return
        ids = [_text(i) for i, _ in self._sync.zscan_iter(self._index, count=_PRUNE_BATCH)]
        for start in range(0, len(ids), _PRUNE_BATCH):
            batch = ids[start : start + _PRUNE_BATCH]
            pipe = self._sync.pipeline(transaction=False)
            for conversation_id in batch:
                self._read_script(keys=self._parts(conversation_id), client=pipe)
            found = pipe.execute()
            pipe = self._sync.pipeline(transaction=False)
            for conversation_id, parts in zip(batch, found, strict=True):
                version, entries = entries_to_fill(
                    conversation_id, partial(_decoded_one, conversation_id, parts)
                )
                if entries:
                    self._fill_entry(conversation_id, version, entries, client=pipe)
            pipe.execute()
        self._sync.set(self._waiting_whole, "1")
        self._waiting_seen = True

    def _fill_entry(self, conversation_id: str, version: int, entries: str, *, client: Any = None) -> Any:
        """Set a conversation's inbox entries read at `version`, if it is still at that version: 1 when
        written, else 0 (queued in `client`, a pipeline: its answer then)."""
        keys = [self._parts(conversation_id)[0], self._waiting]
        return self._fill_script(keys=keys, args=[version, conversation_id, entries], client=client)

    @property
    def _owners(self) -> str:
        """Set by the first save of a namespace's first conversation when the version saving it keeps
        each owner's sorted set: then every conversation is in its owner's (a namespace an earlier
        version started lists everyone's for an owner, and the list checks each)."""
        return f"{self.prefix}{{{self.namespace}}}:owners"

    def _owners_kept(self) -> bool:
        """Whether the namespace keeps each owner's sorted set: its mark read until it is found (a
        mark is never taken away), then remembered."""
        if not self._owners_seen:
            self._owners_seen = bool(self._sync.exists(self._owners))
        return self._owners_seen

    def _owned(self, owner: str | None) -> str:
        """The sorted set of an owner's conversations, scored as the index (one nobody owns: unused)."""
        return f"{self.prefix}{{{self.namespace}}}:owner:{owner or ''}"

    def _owners_of(self, conversation_ids: Sequence[str]) -> list[str]:
        """The owner's sorted set of each conversation, in one pipelined round trip."""
        pipe = self._sync.pipeline(transaction=False)
        for conversation_id in conversation_ids:
            pipe.hget(self._parts(conversation_id)[0], "owner")
        return [self._owned(None if o is None else _text(o)) for o in pipe.execute()]

    @property
    def _index(self) -> str:
        return f"{self.prefix}{{{self.namespace}}}:index"

    def _audit(self, conversation_id: str | None = None) -> str:
        if conversation_id is None:
            return f"{self.prefix}{{{self.namespace}}}:audit"
        return f"{self.prefix}{{{self.namespace}}}:audit:c:{conversation_id}"

    @property
    def _chain_keys(self) -> list[str]:
        """The chain's head (a hash: seq, hash) and its records in the order appended (a list)."""
        tagged = f"{self.prefix}{{{self.namespace}}}"
        return [f"{tagged}:audit:head", f"{tagged}:audit:chain"]

    @property
    def _digests_key(self) -> str:
        return f"{self.prefix}{{{self.namespace}}}:audit:digests"

    def _audit_keys(self, conversation_id: str) -> list[str]:
        return [*self._chain_keys, self._audit(), self._audit(conversation_id)]

    def _audit_args(self, records: Sequence[DecisionRecord], head: ChainHead) -> tuple[list[Any], ChainHead]:
        linked, moved = head.link(records)
        args: list[Any] = [head.seq, head.hash, moved.seq, moved.hash]
        args += [0 if self.audit_ttl is None else int(self.audit_ttl * 1000), repr(self.clock())]
        for record in linked:
            args += [repr(record.at), record.to_json()]
        return [*args, len(linked)], moved

    def _save_call(
        self, conversation: Conversation, expected_version: int, head: ChainHead | None
    ) -> tuple[list[str], list[Any], ChainHead | None]:
        """Keys and arguments of the save script, or of the audited one when decisions ride along
        (linked after `head`), and the chain's head once it is written."""
        hash_key, messages, calls = self._parts(conversation.id)
        owned = self._owned(conversation.owner)
        keys = [
            hash_key,
            self._index,
            messages,
            calls,
            self._waiting,
            owned,
            self._owners,
            self._waiting_whole,
        ]
        args = self._save_args(conversation, expected_version)
        records = conversation.unsaved_decisions
        if records and head is not None:
            keys += self._audit_keys(conversation.id)
            audit, head = self._audit_args(records, head)
            args += audit
        return keys, args, head

    def _read_head(self) -> ChainHead:
        with self._failures:
            seq, hash_ = self._sync.hmget(self._chain_keys[0], "seq", "hash")
        self._head = _head(seq, hash_)
        return self._head

    async def _aread_head(self) -> ChainHead:
        client = self._async()[0]
        async with self._bounded():
            seq, hash_ = await client.hmget(self._chain_keys[0], "seq", "hash")
        self._head = _head(seq, hash_)
        return self._head

    def _save_args(self, conversation: Conversation, expected_version: int) -> list[Any]:
        now = self.clock()
        waiting = waiting_until(conversation)
        ttl_ms = 0 if self.ttl is None else int(self.ttl * 1000)
        expires_ms = 0 if self.ttl is None else int((kept_until(now, self.ttl, waiting) - now) * 1000)
        changed = changes(conversation, expected_version)
        return [
            expected_version,
            conversation.version,
            changed.header,
            repr(now),
            conversation.id,
            ttl_ms,
            max(expires_ms, 1),
            "" if waiting is None else repr(waiting),
            "1" if changed.whole else "0",
            changed.first_message,
            len(changed.messages),
            *changed.messages,
            len(changed.calls),
            *(part for call in changed.calls for part in call),
            *_waiting_args(index_changes(conversation, changed.whole, bool(changed.calls))),
            conversation.owner or "",
        ]

    # -- sync -------------------------------------------------------------------------------------

    def get(self, conversation_id: str) -> Conversation | None:
        with self._failures:
            found = self._read_script(keys=self._parts(conversation_id))
        return _decoded([conversation_id], [found])[0]

    def get_recent(self, conversation_id: str) -> Conversation | None:
        with self._failures:
            found = self._read_recent_script(keys=self._parts(conversation_id))
        return _decoded([conversation_id], [found], windowed=True)[0]

    def save(self, conversation: Conversation, expected_version: int) -> None:
        """One round trip; with decisions, one more the first time (the chain's head) and whenever
        another worker moved the head since (the records are linked again and the save retried)."""
        while True:
            head = (self._head or self._read_head()) if conversation.unsaved_decisions else None
            keys, args, moved = self._save_call(conversation, expected_version, head)
            script = self._audited_script if len(keys) > _SAVE_KEYS else self._save_script
            with self._failures:
                outcome = script(keys=keys, args=args)
            if int(outcome) != STALE_HEAD:
                break
            self._read_head()
        self._check(conversation, expected_version, outcome, moved)

    def record_decisions(self, records: Sequence[DecisionRecord]) -> None:
        for conversation_id, some in _by_conversation(records):
            while True:
                args, moved = self._audit_args(some, self._head or self._read_head())
                with self._failures:
                    outcome = self._append_script(keys=self._audit_keys(conversation_id), args=args)
                if int(outcome) != STALE_HEAD:
                    break
                self._read_head()
            self._head = moved

    def audit_trail(self) -> Trail:
        with self._failures:
            pipe = self._sync.pipeline(transaction=True)  # MULTI: one state of the three keys
            pipe.zrangebyscore(self._audit(), self._oldest_record(), "+inf")
            pipe.lrange(self._chain_keys[1], 0, -1)
            pipe.hgetall(self._digests_key)
            pipe.hmget(self._chain_keys[0], "seq", "hash")
            kept, chain, digests, (seq, hash_) = pipe.execute()
        # Records from before the chain are in the namespace's set only: they come first, by time.
        before = [r for r in map(DecisionRecord.from_json, kept) if r.seq == 0]
        return Trail(
            [*before, *(DecisionRecord.from_json(item) for item in chain)],
            sorted((AuditDigest.from_json(item) for item in digests.values()), key=lambda d: d.number),
            _head(seq, hash_),
        )

    def audit_tip(self) -> tuple[ChainHead, AuditDigest | None]:
        with self._failures:
            (seq, hash_), last = self._tip_script(keys=[self._chain_keys[0], self._digests_key])
        return _head(seq, hash_), None if last is None else AuditDigest.from_json(last)

    def append_digest(self, digest: AuditDigest) -> bool:
        with self._failures:
            return bool(self._sync.hsetnx(self._digests_key, str(digest.number), digest.to_json()))

    def decision_records(self, conversation_id: str | None = None, limit: int = 100) -> list[DecisionRecord]:
        with self._failures:
            found: Any = self._sync.zrevrangebyscore(
                self._audit(conversation_id), "+inf", self._oldest_record(), start=0, num=limit
            )
        return [DecisionRecord.from_json(item) for item in found]

    def delete(self, conversation_id: str) -> bool:
        with self._failures:
            (owned,) = self._owners_of([conversation_id])
            pipe = self._sync.pipeline(transaction=True)
            hash_key, messages, calls = self._parts(conversation_id)
            pipe.zrem(owned, conversation_id)
            pipe.delete(hash_key)
            pipe.delete(messages, calls)
            pipe.zrem(self._index, conversation_id)
            pipe.hdel(self._waiting, conversation_id)
            _, deleted, *_ = pipe.execute()
        return bool(deleted)

    def list_waiting(self) -> list[WaitingEntry]:
        """The index's entries of the conversations Redis still holds: those of one its ttl expired
        or a prune forgot are dropped from the index here (two round trips, whatever the store holds;
        the first read of a namespace an earlier version started fills the index first)."""
        with self._failures:
            self._fill_waiting()
            found: dict[Any, Any] = self._sync.hgetall(self._waiting)
            ids = [_text(i) for i in found]
            pipe = self._sync.pipeline(transaction=False)
            for conversation_id in ids:
                pipe.exists(self._parts(conversation_id)[0])
            kept = pipe.execute()
            gone = [i for i, exists in zip(ids, kept, strict=True) if not exists]
            if gone:
                self._sync.hdel(self._waiting, *gone)
        return [
            entry
            for body, exists in zip(found.values(), kept, strict=True)
            if exists
            for entry in decode_entries(body)
        ]

    def get_many(self, conversation_ids: Sequence[str]) -> list[Conversation | None]:
        """A page of conversations in one pipelined round trip, on one connection of the pool."""
        with self._failures:
            pipe = self._sync.pipeline(transaction=False)
            for conversation_id in conversation_ids:
                self._read_script(keys=self._parts(conversation_id), client=pipe)
            found = pipe.execute()
        return _decoded(conversation_ids, found)

    def list_ids(self, limit: int = 100) -> list[str]:
        with self._failures:
            ids = self._sync.zrevrangebyscore(self._index, "+inf", self._oldest_kept(), start=0, num=limit)
        return [_text(i) for i in ids]

    def list_after(
        self, position: Position | None, limit: int, *, owner: str | None = None
    ) -> list[Position]:
        """A page of the list from the index (a sorted set scored by the time of the last save), or
        with `owner` from that owner's (when every conversation of the namespace was saved by a
        version that keeps them; else everyone's): the ids of the position's score that sort before
        its id, then those of lower scores, in one pipelined round trip whose cost follows `limit`,
        not the number stored."""
        oldest = self._oldest_kept()
        found: list[Any]
        with self._failures:
            index = self._index
            if owner is not None and self._owners_kept():
                index = self._owned(owner)
            if position is None:
                newest = self._sync.zrevrangebyscore(
                    index, "+inf", oldest, start=0, num=limit, withscores=True
                )
                found = list(cast(list[Any], newest))
            else:
                score = repr(position.order)
                pipe = self._sync.pipeline(transaction=False)
                pipe.zrevrangebyscore(index, score, score, withscores=True)
                pipe.zrevrangebyscore(index, f"({score}", oldest, start=0, num=limit, withscores=True)
                answers: list[Any] = pipe.execute()
                tied, older = answers
                kept = float(oldest)
                after = [(i, at) for i, at in tied if _text(i) < position.conversation_id and at >= kept]
                found = (after + older)[:limit]
        return [Position(float(at), _text(i)) for i, at in found]

    def prune(self, retention: float, *, now: float | None = None, dry_run: bool = False) -> int:
        """Forget the conversations last saved more than `retention` seconds ago whose approval window
        has closed: each checked and deleted atomically by a script, a batch of ids per round trip."""
        now = self.clock() if now is None else now
        with self._failures:
            old = self._sync.zrangebyscore(self._index, "-inf", f"({now - retention!r}")
            gone = 0
            for start in range(0, len(old), _PRUNE_BATCH):
                ids = [_text(i) for i in old[start : start + _PRUNE_BATCH]]
                owned = self._owners_of(ids)
                keys = [
                    self._index,
                    *(k for i, o in zip(ids, owned, strict=True) for k in (*self._parts(i), o)),
                ]
                args = [repr(now - retention), repr(now), "1" if dry_run else "0", *ids]
                gone += int(self._prune_script(keys=keys, args=args))
        return gone

    # Standing grants (docs/approvals.md, "Grants"): a hash of the namespace, each grant's JSON by id.
    @property
    def _grants(self) -> str:
        return f"{self.prefix}{{{self.namespace}}}:grants"

    def add_grant(self, grant: Grant) -> None:
        with self._failures:
            self._sync.hset(self._grants, grant.id, json.dumps(grant.to_dict()))

    def revoke_grant(self, grant_id: str, *, by: str, at: float) -> Grant | None:
        """Read and marked in one optimistic transaction (WATCH): a revocation racing another keeps
        the first."""

        def revoke(pipe: Any) -> Grant | None:
            body = pipe.hget(self._grants, grant_id)
            if body is None:
                return None
            revoked = Grant.from_dict(json.loads(body)).revoked(by=by, at=at)
            pipe.multi()
            pipe.hset(self._grants, grant_id, json.dumps(revoked.to_dict()))
            return revoked

        with self._failures:
            result = self._sync.transaction(cast(Any, revoke), self._grants, value_from_callable=True)
        return cast("Grant | None", result)

    def delete_grants(self, grant_ids: Sequence[str]) -> None:
        if grant_ids:
            with self._failures:
                self._sync.hdel(self._grants, *grant_ids)

    def list_grants(self) -> list[Grant]:
        with self._failures:
            found: dict[Any, Any] = self._sync.hgetall(self._grants)
        return [Grant.from_dict(json.loads(body)) for body in found.values()]

    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        with self._failures:
            self._sync.set(self._cancel_key(conversation_id), repr(at), ex=CANCEL_KEPT)

    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        with self._failures:
            at = self._sync.get(self._cancel_key(conversation_id))
        return at is not None and float(at) >= since

    # -- asyncio ----------------------------------------------------------------------------------

    def _async(self) -> tuple[Any, ...]:
        """The asyncio client of the running loop and its save script (redis.asyncio connections
        belong to the loop that opened them)."""
        found = self._async_clients.get()
        if found is None:
            # No socket timeout of redis-py's: it would wrap every write in a task of its own
            # (asyncio.wait_for); each call is bounded by _bounded() instead, at less cost.
            client = self._given_async or self._redis_async.Redis.from_url(
                self._url, socket_timeout=None, socket_connect_timeout=self._socket_timeout
            )
            # evalsha, loading the script first on NOSCRIPT (after a Redis restart or flush).
            found = (
                client,
                client.register_script(_SAVE),
                client.register_script(_SAVE_AUDITED),
                client.register_script(_APPEND),
                client.register_script(_READ),
                client.register_script(_READ_RECENT),
            )
            self._async_clients.put(found)
        return found

    def _bounded(self) -> _Bounded:
        """``async with``: a call of the asyncio client, given up after the socket timeout."""
        return _Bounded(self._failures, self._socket_timeout)

    async def aget(self, conversation_id: str) -> Conversation | None:
        read = self._async()[4]
        async with self._bounded():
            found = await read(keys=self._parts(conversation_id))
        return _decoded([conversation_id], [found])[0]

    async def aget_recent(self, conversation_id: str) -> Conversation | None:
        read = self._async()[5]
        async with self._bounded():
            found = await read(keys=self._parts(conversation_id))
        return _decoded([conversation_id], [found], windowed=True)[0]

    async def aget_many(self, conversation_ids: Sequence[str]) -> list[Conversation | None]:
        """:meth:`get_many` with the asyncio client: one round trip, one connection."""
        client, *_, read, _ = self._async()
        async with self._bounded():
            pipe = client.pipeline(transaction=False)
            for conversation_id in conversation_ids:
                await read(keys=self._parts(conversation_id), client=pipe)
            found = await pipe.execute()
        return _decoded(conversation_ids, found)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        _, plain, audited, *_ = self._async()
        while True:
            head = (self._head or await self._aread_head()) if conversation.unsaved_decisions else None
            keys, args, moved = self._save_call(conversation, expected_version, head)
            async with self._bounded():
                outcome = await (audited if len(keys) > _SAVE_KEYS else plain)(keys=keys, args=args)
            if int(outcome) != STALE_HEAD:
                break
            await self._aread_head()
        self._check(conversation, expected_version, outcome, moved)

    async def arecord_decisions(self, records: Sequence[DecisionRecord]) -> None:
        append = self._async()[3]
        for conversation_id, some in _by_conversation(records):
            while True:
                args, moved = self._audit_args(some, self._head or await self._aread_head())
                async with self._bounded():
                    outcome = await append(keys=self._audit_keys(conversation_id), args=args)
                if int(outcome) != STALE_HEAD:
                    break
                await self._aread_head()
            self._head = moved

    async def adecision_records(
        self, conversation_id: str | None = None, limit: int = 100
    ) -> list[DecisionRecord]:
        client = self._async()[0]
        async with self._bounded():
            found = await client.zrevrangebyscore(
                self._audit(conversation_id), "+inf", self._oldest_record(), start=0, num=limit
            )
        return [DecisionRecord.from_json(item) for item in found]

    async def arequest_cancel(self, conversation_id: str, *, at: float) -> None:
        client = self._async()[0]
        async with self._bounded():
            await client.set(self._cancel_key(conversation_id), repr(at), ex=CANCEL_KEPT)

    async def acancel_requested(self, conversation_id: str, *, since: float) -> bool:
        client = self._async()[0]
        async with self._bounded():
            at = await client.get(self._cancel_key(conversation_id))
        return at is not None and float(at) >= since

    def ping(self) -> None:
        """``PING``: one round trip."""
        with self._failures:
            self._sync.ping()

    async def aping(self) -> None:
        client = self._async()[0]
        async with self._bounded():
            await client.ping()

    async def aclose(self) -> None:
        """Close the asyncio client of the running loop (a server does this at shutdown)."""
        await self._async_clients.aclose()

    async def _close_client(self, found: tuple[Any, ...]) -> None:
        if self._given_async is None:  # a client given to the store is its owner's to close
            await found[0].aclose()

    def close(self) -> None:
        self._sync.close()

    # -- shared -----------------------------------------------------------------------------------

    def _oldest_kept(self) -> float | str:
        return "-inf" if self.ttl is None else self.clock() - self.ttl

    def _oldest_record(self) -> float | str:
        return "-inf" if self.audit_ttl is None else self.clock() - self.audit_ttl

    def _check(
        self, conversation: Conversation, expected_version: int, outcome: Any, head: ChainHead | None
    ) -> None:
        stored = int(outcome)
        if stored != -1:
            raise ConcurrencyConflict(conversation.id, expected_version, stored or None)
        if head is not None:
            self._head = head
        conversation.unsaved_decisions.clear()

    def __repr__(self) -> str:
        return (
            f"RedisConversationRepository({self.where!r}, prefix={self.prefix!r}, "
            f"namespace={self.namespace!r})"
        )


class _Bounded:
    """``async with``: one call of the asyncio client, given up after `seconds`, its failures (and
    running out of time) a StoreUnavailable naming the store."""

    __slots__ = ("_failures", "_seconds", "_timeout")

    def __init__(self, failures: ClientErrors, seconds: float) -> None:
        self._failures = failures
        self._seconds = seconds
        self._timeout = asyncio.timeout(seconds)

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            await self._timeout.__aexit__(kind, exc, traceback)
        except TimeoutError:
            raise StoreUnavailable(f"{self._failures.where}: no answer within {self._seconds:g} s") from None
        self._failures.__exit__(kind, exc, traceback)


def _head(seq: bytes | str | None, hash_: bytes | str | None) -> ChainHead:
    """The chain's head from its hash's fields (absent: an empty chain)."""
    text = hash_.decode() if isinstance(hash_, bytes) else hash_ or ""
    return ChainHead(int(seq or 0), text)


def _by_conversation(records: Sequence[DecisionRecord]) -> list[tuple[str, list[DecisionRecord]]]:
    grouped: dict[str, list[DecisionRecord]] = {}
    for record in records:
        grouped.setdefault(record.conversation_id, []).append(record)
    return list(grouped.items())


def _where(client: Any) -> str:
    """host:port/db of a client, never its credentials."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


def _text(value: object) -> str:
    """A member or field as Redis gave it (bytes unless the client decodes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _decoded(
    conversation_ids: Sequence[str], found: list[Any], *, windowed: bool = False
) -> list[Conversation | None]:
    """Conversations from what the read script returned for each (header, messages, calls)."""
    pairs = zip(conversation_ids, found, strict=True)
    return [
        None if header is None else decode_parts(header, messages, calls, i, windowed=windowed)
        for i, (header, messages, calls) in pairs
    ]


def _decoded_one(conversation_id: str, found: Any) -> Conversation | None:
    return _decoded([conversation_id], [found])[0]


def _waiting_args(entries: str | None) -> list[str]:
    """The save script's last two arguments: what it does with the conversation's inbox entries."""
    if entries is None:
        return ["-", ""]
    return ["s", entries] if entries else ["d", ""]
