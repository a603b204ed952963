"""DynamoDBConversationRepository: conversations in a DynamoDB table, written with conditional puts.

Table layout (:meth:`DynamoDBConversationRepository.create_table` makes it):

==================  ====  ===========================================================
attribute           type  meaning
==================  ====  ===========================================================
``pk``              S     partition key: ``<namespace>#<conversation id>``
``ns``              S     the namespace (an agent's name); hash key of the index
``conversation_id`` S     the conversation id
``version``         N     compared on every write (optimistic concurrency)
``updated_at``      N     epoch seconds of the last save; range key of the indexes
``owner_ns``        S     ``<namespace>#<owner>`` of a conversation someone owns; hash key of
                          ``by_owner``
``body``            B     the conversation's header (its JSON but its messages and calls, which it
                          counts), zlib-compressed; a body of format 1 (written before headers) is
                          the whole conversation, read as such and rewritten as pages by its next save
``m<k>``, ``c<k>``  B     page k of its messages, of its tool calls: the JSON array of records
                          k*64 to k*64+63, zlib-compressed (an item holds at most 400 KB)
``expires_at``      N     epoch seconds after which DynamoDB's TTL may delete it (with ``ttl``)
==================  ====  ===========================================================

Global secondary index ``by_namespace`` (``ns``, ``updated_at``), keys only plus ``expires_at``, lists an
agent's conversations, newest first; ``by_owner`` (``owner_ns``: ``<namespace>#<owner>`` of an owned
conversation, ``updated_at``) an owner's, in a table whose item ``#owners-indexed`` says every
conversation carries ``owner_ns`` (:meth:`DynamoDBConversationRepository.create_table` puts it).
``expires_at`` is the save plus ``ttl``, or the close of an approval window still open then
(:mod:`dcaf_like.application.retention`).

The audit trail lives in the same table, one item per decision record: ``pk`` is
``audit#<namespace>#<conversation id>#<record id>``, ``ns`` is ``audit#<namespace>`` (so the index lists
an agent's records newest first, apart from its conversations), ``updated_at`` the record's time,
``record`` its JSON, and ``expires_at`` set with `audit_ttl`. A save that carries decisions writes the
conversation and its records in one ``TransactWriteItems``; deleting a conversation leaves them.
The chain over the trail (ADR 34): each record item's ``chain`` is where it was appended; the head is
the item ``#audit-head#<namespace>`` (``seq``, ``hash``), updated in the same transaction on the
condition that it is still the head the records were linked after; a signed digest is the item
``#audit-digest#<namespace>#<number>`` (``ns`` ``#audit-digest#<namespace>``, ``updated_at`` its
number), put only if absent.

The inbox's index (docs/approvals.md, "One inbox"): per conversation with calls waiting for approval,
the item ``#waiting#<namespace>#<id>`` (``ns`` ``#waiting#<namespace>``, ``record`` their entries as
JSON, ``version`` the conversation's version that wrote them),
put right after the save that changed them on the condition that it holds an older version (so two
workers' writes land in the order of their saves); when none waits any more, an empty ``record``
that DynamoDB's TTL removes an hour on. Deleting the conversation deletes it. The index is whole in a
table whose item ``#waiting-indexed`` :meth:`DynamoDBConversationRepository.create_table` put, and in a
namespace with the item ``#waiting-indexed#<namespace>``: a namespace of a table made before the index
gets it filled from its conversations at its first inbox read, then that item is put.

A turn's windowed read (:meth:`DynamoDBConversationRepository.get_recent`, ADR 22) is one strongly
consistent ``GetItem`` whose projection names the header and the pages from the window's on
(:mod:`dcaf_like.stores._dynamodb_pages`).

DynamoDB has no async client in boto3: the async twins run the blocking calls in worker threads
(:class:`~dcaf_like.stores._shared.BlockingRepository`).
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import partial
from typing import Any, TypeVar

from dcaf_like.application.errors import ConcurrencyConflict, StoredConversationUnreadable, StoreUnavailable
from dcaf_like.application.ports import GrantStore, Position
from dcaf_like.application.retention import kept_until, waiting_until
from dcaf_like.application.waiting import WaitingEntry, decode_entries, index_changes
from dcaf_like.domain import Conversation, DecisionRecord
from dcaf_like.domain.grant import Grant
from dcaf_like.domain.trail import AuditDigest, ChainHead, Trail
from dcaf_like.stores._codec import (
    changed_calls,
    decode_pages,
    encode_header,
    first_changed_message,
    page,
    window_of,
    written_whole,
)
from dcaf_like.stores._dynamodb_pages import (
    FIRST_PAGES,
    PAGE,
    PageMemory,
    Pages,
    Remembered,
    pages_for,
)
from dcaf_like.stores._schema import CALL, HEADER, MESSAGE, dumps
from dcaf_like.stores._shared import CANCEL_KEPT, BlockingRepository, check_retention, entries_to_fill

INDEX = "by_namespace"
#: The index of each owner's conversations (``owner_ns``: ``<namespace>#<owner>``, ``updated_at``), made
#: by :meth:`DynamoDBConversationRepository.create_table` with the item :data:`OWNERS_MARK`, which says
#: that every conversation of the table carries its ``owner_ns`` (a table made before has neither).
OWNER_INDEX = "by_owner"
OWNERS_MARK = "#owners-indexed"
#: The item that says every namespace of the table keeps the inbox's index whole (put by
#: :meth:`DynamoDBConversationRepository.create_table`); ``<WAITING_MARK>#<namespace>``: that one
#: namespace does, its conversations of before the index filled in.
WAITING_MARK = "#waiting-indexed"
# Seconds the inbox's emptied item of a conversation is kept (so that a late write of an older save
# cannot bring back calls decided since) before DynamoDB's TTL removes it.
WAITING_KEPT = 3600
TRANSACTION_ITEMS = 100  # DynamoDB's limit on the items of one TransactWriteItems
RIDING = (
    TRANSACTION_ITEMS - 3
)  # the records a save's transaction carries, beside it, its inbox entry and the chain's head
# A windowed read asks again for the pages the header it got needs, at most this many times in all;
# then it reads the item whole (a conversation that grew by a page between each of its reads).
READ_TRIES = 3
# Pages a windowed read names at most (a window that long is read whole: the port's default).
MOST_PROJECTED = 200
# Bytes of pages a repository remembers, over all conversations (_dynamodb_pages.PageMemory).
REMEMBERED_BYTES = 16 * 2**20

T = TypeVar("T")


class DynamoDBConversationRepository(BlockingRepository, GrantStore):
    """Conversations in DynamoDB table `table`. Pass `client` (a boto3 ``dynamodb`` client) or let it
    be made from `region` and `endpoint_url` with the usual AWS credential chain."""

    def __init__(
        self,
        table: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        namespace: str = "default",
        ttl: float | None = None,
        audit_ttl: float | None = None,
        client: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_retention(ttl, audit_ttl)
        if not namespace or "#" in namespace:
            raise ValueError(f"a DynamoDB namespace is a non-empty name without '#', got {namespace!r}")
        import botocore.exceptions

        if client is None:
            import boto3

            client = boto3.client("dynamodb", region_name=region, endpoint_url=endpoint_url)
        self.table = table
        self.namespace = namespace
        self.ttl = ttl
        self.audit_ttl = audit_ttl
        self.clock = clock
        self.client = client
        self._client_error = botocore.exceptions.ClientError
        self._errors: tuple[type[BaseException], ...] = (botocore.exceptions.BotoCoreError,)
        self._memory = PageMemory(REMEMBERED_BYTES)
        self._owner_index: bool | None = None  # whether the table indexes owners: read at first need
        self._waiting_whole = False  # the namespace's inbox index is whole (a mark found, or filled)
        #: The chain's head as this repository last saw it: a hint (each append checks it).
        self._head: ChainHead | None = None

    # -- the port ---------------------------------------------------------------------------------

    def get(self, conversation_id: str) -> Conversation | None:
        item = self._call(
            "GetItem",
            lambda: self.client.get_item(
                TableName=self.table, Key={"pk": {"S": self._pk(conversation_id)}}, ConsistentRead=True
            ),
        ).get("Item")
        if item is None or self._expired(item):
            return None
        try:
            header = zlib.decompress(item["body"]["B"])
            messages = [zlib.decompress(item[f"m{k}"]["B"]) for k in range(_pages_of(item, "m"))]
            calls = [zlib.decompress(item[f"c{k}"]["B"]) for k in range(_pages_of(item, "c"))]
        except (zlib.error, KeyError) as exc:
            raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc
        return decode_pages(header, messages, calls, conversation_id)

    def get_recent(self, conversation_id: str) -> Conversation | None:
        """The header and the pages from the window's on (ADR 22), in one strongly consistent
        ``GetItem``: one snapshot of the item. Which pages those are the header says; the read asks
        for those the repository last saw (and the next of each), or the first two of each, and asks
        again when the header it gets needs others."""
        known = self._memory.get(conversation_id)
        wanted = FIRST_PAGES if known is None else known.pages.and_next()
        for _ in range(READ_TRIES):
            if len(wanted.attributes()) > MOST_PROJECTED:
                break  # as good as whole, and an expression is at most 4 KB
            item = self._get_item(conversation_id, ["body", "version", "expires_at", *wanted.attributes()])
            if item is None or self._expired(item):
                return None
            header = _header(item, conversation_id)
            if header.get("format") != HEADER:  # a whole document (format 1): no pages
                return decode_pages(header, [], [], conversation_id)
            needed = _window_pages(header, conversation_id)
            if wanted.covers(needed):
                return self._windowed(conversation_id, item, header, needed)
            wanted = needed.and_next()
        return self.get(conversation_id)

    def _windowed(
        self, conversation_id: str, item: dict[str, Any], header: dict[str, Any], pages: Pages
    ) -> Conversation:
        """The conversation from the window on, of the header and the `pages` of an item."""
        try:
            messages = [zlib.decompress(item[f"m{k}"]["B"]) for k in pages.messages]
            calls = [zlib.decompress(item[f"c{k}"]["B"]) for k in pages.calls]
        except (zlib.error, KeyError) as exc:
            raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc
        first = (pages.messages.start * PAGE, pages.calls.start * PAGE)
        conversation = decode_pages(header, messages, calls, conversation_id, first=first)
        first_pages = _binary(item, f"m{pages.messages.start}"), _binary(item, f"c{pages.calls.start}")
        self._memory.put(conversation_id, Remembered(conversation.version, pages, *first_pages))
        return conversation

    def _get_item(self, conversation_id: str, attributes: Sequence[str]) -> dict[str, Any] | None:
        """The `attributes` of a conversation's item, read strongly consistent; None: no item."""
        found: dict[str, Any] | None = self._call(
            "GetItem",
            lambda: self.client.get_item(
                TableName=self.table,
                Key={"pk": {"S": self._pk(conversation_id)}},
                ConsistentRead=True,
                ProjectionExpression=", ".join(attributes),
            ),
        ).get("Item")
        return found

    def save(self, conversation: Conversation, expected_version: int) -> None:
        """A compare-and-set on the item's version: a new conversation (or one read whole) is put whole;
        one read from its pages updates its header and the pages that changed."""
        now = self.clock()
        c = conversation
        header = zlib.compress(encode_header(c).encode("utf-8"))
        expires = None
        if self.ttl is not None:  # a call waiting for a decision keeps it until its window closes
            expires = {"N": str(int(kept_until(now, self.ttl, waiting_until(c))))}
        whole = written_whole(c, expected_version)
        if whole:
            pages = _all_pages(c)
            request = self._put(c, expected_version, header, pages, expires, now)
        else:
            pages = self._changed_pages(c, expected_version)
            request = self._update(c, expected_version, header, pages, expires, now)
        records = conversation.unsaved_decisions
        # The inbox's entry is written in the save's own transaction: never a save without it. A new
        # conversation with no call waiting has none to write (an empty item would make the inbox read
        # one per conversation of the last hour).
        entries = index_changes(conversation, whole, bool(changed_calls(conversation, whole)))
        if entries == "" and expected_version == 0:
            entries = None
        index = [] if entries is None else [{"Put": self._waiting_put(conversation, entries, now, expires)}]
        if records:
            self._save_with_records(conversation, expected_version, request, records, index)
        elif index:
            self._save_with_index(conversation, expected_version, request, index)
        else:
            operation = "PutItem" if whole else "UpdateItem"
            try:
                (self.client.put_item if whole else self.client.update_item)(**request)
            except self._client_error as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise self._unavailable(operation, exc) from exc
                old = exc.response.get("Item") or {}
                actual = int(old["version"]["N"]) if "version" in old else None
                raise ConcurrencyConflict(conversation.id, expected_version, actual) from None
            except self._errors as exc:
                raise self._unavailable(operation, exc) from exc
        conversation.unsaved_decisions.clear()
        self._remember(conversation, pages, None if whole else expected_version)
        conversation.mark_saved()

    def _save_with_index(
        self, conversation: Conversation, expected_version: int, request: dict[str, Any], index: list[Any]
    ) -> None:
        """The conversation (a put or an update) and its inbox entry in one transaction."""
        write = {"Put" if "Item" in request else "Update": request}
        try:
            self.client.transact_write_items(TransactItems=[write, *index])
        except self._client_error as exc:
            reasons = exc.response.get("CancellationReasons") or []
            first = reasons[0] if reasons else {}
            if first.get("Code") != "ConditionalCheckFailed":
                raise self._unavailable("TransactWriteItems", exc) from exc
            old = first.get("Item") or {}
            actual = int(old["version"]["N"]) if "version" in old else None
            raise ConcurrencyConflict(conversation.id, expected_version, actual) from None
        except self._errors as exc:
            raise self._unavailable("TransactWriteItems", exc) from exc

    def _waiting_put(
        self, c: Conversation, entries: str, now: float, expires: dict[str, str] | None
    ) -> dict[str, Any]:
        """The conversation's inbox entries, as a put in its save's transaction (the save's own
        compare-and-set orders them: no later save can have put its entries first)."""
        return self._waiting_item(c.id, c.version, entries, now, expires)

    def _waiting_item(
        self, conversation_id: str, version: int, entries: str, now: float, expires: dict[str, str] | None
    ) -> dict[str, Any]:
        """A put of a conversation's inbox entries at `version`. They expire with the conversation, so
        a conversation its retention dropped is listed no more."""
        item: dict[str, Any] = {
            "pk": {"S": self._waiting_pk(conversation_id)},
            "ns": {"S": self._waiting_ns},
            "updated_at": {"N": _number(now)},
            "version": {"N": str(version)},
            "record": {"S": entries},
        }
        if not entries:
            item["expires_at"] = {"N": str(int(now) + WAITING_KEPT)}
        elif expires is not None:
            item["expires_at"] = expires
        return {"TableName": self.table, "Item": item}

    def list_waiting(self) -> list[WaitingEntry]:
        """The index's items (a Query of its keys), then their entries (a BatchGetItem per 100); the
        first read of a namespace in a table made before the index fills the index first."""
        self._fill_waiting()
        keys = [item["pk"]["S"] for item in self._newest(self._waiting_ns, sys.maxsize, 1000)]
        items = self._items(keys, "#r, expires_at")
        return [
            entry
            for item in items
            if not self._expired(item) and item.get("record", {}).get("S")
            for entry in decode_entries(item["record"]["S"])
        ]

    def _fill_waiting(self) -> None:
        """Fill the inbox's index from the namespace's conversations unless a mark says it is whole,
        then put the namespace's mark: once per namespace (each entry written only if its conversation
        is still at the version read, so workers filling at once, or saving meanwhile, leave the
        newest entries)."""
        if self._waiting_whole:
            return
        marks = [WAITING_MARK, f"{WAITING_MARK}#{self.namespace}"]
        if not any(self._has(mark) for mark in marks):
            prefix = len(self.namespace) + 1
            for item in self._newest(self.namespace, sys.maxsize, 1000):
                conversation_id = item["pk"]["S"][prefix:]
                version, entries = entries_to_fill(conversation_id, partial(self.get, conversation_id))
                if entries:
                    saved_at = float(item["updated_at"]["N"])
                    self._fill_entry(conversation_id, version, entries, saved_at, item.get("expires_at"))
            self._call(
                "PutItem", partial(self.client.put_item, TableName=self.table, Item={"pk": {"S": marks[1]}})
            )
        self._waiting_whole = True

    def _has(self, pk: str) -> bool:
        found = self._call(
            "GetItem", partial(self.client.get_item, TableName=self.table, Key={"pk": {"S": pk}})
        )
        return "Item" in found

    def _fill_entry(
        self,
        conversation_id: str,
        version: int,
        entries: str,
        saved_at: float,
        expires: dict[str, str] | None = None,
    ) -> bool:
        """Put a conversation's inbox entries read at `version` (saved at `saved_at`, kept until
        `expires`, as the conversation), in one transaction on the conditions that the conversation is
        still at that version and that the index holds no entries of it as new; False when either
        fails."""
        put = self._waiting_item(conversation_id, version, entries, saved_at, expires)
        put["ConditionExpression"] = "attribute_not_exists(pk) OR version < :v"
        put["ExpressionAttributeValues"] = {":v": {"N": str(version)}}
        same = {
            "TableName": self.table,
            "Key": {"pk": {"S": self._pk(conversation_id)}},
            "ConditionExpression": "version = :v",
            "ExpressionAttributeValues": {":v": {"N": str(version)}},
        }
        try:
            self.client.transact_write_items(TransactItems=[{"ConditionCheck": same}, {"Put": put}])
        except self._client_error as exc:
            reasons = exc.response.get("CancellationReasons") or []
            if not any(reason.get("Code") == "ConditionalCheckFailed" for reason in reasons):
                raise self._unavailable("TransactWriteItems", exc) from exc  # the next read fills again
            return False
        except self._errors as exc:
            raise self._unavailable("TransactWriteItems", exc) from exc
        return True

    @property
    def _waiting_ns(self) -> str:
        return f"#waiting#{self.namespace}"

    def _waiting_pk(self, conversation_id: str) -> str:
        return f"{self._waiting_ns}#{conversation_id}"

    def _changed_pages(self, c: Conversation, expected_version: int) -> dict[str, bytes]:
        """The pages a save of `c` rewrites, by attribute: its messages' from the first that changed,
        its calls' holding one that changed. The first page of a windowed read's (ADR 22) begins
        with records the read left out: they are written back as stored."""
        message_pages = range(
            (c.message_offset + first_changed_message(c, whole=False)) // PAGE, pages_for(c.message_count)
        )
        call_pages = sorted({i // PAGE for i, _ in changed_calls(c, whole=False)})
        partial = {}  # page: how many of its records were left out
        if c.message_offset % PAGE and c.message_offset // PAGE in message_pages:
            partial[f"m{c.message_offset // PAGE}"] = c.message_offset % PAGE
        if c.call_offset % PAGE and c.call_offset // PAGE in call_pages:
            partial[f"c{c.call_offset // PAGE}"] = c.call_offset % PAGE
        left_out = self._left_out(c.id, partial, expected_version) if partial else {}
        pages = {}
        for k in message_pages:
            records = left_out.get(f"m{k}", []) + _records(c.messages, c.message_offset, k, MESSAGE.write)
            pages[f"m{k}"] = _page(records)
        calls = list(c.tool_calls.values()) if call_pages else []
        for k in call_pages:
            pages[f"c{k}"] = _page(left_out.get(f"c{k}", []) + _records(calls, c.call_offset, k, CALL.write))
        return pages

    def _left_out(
        self, conversation_id: str, partial: dict[str, int], expected_version: int
    ) -> dict[str, list[str]]:
        """The first ``partial[name]`` records of each page `name` as stored at `expected_version`:
        those a windowed read left out, which never change (ADR 22). Each page as this repository read
        or wrote it at that version, else read now (one GetItem for all); a stored version other than
        `expected_version` is a ConcurrencyConflict, as the save would be."""
        known = self._memory.get(conversation_id)
        stored = {name: None if known is None else known.stored(name, expected_version) for name in partial}
        missing = [name for name, found in stored.items() if found is None]
        if missing:
            item = self._get_item(conversation_id, ["version", *missing]) or {}
            actual = int(item["version"]["N"]) if "version" in item else None
            if actual != expected_version:
                raise ConcurrencyConflict(conversation_id, expected_version, actual)
            stored.update((name, _binary(item, name)) for name in missing)
        left_out = {}
        for name, count in partial.items():
            try:
                records = json.loads(zlib.decompress(stored[name] or b""))
                if not isinstance(records, list) or len(records) < count:
                    raise ValueError(f"page {name} does not hold the {count} records before the window")
            except (zlib.error, ValueError) as exc:
                raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc
            left_out[name] = [dumps(record) for record in records[:count]]
        return left_out

    def _remember(self, c: Conversation, written: dict[str, bytes], unchanged_since: int | None) -> None:
        """Remember, after a save of `c` that wrote the pages `written`, the pages its window needs
        and the first of them: as written, or as remembered at `unchanged_since` (the version the
        save expected) if the save left that page as it was. None: the save replaced the item."""
        pages = Pages.window(*c.window_start(), c.message_count, c.call_count)
        old = None if unchanged_since is None else self._memory.get(c.id)

        def stored(attribute: str) -> bytes | None:
            if attribute in written:
                return written[attribute]
            if old is None or unchanged_since is None:
                return None
            return old.stored(attribute, unchanged_since)

        first_pages = stored(f"m{pages.messages.start}"), stored(f"c{pages.calls.start}")
        self._memory.put(c.id, Remembered(c.version, pages, *first_pages))

    def _put(
        self,
        c: Conversation,
        expected_version: int,
        header: bytes,
        pages: dict[str, bytes],
        expires: dict[str, str] | None,
        now: float,
    ) -> dict[str, Any]:
        """A PutItem of the whole conversation: its header and every page."""
        item: dict[str, Any] = {
            "pk": {"S": self._pk(c.id)},
            "ns": {"S": self.namespace},
            "conversation_id": {"S": c.id},
            "version": {"N": str(c.version)},
            "updated_at": {"N": _number(now)},
            "body": {"B": header},
        }
        if c.owner is not None:
            item["owner_ns"] = {"S": self._owner_ns(c.owner)}
        item.update((attribute, {"B": data}) for attribute, data in pages.items())
        if expires is not None:
            item["expires_at"] = expires
        if expected_version == 0:
            # A row DynamoDB's TTL has not yet swept away counts as absent.
            condition = "attribute_not_exists(pk) OR expires_at < :now"
            values = {":now": {"N": str(int(now))}}
        else:
            condition = "version = :expected AND (attribute_not_exists(expires_at) OR expires_at >= :now)"
            values = {":expected": {"N": str(expected_version)}, ":now": {"N": str(int(now))}}
        return {
            "TableName": self.table,
            "Item": item,
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _update(
        self,
        c: Conversation,
        expected_version: int,
        header: bytes,
        pages: dict[str, bytes],
        expires: dict[str, str] | None,
        now: float,
    ) -> dict[str, Any]:
        """An UpdateItem of the header and of the `pages` holding what changed."""
        values: dict[str, Any] = {
            ":expected": {"N": str(expected_version)},
            ":now": {"N": str(int(now))},
            ":version": {"N": str(c.version)},
            ":updated": {"N": _number(now)},
            ":body": {"B": header},
        }
        sets = ["version = :version", "updated_at = :updated", "body = :body"]
        for attribute, data in pages.items():
            values[f":{attribute}"] = {"B": data}
            sets.append(f"{attribute} = :{attribute}")
        if expires is not None:
            values[":expires"] = expires
            sets.append("expires_at = :expires")
        return {
            "TableName": self.table,
            "Key": {"pk": {"S": self._pk(c.id)}},
            "UpdateExpression": "SET " + ", ".join(sets),
            "ConditionExpression": (
                "version = :expected AND (attribute_not_exists(expires_at) OR expires_at >= :now)"
            ),
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _save_with_records(
        self,
        conversation: Conversation,
        expected_version: int,
        request: dict[str, Any],
        records: Sequence[DecisionRecord],
        index: list[Any],
    ) -> None:
        """The conversation (a put or an update), its inbox entry (`index`, if it changed) and its
        decision records in one transaction (the records beyond what one transaction holds are
        appended right after it)."""
        now = self.clock()
        write = {"Put" if "Item" in request else "Update": request}
        riding = records[:RIDING]
        while True:  # again only when another worker moved the chain's head since this one read it
            head = self._head or self._read_head()
            linked, moved = head.link(riding)
            puts = [{"Put": self._record_put(r, now)} for r in linked]
            try:
                self.client.transact_write_items(
                    TransactItems=[write, self._head_write(head, moved), *index, *puts]
                )
                break
            except self._client_error as exc:
                reasons = exc.response.get("CancellationReasons") or []
                first = reasons[0] if reasons else {}
                if first.get("Code") == "ConditionalCheckFailed":
                    old = first.get("Item") or {}
                    actual = int(old["version"]["N"]) if "version" in old else None
                    raise ConcurrencyConflict(conversation.id, expected_version, actual) from None
                if not _stale(reasons, 1):
                    raise self._unavailable("TransactWriteItems", exc) from exc
                self._read_head()
            except self._errors as exc:
                raise self._unavailable("TransactWriteItems", exc) from exc
        self._head = moved
        self.record_decisions(records[RIDING:])

    def _record_put(self, record: DecisionRecord, now: float) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": {"S": f"{self._audit_ns}#{record.conversation_id}#{record.id}"},
            "ns": {"S": self._audit_ns},
            "conversation_id": {"S": record.conversation_id},
            "updated_at": {"N": _number(record.at)},
            "record": {"S": record.to_json()},
            "chain": {"N": str(record.seq)},  # where it was appended, apart from what the record says
        }
        if self.audit_ttl is not None:
            item["expires_at"] = {"N": str(int(now + self.audit_ttl))}
        # Appended, never overwritten.
        return {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}

    def record_decisions(self, records: Sequence[DecisionRecord]) -> None:
        now = self.clock()
        for start in range(0, len(records), TRANSACTION_ITEMS - 1):
            some = records[start : start + TRANSACTION_ITEMS - 1]
            while True:
                head = self._head or self._read_head()
                linked, moved = head.link(some)
                puts = [{"Put": self._record_put(r, now)} for r in linked]
                try:
                    self.client.transact_write_items(TransactItems=[self._head_write(head, moved), *puts])
                    break
                except self._client_error as exc:
                    if not _stale(exc.response.get("CancellationReasons") or [], 0):
                        raise self._unavailable("TransactWriteItems", exc) from exc
                    self._read_head()
                except self._errors as exc:
                    raise self._unavailable("TransactWriteItems", exc) from exc
            self._head = moved

    # -- the chain over the trail (ADR 34) --------------------------------------------------------
    # Its head is an item ("#audit-head#<namespace>": seq, hash) that every append updates in its
    # transaction on the condition that it is still the head the records were linked after; a digest
    # is an item ("#audit-digest#<namespace>#<number>") put only if absent, listed by the index.

    def _read_head(self) -> ChainHead:
        item = self._call(
            "GetItem",
            partial(self.client.get_item, TableName=self.table, Key=self._head_key, ConsistentRead=True),
        ).get("Item")
        self._head = ChainHead() if item is None else ChainHead(int(item["seq"]["N"]), item["hash"]["S"])
        return self._head

    def _head_write(self, before: ChainHead, after: ChainHead) -> dict[str, Any]:
        values: dict[str, Any] = {":seq": {"N": str(after.seq)}, ":hash": {"S": after.hash}}
        if before.seq == 0:
            condition = "attribute_not_exists(pk)"
        else:
            condition, values[":before"] = "#s = :before", {"N": str(before.seq)}
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._head_key,
                "UpdateExpression": "SET #s = :seq, #h = :hash",
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#s": "seq", "#h": "hash"},
                "ExpressionAttributeValues": values,
            }
        }

    def audit_trail(self) -> Trail:
        keys = [item["pk"]["S"] for item in self._newest(self._audit_ns, sys.maxsize, 1000)]
        items = self._items(keys, "pk, #r, chain, updated_at")
        items.sort(key=lambda item: (int(item.get("chain", {"N": "0"})["N"]), float(item["updated_at"]["N"])))
        return Trail(
            [DecisionRecord.from_json(item["record"]["S"]) for item in items],
            self._digests(sys.maxsize),
            self._read_head(),
        )

    def audit_tip(self) -> tuple[ChainHead, AuditDigest | None]:
        last = self._digests(1, newest=True)
        return self._read_head(), last[0] if last else None

    def append_digest(self, digest: AuditDigest) -> bool:
        item = {
            "pk": {"S": f"{self._digest_ns}#{digest.number}"},
            "ns": {"S": self._digest_ns},
            "updated_at": {"N": str(digest.number)},
            "record": {"S": digest.to_json()},
        }
        try:
            self.client.put_item(
                TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except self._client_error as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise self._unavailable("PutItem", exc) from exc
        except self._errors as exc:
            raise self._unavailable("PutItem", exc) from exc
        return True

    def _digests(self, limit: int, *, newest: bool = False) -> list[AuditDigest]:
        """The digests by number (with `newest`, the `limit` last ones, newest first)."""
        query: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": INDEX,
            "KeyConditionExpression": "ns = :ns",
            "ExpressionAttributeValues": {":ns": {"S": self._digest_ns}},
            "ScanIndexForward": not newest,
        }
        keys: list[str] = []
        while len(keys) < limit:
            page = self._call("Query", partial(self.client.query, **query))
            keys += [item["pk"]["S"] for item in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        items = self._items(keys[:limit], "pk, #r, updated_at")
        digests = sorted(
            (AuditDigest.from_json(item["record"]["S"]) for item in items), key=lambda d: d.number
        )
        return digests[::-1] if newest else digests

    def _items(self, keys: Sequence[str], projection: str) -> list[dict[str, Any]]:
        """The items of `keys` (those still there), in no particular order, 100 a request."""
        found: list[dict[str, Any]] = []
        for first in range(0, len(keys), 100):
            wanted = [{"pk": {"S": key}} for key in keys[first : first + 100]]
            while wanted:
                request = {
                    self.table: {
                        "Keys": wanted,
                        "ProjectionExpression": projection,
                        "ExpressionAttributeNames": {"#r": "record"},
                    }
                }
                page = self._call("BatchGetItem", partial(self.client.batch_get_item, RequestItems=request))
                found += page.get("Responses", {}).get(self.table, [])
                wanted = page.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", [])
        return found

    def decision_records(self, conversation_id: str | None = None, limit: int = 100) -> list[DecisionRecord]:
        of_one = None if conversation_id is None else f"{self._audit_ns}#{conversation_id}#"
        keys = [item["pk"]["S"] for item in self._newest(self._audit_ns, limit, limit, key_prefix=of_one)]
        found = {
            item["pk"]["S"]: DecisionRecord.from_json(item["record"]["S"])
            for item in self._items(keys, "pk, #r")
        }
        records = [found[key] for key in keys if key in found]
        # A conversation id holding '#' may share the key prefix of another's: keep only this one's.
        return [r for r in records if conversation_id is None or r.conversation_id == conversation_id][:limit]

    def delete(self, conversation_id: str) -> bool:
        self._memory.forget(conversation_id)
        self._call(
            "DeleteItem",
            lambda: self.client.delete_item(
                TableName=self.table, Key={"pk": {"S": self._waiting_pk(conversation_id)}}
            ),
        )
        old = self._call(
            "DeleteItem",
            lambda: self.client.delete_item(
                TableName=self.table,
                Key={"pk": {"S": self._pk(conversation_id)}},
                ReturnValues="ALL_OLD",
            ),
        ).get("Attributes")
        return old is not None

    def list_ids(self, limit: int = 100) -> list[str]:
        prefix = len(self.namespace) + 1
        found = self._newest(self.namespace, limit, min(limit, 1000))
        return [item["pk"]["S"][prefix:] for item in found[:limit]]

    def list_after(
        self, position: Position | None, limit: int, *, owner: str | None = None
    ) -> list[Position]:
        """A page of the list: a query of the index (``ns``, ``updated_at``) from the position's key on,
        so its cost follows `limit`, not the number stored. Conversations saved at the same moment
        come in DynamoDB's order, which the next page's start key keeps."""
        index, key, value = INDEX, "ns", self.namespace
        if owner is not None and self._owners_indexed():
            index, key, value = OWNER_INDEX, "owner_ns", self._owner_ns(owner)
        start = None
        if position is not None:
            start = {
                key: {"S": value},
                "updated_at": {"N": _number(position.order)},
                "pk": {"S": self._pk(position.conversation_id)},
            }
        prefix = len(self.namespace) + 1
        found = self._newest(value, limit, min(limit, 1000), start=start, index=index, key=key)
        return [Position(float(item["updated_at"]["N"]), item["pk"]["S"][prefix:]) for item in found[:limit]]

    def _owners_indexed(self) -> bool:
        """Whether the table has the owners' index and every conversation in it (its mark, read once)."""
        if self._owner_index is None:
            mark = self._call(
                "GetItem",
                lambda: self.client.get_item(TableName=self.table, Key={"pk": {"S": OWNERS_MARK}}),
            )
            self._owner_index = "Item" in mark
        return self._owner_index

    def _owner_ns(self, owner: str) -> str:
        return f"{self.namespace}#{owner}"

    def saved_before(self, moment: float) -> list[str]:
        """A query of the index (``ns``, ``updated_at``) for the times before `moment`: the oldest,
        whatever the table holds."""
        query: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": INDEX,
            "KeyConditionExpression": "ns = :ns AND updated_at < :moment",
            "ExpressionAttributeValues": {":ns": {"S": self.namespace}, ":moment": {"N": _number(moment)}},
        }
        prefix = len(self.namespace) + 1
        found: list[str] = []
        while True:
            page = self._call("Query", partial(self.client.query, **query))
            found += [item["pk"]["S"][prefix:] for item in page.get("Items", []) if not self._expired(item)]
            if "LastEvaluatedKey" not in page:
                return found
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _newest(
        self,
        ns: str,
        limit: int,
        page_size: int,
        key_prefix: str | None = None,
        start: dict[str, Any] | None = None,
        index: str = INDEX,
        key: str = "ns",
    ) -> list[dict[str, Any]]:
        """The unexpired items of `ns` on the index (those whose key starts with `key_prefix`), newest
        first, read a page of `page_size` at a time until there are at least `limit` (or no more); or
        those whose `key` is `ns` on another `index`."""
        found: list[dict[str, Any]] = []
        query: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": index,
            "KeyConditionExpression": f"{key} = :ns",
            "ExpressionAttributeValues": {":ns": {"S": ns}},
            "ScanIndexForward": False,
            "Limit": page_size,
        }
        if start is not None:
            query["ExclusiveStartKey"] = start
        if key_prefix is not None:
            query["FilterExpression"] = "begins_with(pk, :prefix)"
            query["ExpressionAttributeValues"][":prefix"] = {"S": key_prefix}
        while len(found) < limit:
            page = self._call("Query", partial(self.client.query, **query))
            found += [item for item in page.get("Items", []) if not self._expired(item)]
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return found

    # -- the table --------------------------------------------------------------------------------

    # A cancel request is an item of its own (pk "#cancel#<namespace>#<id>"), so every worker on the
    # table sees it; DynamoDB's TTL removes it an hour on, as Redis does its key.
    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        item = {
            "pk": {"S": self._cancel_pk(conversation_id)},
            "at": {"N": _number(at)},
            "expires_at": {"N": str(int(at + CANCEL_KEPT))},
        }
        self._call("PutItem", lambda: self.client.put_item(TableName=self.table, Item=item))

    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        item = self._call(
            "GetItem",
            lambda: self.client.get_item(
                TableName=self.table, Key={"pk": {"S": self._cancel_pk(conversation_id)}}, ConsistentRead=True
            ),
        ).get("Item")
        return item is not None and float(item["at"]["N"]) >= since

    # Standing grants (docs/approvals.md, "Grants"): every grant of the namespace in one item (pk
    # "#grants#<namespace>"), read with a consistent read, so that a revocation is seen at once by the
    # next turn on any worker (the index is eventually consistent); written under a version condition.
    def add_grant(self, grant: Grant) -> None:
        self._change_grants(lambda grants: {**grants, grant.id: grant})

    def revoke_grant(self, grant_id: str, *, by: str, at: float) -> Grant | None:
        changed = self._change_grants(
            lambda grants: (
                {**grants, grant_id: grants[grant_id].revoked(by=by, at=at)} if grant_id in grants else None
            )
        )
        return None if changed is None else changed[grant_id]

    def delete_grants(self, grant_ids: Sequence[str]) -> None:
        """Out of the namespace's one item of grants (which DynamoDB caps at 400 KB: ended grants
        forgotten keep it from filling)."""
        gone = set(grant_ids)
        self._change_grants(
            lambda grants: (
                {i: g for i, g in grants.items() if i not in gone} if gone & grants.keys() else None
            )
        )

    def list_grants(self) -> list[Grant]:
        return list(self._grants()[0].values())

    def _grants(self) -> tuple[dict[str, Grant], int]:
        item = self._call(
            "GetItem",
            lambda: self.client.get_item(TableName=self.table, Key=self._grants_key, ConsistentRead=True),
        ).get("Item")
        if item is None:
            return {}, 0
        grants = [Grant.from_dict(g) for g in json.loads(item["record"]["S"])]
        return {g.id: g for g in grants}, int(item["version"]["N"])

    def _change_grants(
        self, change: Callable[[dict[str, Grant]], dict[str, Grant] | None]
    ) -> dict[str, Grant] | None:
        """Apply `change` to the namespace's grants (None: nothing to write), again if another writer
        wrote them meanwhile; the grants as written."""
        while True:
            grants, version = self._grants()
            changed = change(grants)
            if changed is None:
                return None
            item = {
                **self._grants_key,
                "version": {"N": str(version + 1)},
                "record": {"S": json.dumps([g.to_dict() for g in changed.values()])},
            }
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item=item,
                    ConditionExpression="attribute_not_exists(pk) OR version = :version",
                    ExpressionAttributeValues={":version": {"N": str(version)}},
                )
            except self._client_error as exc:
                if _code(exc) == "ConditionalCheckFailedException":
                    continue
                raise self._unavailable("PutItem", exc) from exc
            except self._errors as exc:
                raise self._unavailable("PutItem", exc) from exc
            return changed

    @property
    def _grants_key(self) -> dict[str, Any]:
        return {"pk": {"S": f"#grants#{self.namespace}"}}

    def create_table(self, *, wait: bool = True) -> None:
        """Create the table with its index (on-demand billing) and turn on TTL on ``expires_at``.
        An existing table is left as it is."""
        try:
            self.client.create_table(
                TableName=self.table,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "ns", "AttributeType": "S"},
                    {"AttributeName": "updated_at", "AttributeType": "N"},
                    {"AttributeName": "owner_ns", "AttributeType": "S"},
                ],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                GlobalSecondaryIndexes=[
                    {
                        "IndexName": name,
                        "KeySchema": [
                            {"AttributeName": key, "KeyType": "HASH"},
                            {"AttributeName": "updated_at", "KeyType": "RANGE"},
                        ],
                        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["expires_at"]},
                    }
                    for name, key in ((INDEX, "ns"), (OWNER_INDEX, "owner_ns"))
                ],
            )
        except self._client_error as exc:
            if _code(exc) == "ResourceInUseException":
                return
            raise self._unavailable("CreateTable", exc) from exc
        except self._errors as exc:
            raise self._unavailable("CreateTable", exc) from exc
        if wait:
            self.client.get_waiter("table_exists").wait(
                TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
            )
        self._call(
            "UpdateTimeToLive",
            lambda: self.client.update_time_to_live(
                TableName=self.table,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
            ),
        )
        # Made with the owners' and the inbox's indexes, before any conversation: every one will carry
        # its owner_ns and have its waiting calls in the inbox's index.
        for mark in (OWNERS_MARK, WAITING_MARK):
            self._call(
                "PutItem", partial(self.client.put_item, TableName=self.table, Item={"pk": {"S": mark}})
            )
        self._owner_index = self._waiting_whole = True

    # -- shared -----------------------------------------------------------------------------------

    @property
    def _audit_ns(self) -> str:
        return f"audit#{self.namespace}"

    @property
    def _digest_ns(self) -> str:
        return f"#audit-digest#{self.namespace}"

    @property
    def _head_key(self) -> dict[str, Any]:
        return {"pk": {"S": f"#audit-head#{self.namespace}"}}

    def _pk(self, conversation_id: str) -> str:
        return f"{self.namespace}#{conversation_id}"

    def _cancel_pk(self, conversation_id: str) -> str:
        # A namespace is never empty nor holds '#', so no conversation's key starts with '#'.
        return f"#cancel#{self.namespace}#{conversation_id}"

    def _expired(self, item: dict[str, Any]) -> bool:
        expires = item.get("expires_at")
        return expires is not None and float(expires["N"]) < self.clock()

    def _call(self, operation: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return call()
        except (self._client_error, *self._errors) as exc:
            raise self._unavailable(operation, exc) from exc

    def _unavailable(self, operation: str, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"dynamodb table {self.table}: {operation} failed: {exc}")

    def __repr__(self) -> str:
        return f"DynamoDBConversationRepository({self.table!r}, namespace={self.namespace!r})"


def _stale(reasons: Sequence[dict[str, Any]], at: int) -> bool:
    """Whether the transaction failed because the chain's head (its item at `at`) moved meanwhile."""
    return len(reasons) > at and reasons[at].get("Code") in ("ConditionalCheckFailed", "TransactionConflict")


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _number(value: float) -> str:
    return str(Decimal(repr(value)))


def _page(records: list[str]) -> bytes:
    return zlib.compress(page(records).encode("utf-8"))


def _records(held: Sequence[T], offset: int, k: int, write: Callable[[T], str]) -> list[str]:
    """The JSON texts of the records of page `k` among those `held` (from position `offset` on)."""
    first = k * PAGE - offset
    return list(map(write, held[max(first, 0) : first + PAGE]))


def _all_pages(c: Conversation) -> dict[str, bytes]:
    """Every page of a conversation held whole, by attribute."""
    pages = {}
    messages = list(map(MESSAGE.write, c.messages))
    calls = list(map(CALL.write, c.tool_calls.values()))
    for letter, records in (("m", messages), ("c", calls)):
        for k in range(0, len(records), PAGE):
            pages[f"{letter}{k // PAGE}"] = _page(records[k : k + PAGE])
    return pages


def _binary(item: dict[str, Any], attribute: str) -> bytes | None:
    value = item.get(attribute)
    return None if value is None else bytes(value["B"])


def _header(item: dict[str, Any], conversation_id: str) -> dict[str, Any]:
    """The header an item's ``body`` holds, parsed."""
    try:
        header = json.loads(zlib.decompress(item["body"]["B"]))
        if not isinstance(header, dict):
            raise ValueError(f"the body is a JSON {type(header).__name__}, not an object")
    except (zlib.error, KeyError, ValueError) as exc:
        raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc
    return header


def _window_pages(header: dict[str, Any], conversation_id: str) -> Pages:
    """The pages a windowed read needs of the conversation whose header this is."""
    try:
        return Pages.window(*window_of(header), int(header["messages"]), int(header["tool_calls"]))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise StoredConversationUnreadable(conversation_id, f"{type(exc).__name__}: {exc}") from exc


def _pages_of(item: dict[str, Any], letter: str) -> int:
    """How many pages of messages ('m') or calls ('c') the item holds: none for a body of format 1."""
    count = 0
    while f"{letter}{count}" in item:
        count += 1
    return count
