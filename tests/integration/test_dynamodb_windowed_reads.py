"""DynamoDB's windowed read (ADR 22): one strongly consistent GetItem of the header and the pages from
the window's on, so a turn under a summarizing window reads no more of a long conversation than of a
short one; and the saves after it, which rewrite a page the read held only in part."""

from __future__ import annotations

import json
import uuid
import zlib
from typing import Any

import pytest

from dcaf_like import ConcurrencyConflict, DynamoDBConversationRepository
from dcaf_like.domain import Conversation, ToolCallId, ToolInput
from dcaf_like.stores import dynamodb
from dcaf_like.stores._codec import conversation_to_dict
from dcaf_like.stores._schema import MESSAGE

AT = 1_700_000_000.0


def summarized(messages: int, recent: int = 9) -> Conversation:
    """`messages` messages (a question, a call with its result, an answer, ...), the summary covering
    all but the last `recent`."""
    c = Conversation.start(at=AT)
    while c.message_count < messages:
        n = c.message_count
        if n % 3 == 0:
            c.add_user_message(f"question {n}: which pods in prod are crash-looping?", at=AT + n)
        elif n % 3 == 1:
            c.add_assistant_message("", at=AT + n)
            call = c.request_tool_call(
                "list_pods", ToolInput.of({"namespace": "prod"}), requires_approval=False, at=AT + n
            )
            c.approve_tool_call(call.id.value, by="policy", at=AT + n)
            c.record_tool_result(call.id.value, '{"web-2": "CrashLoopBackOff"}', at=AT + n)
        else:
            c.add_assistant_message(f"answer {n}: web-2 has been crash-looping since 10:42.", at=AT + n)
    c.summarize("Pods of prod were listed; web-2 is crash-looping.", through=messages - recent)
    return c


class Reads:
    """The GetItem requests of a repository's client and the attributes each answer held."""

    def __init__(self, store: DynamoDBConversationRepository) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[set[str]] = []
        store.client.meta.events.register("provide-client-params.dynamodb.GetItem", self._asked)
        store.client.meta.events.register("after-call.dynamodb.GetItem", self._answered)

    def _asked(self, params: dict[str, Any], **_: Any) -> None:
        self.requests.append(dict(params))

    def _answered(self, parsed: dict[str, Any], **_: Any) -> None:
        self.answers.append(set(parsed.get("Item", {})))

    def pages(self) -> list[set[str]]:
        """The pages each answer held (``m3``, ``c1``)."""
        return [{a for a in answer if a[0] in "mc" and a[1:].isdigit()} for answer in self.answers]


@pytest.fixture
def table(dynamodb_endpoint: str) -> str:
    name = f"window-{uuid.uuid4().hex[:8]}"
    DynamoDBConversationRepository(name, region="eu-west-1", endpoint_url=dynamodb_endpoint).create_table()
    return name


@pytest.fixture
def repository(table: str, dynamodb_endpoint: str) -> Any:
    def make() -> DynamoDBConversationRepository:
        return DynamoDBConversationRepository(table, region="eu-west-1", endpoint_url=dynamodb_endpoint)

    return make


def same_transcript(recent: Conversation, whole: Conversation) -> None:
    start = recent.message_offset
    assert (start, recent.call_offset) == whole.window_start()
    assert [MESSAGE.to_dict(m) for m in recent.messages] == [
        MESSAGE.to_dict(m) for m in whole.messages[start:]
    ]
    assert list(recent.tool_calls) == list(whole.tool_calls)[recent.call_offset :]
    assert (recent.message_count, recent.summary, recent.version) == (
        whole.message_count,
        whole.summary,
        whole.version,
    )


@pytest.mark.parametrize("messages", [100, 1000])
def test_a_windowed_read_fetches_the_pages_of_the_window_whatever_the_conversations_length(
    repository: Any, messages: int
) -> None:
    store = repository()
    conversation = summarized(messages)
    store.save(conversation, 0)
    whole = store.get(conversation.id)
    reads = Reads(store)

    recent = store.get_recent(conversation.id)

    assert recent is not None
    assert whole is not None
    same_transcript(recent, whole)
    [asked] = reads.requests  # one round trip: the save told the repository where the window is
    assert asked["ConsistentRead"] is True
    last = (messages - 1) // 64
    assert reads.pages() == [{f"m{last}", f"c{(conversation.call_count - 1) // 64}"}]
    assert len(whole.messages) - len(recent.messages) >= messages - 64


def test_a_repository_that_never_saw_the_conversation_reads_its_window_in_a_second_request(
    repository: Any,
) -> None:
    conversation = summarized(1000)
    repository().save(conversation, 0)
    store = repository()  # another worker's, say
    reads = Reads(store)

    recent = store.get_recent(conversation.id)
    store.get_recent(conversation.id)

    whole = store.get(conversation.id)
    assert recent is not None
    assert whole is not None
    same_transcript(recent, whole)
    # The first two pages of each, then the window's; then, remembered, the window's at once.
    assert reads.pages()[:3] == [{"m0", "m1", "c0", "c1"}, {"m15", "c5"}, {"m15", "c5"}]


@pytest.mark.parametrize("remembered", [True, False], ids=["remembered", "read-again"])
def test_a_turn_on_a_windowed_read_saves_the_records_before_the_window_in_the_page_it_rewrites(
    repository: Any, remembered: bool
) -> None:
    """The window starts inside a page (message 91 of page 1: 64 to 127); a turn adds to that page,
    which the save rewrites whole: with the 27 records before the window, which the read left out."""
    store = repository()
    conversation = summarized(100)
    store.save(conversation, 0)
    recent = store.get_recent(conversation.id)
    assert recent is not None
    assert recent.message_offset == 91
    expected = store.get(conversation.id)
    assert expected is not None
    for c in (recent, expected):
        c.add_user_message("and now?", at=AT + 200)
        c.add_assistant_message("", at=AT + 201)
        c.request_tool_call(
            "list_pods",
            ToolInput.of({"namespace": "prod"}),
            requires_approval=False,
            call_id=ToolCallId("tc_new"),
            at=AT + 201,
        )
        c.approve_tool_call("tc_new", by="policy", at=AT + 201)
        c.record_tool_result("tc_new", "{}", at=AT + 202)
        c.add_assistant_message("still crash-looping.", at=AT + 203)
    saving = store if remembered else repository()
    reads = Reads(saving)

    saving.save(recent, conversation.version)

    pages = [r for r in reads.requests if not r["Key"]["pk"]["S"].startswith("#audit-head#")]
    assert len(pages) == (0 if remembered else 1)  # else the page, at the version expected
    # (A repository that has not appended a decision record yet reads the audit chain's head once.)
    saved = repository().get(conversation.id)
    assert saved is not None
    assert conversation_to_dict(saved) == conversation_to_dict(expected)
    assert saved.message_count == 103


def test_a_save_that_must_read_the_left_out_records_of_a_newer_version_is_a_conflict(
    repository: Any,
) -> None:
    conversation = summarized(100)
    repository().save(conversation, 0)
    late = repository().get_recent(conversation.id)
    first = repository().get(conversation.id)
    assert late is not None
    assert first is not None
    first.add_user_message("first", at=AT + 300)
    repository().save(first, conversation.version)
    late.add_user_message("late", at=AT + 301)

    with pytest.raises(ConcurrencyConflict):
        repository().save(late, conversation.version)

    stored = repository().get(conversation.id)
    assert stored is not None
    assert stored.messages[-1].text == "first"


def test_an_item_written_before_windows_is_read_whole(repository: Any, table: str) -> None:
    """A header without a window (written by an earlier version) reads as the whole conversation."""
    store = repository()
    conversation = summarized(200)
    store.save(conversation, 0)
    key = {"pk": {"S": f"default#{conversation.id}"}}
    item = store.client.get_item(TableName=table, Key=key)["Item"]
    header = json.loads(zlib.decompress(item["body"]["B"]))
    del header["window"]
    item["body"] = {"B": zlib.compress(json.dumps(header).encode())}
    store.client.put_item(TableName=table, Item=item)

    recent = repository().get_recent(conversation.id)

    assert recent is not None
    assert (recent.message_offset, recent.call_offset) == (0, 0)
    assert [MESSAGE.to_dict(m) for m in recent.messages] == [
        MESSAGE.to_dict(m) for m in conversation.messages
    ]


def test_a_window_of_more_pages_than_an_expression_may_name_is_read_whole(
    repository: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dynamodb, "MOST_PROJECTED", 3)  # 200 pages take 12,800 messages
    store = repository()
    conversation = summarized(300, recent=200)  # the window holds messages 100 to 299: pages 1 to 4
    store.save(conversation, 0)

    recent = store.get_recent(conversation.id)

    assert recent is not None
    assert (recent.message_offset, recent.message_count) == (0, 300)


def test_a_save_and_its_inbox_entry_are_written_together_or_not_at_all(repository: Any) -> None:
    """docs/approvals.md, "One inbox": a call waiting for approval is in the index exactly when the
    save that made it wait is stored. A write that fails leaves neither (the save is reported failed
    and the conversation stays as it was), never a stored save without its entry."""
    store = repository()
    c = Conversation.start(at=AT)
    c.add_user_message("delete web-1", at=AT)
    store.save(c, 0)
    saved_at = c.version
    c.add_assistant_message("", at=AT + 1)
    c.request_tool_call("delete_pod", ToolInput.of({"name": "web-1"}), requires_approval=True, at=AT + 1)

    def refuse(params: dict[str, Any], **_: Any) -> None:  # the inbox entry's write fails, however sent
        if "#waiting#" in repr(params):
            raise store._client_error({"Error": {"Code": "InternalServerError", "Message": "down"}}, "Write")

    for operation in ("PutItem", "UpdateItem", "TransactWriteItems"):
        store.client.meta.events.register(f"before-call.dynamodb.{operation}", refuse)
    with pytest.raises(dynamodb.StoreUnavailable):
        store.save(c, saved_at)

    fresh = repository()
    stored = fresh.get(c.id)
    assert stored is not None
    assert (stored.version, stored.pending_tool_calls) == (saved_at, [])
    assert fresh.list_waiting() == []
