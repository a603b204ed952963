"""The repository contract: every conversation store passes the same suite.

Adding a store = adding a factory to ``STORES``. Redis is the real server on 127.0.0.1:6379, PostgreSQL the
real server on 127.0.0.1:5432 (in a database of the session's own); DynamoDB is moto's emulator on a
loopback port.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dcaf_like import ConcurrencyConflict, ConversationRepository, InMemoryConversationRepository
from dcaf_like.domain import (
    ApprovalPolicy,
    Conversation,
    DeciderKind,
    DecisionOutcome,
    DecisionRecord,
    Identity,
    Message,
    MessageContent,
    PlatformContext,
    Role,
    TaskOutcome,
    ToolCallId,
    ToolInput,
    Trusted,
    approvers,
    attachment,
)
from dcaf_like.domain.trail import AuditDigest, AuditKey, ChainHead, record_hash, verify
from dcaf_like.stores._codec import conversation_to_dict
from dcaf_like.stores._schema import MESSAGE

Factory = Callable[..., ConversationRepository]
"""``make(namespace="default", **options)``: a repository on the store under test."""

STORES = ["memory", "sqlite", "redis", "dynamodb", "postgres"]


@pytest.fixture(params=STORES)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    made: list[ConversationRepository] = []
    kind = request.param

    def factory(namespace: str = "default", **options: Any) -> ConversationRepository:
        if kind == "memory":
            assert namespace == "default", "the in-memory store has no namespaces"
            repository: ConversationRepository = (
                InMemoryConversationRepository(**options)
                if options
                else shared.setdefault("memory", InMemoryConversationRepository())
            )
        elif kind == "sqlite":
            from dcaf_like import SqliteConversationRepository

            repository = SqliteConversationRepository(tmp_path / "c.db", namespace=namespace, **options)
        elif kind == "redis":
            from dcaf_like import RedisConversationRepository

            prefix = request.getfixturevalue("redis_prefix")
            url = request.getfixturevalue("redis_url")
            repository = RedisConversationRepository(url, prefix=prefix, namespace=namespace, **options)
        elif kind == "postgres":
            from dcaf_like import PostgresConversationRepository

            url = request.getfixturevalue("postgres_url")
            table = request.getfixturevalue("postgres_table")
            repository = PostgresConversationRepository(url, table=table, namespace=namespace, **options)
        else:
            from dcaf_like import DynamoDBConversationRepository

            endpoint = request.getfixturevalue("dynamodb_endpoint")
            table = shared.setdefault("table", f"conversations-{uuid.uuid4().hex[:8]}")
            repository = DynamoDBConversationRepository(
                table, region="eu-west-1", endpoint_url=endpoint, namespace=namespace, **options
            )
            repository.create_table()
        made.append(repository)
        return repository

    shared: dict[str, Any] = {}
    yield factory
    for repository in made:
        close = getattr(repository, "close", None)
        if close is not None:
            close()


def full_conversation(conversation_id: str | None = None) -> Conversation:
    """A conversation with every field set and a tool call in every state."""
    c = Conversation.start(conversation_id, at=1_700_000_000.25)
    c.use_platform_context(PlatformContext(tenant="acme", aws_secret_access_key="s3cr3t"))
    c.replace_session({"cluster": "prod-eu", "nested": {"list": [1, 2.5, None, True]}})
    failed_task = c.open_task(at=1_700_000_000.5)
    c.end_task(failed_task.id, TaskOutcome.FAILED, "the model timed out")
    c.open_task(at=1_700_000_000.75)
    c.add_user_message("clean up the crashing pods", at=1_700_000_001.0)
    c.add_assistant_message("I will look, then delete.", at=1_700_000_002.0)
    for name in ("executed", "failed", "rejected", "edited", "pending", "approved"):
        c.request_tool_call(
            "delete_pod",
            ToolInput.of({"name": f"web-{name}", "namespace": "prod", "grace": 30}),
            requires_approval=True,
            editable=name == "edited",
            description="Delete a pod.",
            approval_reason="deletes are dangerous",
            approval_ttl=600 if name == "pending" else None,
            at=1_700_000_003.0,
        )
    calls = {
        call.proposed_input.as_dict()["name"].removeprefix("web-"): call.id.value
        for call in c.tool_calls.values()
    }
    c.approve_tool_call(calls["executed"], by="alice", at=1_700_000_004.0)
    c.record_tool_result(calls["executed"], 'pod "web-executed" deleted', at=1_700_000_005.0)
    c.approve_tool_call(calls["failed"], by="alice", at=1_700_000_004.0)
    c.record_tool_failure(calls["failed"], "LookupError: not found", at=1_700_000_005.0)
    c.reject_tool_call(calls["rejected"], "not in business hours", by="bob", at=1_700_000_004.0)
    c.approve_tool_call(
        calls["edited"], by="carol", edited_input=ToolInput.of({"name": "web-2", "namespace": "prod"})
    )
    c.approve_tool_call(calls["approved"], by="dave", at=1_700_000_006.0)
    c.summarize("The user asked to clean up the crashing pods.", through=1)
    return c


def same(a: Conversation, b: Conversation) -> bool:
    return conversation_to_dict(a) == conversation_to_dict(b)


# -- reading and writing ------------------------------------------------------------------------------


def test_an_unknown_conversation_is_absent(make: Factory) -> None:
    assert make().get("no-such-conversation") is None


def test_every_domain_field_survives_a_round_trip(make: Factory) -> None:
    store = make()
    original = full_conversation()

    store.save(original, 0)
    loaded = store.get(original.id)

    assert loaded is not None
    assert same(loaded, original)
    assert loaded.version == original.version
    assert [c.status.value for c in loaded.tool_calls.values()] == [
        "executed", "failed", "rejected", "approved", "pending", "approved"
    ]  # fmt: skip
    edited = next(c for c in loaded.tool_calls.values() if c.edited)
    assert edited.proposed_input.as_dict()["name"] == "web-edited"
    assert edited.effective_input.as_dict() == {"name": "web-2", "namespace": "prod"}
    assert loaded.session == {"cluster": "prod-eu", "nested": {"list": [1, 2.5, None, True]}}
    assert loaded.messages[1].tool_call_ids == tuple(original.tool_calls)
    failed, current = loaded.tasks.values()
    assert (failed.id, failed.outcome) == (f"{original.id}~1", TaskOutcome.FAILED)
    assert failed.note == "the model timed out"
    assert (current.id, current.first_message, current.outcome) == (f"{original.id}~2", 0, None)
    assert loaded.task(current.id).opened_at == 1_700_000_000.75
    assert loaded.summary is not None
    assert (loaded.summary.text, loaded.summary.through) == (
        "The user asked to clean up the crashing pods.",
        1,
    )


def test_a_question_and_the_call_waiting_for_it_survive_saves_and_its_answer_too(make: Factory) -> None:
    """Questions are stored with the conversation (docs/runs.md, "Questions"): a restart or another
    worker finds the open question, and then its answer, as they were."""
    store = make()
    conversation = Conversation.start("conv_asks", at=1_700_000_000.0)
    conversation.add_user_message("scale web to zero", at=1_700_000_000.0)
    conversation.add_assistant_message("", at=1_700_000_001.0)
    call = conversation.request_tool_call("scale", ToolInput.of({"name": "web"}), requires_approval=False)
    conversation.approve_tool_call(call.id.value, by="policy", kind=DeciderKind.POLICY, at=1_700_000_001.0)
    conversation.lease_tool_call(call.id.value, "worker-a", until=1_700_000_061.0)
    pick = conversation.ask_question(call.id.value, "selection", "Which namespace?", ["prod", "stäging"])
    store.save(conversation, 0)

    asked = store.get(conversation.id)
    assert asked is not None
    assert same(asked, conversation)
    assert [(q.id, q.kind.value, q.options, q.status.value) for q in asked.open_questions] == [
        (pick.id, "selection", ["prod", "stäging"], "open")
    ]
    assert asked.tool_call(call.id.value).status.value == "asking"

    asked.answer_question(pick.id, "stäging", by="alice", worker="worker-b", until=1_700_000_099.0)
    store.save(asked, conversation.version)

    answered = store.get(conversation.id)
    assert answered is not None
    assert same(answered, asked)
    assert (answered.question(pick.id).value, answered.question(pick.id).answered_by) == ("stäging", "alice")
    assert answered.tool_call(call.id.value).lease_owner == "worker-b"


def test_a_running_calls_progress_survives_saves_and_goes_when_it_settles(make: Factory) -> None:
    """docs/runs.md, "Tools on a job engine": a job's latest progress report is kept on its call in the
    store, so any API worker that reads the conversation sees it; the settled call keeps none."""
    store = make()
    conversation = Conversation.start("conv_progress", at=1_700_000_000.0)
    conversation.add_user_message("snapshot vol-7", at=1_700_000_000.0)
    conversation.add_assistant_message("", at=1_700_000_001.0)
    call = conversation.request_tool_call(
        "snapshot", ToolInput.of({"volume": "vol-7"}), requires_approval=False
    )
    conversation.approve_tool_call(call.id.value, by="policy", kind=DeciderKind.POLICY, at=1_700_000_001.0)
    conversation.lease_tool_call(call.id.value, "worker-a", until=1_700_000_061.0)
    store.save(conversation, 0)
    running = store.get(conversation.id)
    assert running is not None
    assert running.tool_call(call.id.value).progress is None

    running.report_progress(call.id.value, "copying blocks", 0.25)
    store.save(running, conversation.version)
    reported = store.get(conversation.id)
    assert reported is not None
    assert same(reported, running)
    kept = reported.tool_call(call.id.value)
    assert (kept.progress, kept.progress_fraction) == ("copying blocks", 0.25)

    reported.record_tool_result(call.id.value, "snap-1", at=1_700_000_030.0)
    store.save(reported, running.version)
    settled = store.get(conversation.id)
    assert settled is not None
    done = settled.tool_call(call.id.value)
    assert (done.progress, done.progress_fraction) == (None, None)


def test_a_questions_window_its_expiry_and_their_audit_records_survive_saves(make: Factory) -> None:
    """A question's window (`expires_at`) is stored with it, and so is its expiry by the system; the
    records of the answer and the expiry are appended to the trail, naming the question."""
    store = make()
    conversation = Conversation.start("conv_window", at=1_700_000_000.0)
    conversation.add_user_message("scale web and api to zero", at=1_700_000_000.0)
    conversation.add_assistant_message("", at=1_700_000_001.0)
    calls = [
        conversation.request_tool_call("scale", ToolInput.of({"name": name}), requires_approval=False)
        for name in ("web", "api")
    ]
    for call in calls:
        conversation.approve_tool_call(
            call.id.value, by="policy", kind=DeciderKind.POLICY, at=1_700_000_001.0
        )
        conversation.lease_tool_call(call.id.value, "worker-a", until=1_700_000_061.0)
    first, second = (
        conversation.ask_question(c.id.value, "confirmation", "Sure?", ttl=60.0, at=1_700_000_002.5)
        for c in calls
    )
    store.save(conversation, 0)

    asked = store.get(conversation.id)
    assert asked is not None
    assert same(asked, conversation)
    assert [q.expires_at for q in asked.questions.values()] == [1_700_000_062.5, 1_700_000_062.5]

    asked.answer_question(
        first.id, True, by="alice", worker="worker-b", until=1_700_000_099.0, at=1_700_000_010.0
    )
    asked.expire_questions(at=1_700_000_070.0)
    store.save(asked, conversation.version)

    settled = store.get(conversation.id)
    assert settled is not None
    assert same(settled, asked)
    expired = settled.question(second.id)
    assert (expired.status.value, expired.answered_by, expired.answered_at, expired.expires_at) == (
        "expired",
        "system",
        1_700_000_070.0,
        1_700_000_062.5,
    )
    assert settled.tool_call(calls[1].id.value).status.value == "failed"
    records = store.decision_records(conversation.id)  # newest first
    assert [(r.outcome, r.question_id, r.call_id, r.decided_by, r.reason) for r in records[:2]] == [
        (DecisionOutcome.EXPIRED, second.id, calls[1].id.value, "system", "expired"),
        (DecisionOutcome.ANSWERED, first.id, calls[0].id.value, "alice", ""),
    ]


def test_the_images_and_files_of_a_message_survive_a_round_trip_and_a_later_save(make: Factory) -> None:
    store = make()
    image = attachment("image", media_type="image/png", data="iVBORw0KGgo=")
    by_url = attachment("image", url="https://example.com/pod.png")
    report = attachment("file", media_type="application/pdf", data="JVBERi0=", name="report é.pdf")
    conversation = Conversation.start(at=1_700_000_000.0)
    conversation.add_user_message("what is wrong here?", attachments=(image, by_url), at=1_700_000_001.0)
    conversation.add_assistant_message("A crash loop.", at=1_700_000_002.0)
    store.save(conversation, 0)
    loaded = store.get(conversation.id)
    assert loaded is not None
    loaded.add_user_message("and this?", attachments=(report,), at=1_700_000_003.0)  # a delta save
    store.save(loaded, conversation.version)

    again = store.get(conversation.id)

    assert again is not None
    assert [m.attachments for m in again.messages] == [(image, by_url), (), (report,)]


def test_the_images_and_files_a_tool_returned_survive_a_round_trip_with_its_call(make: Factory) -> None:
    store = make()
    graph = attachment("image", media_type="image/png", data="iVBORw0KGgo=")
    logs = attachment("file", media_type="application/gzip", data="H4sI", name="web-2.log.gz")
    conversation = full_conversation()
    store.save(conversation, 0)
    loaded = store.get(conversation.id)
    assert loaded is not None
    [pending] = loaded.pending_tool_calls
    loaded.approve_tool_call(pending.id.value, by="erin", at=1_700_000_008.0)
    loaded.record_tool_result(pending.id.value, "CPU graph", attachments=(graph, logs), at=1_700_000_009.0)
    store.save(loaded, conversation.version)  # a delta save

    again = store.get(conversation.id)

    assert again is not None
    assert again.tool_call(pending.id.value).result_attachments == (graph, logs)
    assert [c.result_attachments for c in again.tool_calls.values() if c.id != pending.id] == [()] * 5


def test_a_partial_approval_its_rule_and_requester_survive_a_round_trip_and_a_delta_save(
    make: Factory,
) -> None:
    """docs/approvals.md, "Approvals by teams": the count a call has reached is stored with it."""
    store = make()
    conversation = full_conversation()
    [pending] = conversation.pending_tool_calls
    pending.requested_by = "carol"
    pending.approvers = approvers(1, "leads", then=approvers(2, "sre"))
    store.save(conversation, 0)
    loaded = store.get(conversation.id)
    assert loaded is not None
    policy = ApprovalPolicy(groups={"leads": {"lena"}, "sre": {"alice"}})
    lena = Trusted(Identity("lena", frozenset({"approve"})))
    loaded.approve_tool_call(pending.id.value, by="lena", policy=policy, trusted=lena, at=1_700_000_008.0)
    store.save(loaded, conversation.version)  # a delta save

    again = store.get(conversation.id)

    assert again is not None
    call = again.tool_call(pending.id.value)
    assert (call.requested_by, call.approvers, call.status) == ("carol", pending.approvers, pending.status)
    assert [(a.by, a.at, a.stage) for a in call.approvals] == [("lena", 1_700_000_008.0, 0)]
    assert call.approvals[0].fingerprint == call.approved_fingerprint
    assert [c.approvals for c in again.tool_calls.values() if c.id != pending.id] == [()] * 5
    records = store.decision_records(conversation.id)
    assert [r.decided_by for r in records if r.outcome is DecisionOutcome.COUNTED] == ["lena"]


def test_credentials_in_the_platform_context_are_never_stored(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    store.save(conversation, 0)

    loaded = store.get(conversation.id)

    assert loaded is not None
    assert dict(loaded.platform_context) == {"tenant": "acme"}


def test_a_session_that_is_not_json_is_refused_and_nothing_is_written(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    store.save(conversation, 0)
    saved_version = conversation.version
    conversation.replace_session({"when": {1, 2}})  # a set: JSON has none

    with pytest.raises(TypeError, match="set"):
        store.save(conversation, saved_version)

    loaded = store.get(conversation.id)
    assert loaded is not None
    assert loaded.version == saved_version
    assert loaded.session == {"cluster": "prod-eu", "nested": {"list": [1, 2.5, None, True]}}


def test_the_session_is_kept_as_json_reads_it_back(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    conversation.replace_session({"zones": ("eu-1", "eu-2"), "limits": {"pods": 3}})
    store.save(conversation, 0)
    conversation.session["limits"]["pods"] = 99  # a change after the save is not stored

    loaded = store.get(conversation.id)

    assert loaded is not None
    assert loaded.session == {"zones": ["eu-1", "eu-2"], "limits": {"pods": 3}}


def test_a_loaded_conversation_is_a_copy_until_saved(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    store.save(conversation, 0)

    loaded = store.get(conversation.id)
    assert loaded is not None
    loaded.add_assistant_message("not saved")

    again = store.get(conversation.id)
    assert again is not None
    assert same(again, conversation)


def test_successive_saves_advance_the_version(make: Factory) -> None:
    store = make()
    conversation = Conversation.start()
    conversation.add_user_message("one")
    store.save(conversation, 0)
    first = conversation.version
    conversation.add_assistant_message("two")

    store.save(conversation, first)

    loaded = store.get(conversation.id)
    assert loaded is not None
    assert loaded.version == conversation.version > first
    assert [m.text for m in loaded.messages] == ["one", "two"]


def test_a_turn_that_changes_an_old_call_and_adds_messages_and_calls_round_trips(make: Factory) -> None:
    """A save writes what changed (ADR 16): an old call decided, a call proposed on a message stored
    before, new messages; what is read back is the whole conversation."""
    store = make()
    conversation = full_conversation()
    conversation.add_assistant_message("One more thing to check.", at=1_700_000_007.0)
    store.save(conversation, 0)
    loaded = store.get(conversation.id)
    assert loaded is not None
    [pending] = loaded.pending_tool_calls
    loaded.approve_tool_call(pending.id.value, by="erin", at=1_700_000_008.0)
    loaded.record_tool_result(pending.id.value, "done", at=1_700_000_009.0)
    loaded.request_tool_call(  # on the last message, stored by the first save
        "get_pods", ToolInput.of({"namespace": "prod"}), requires_approval=False, at=1_700_000_010.0
    )
    loaded.add_assistant_message("All clean.", at=1_700_000_011.0)
    store.save(loaded, conversation.version)

    again = store.get(conversation.id)
    assert again is not None
    assert same(again, loaded)
    assert again.messages[-2].tool_call_ids == loaded.messages[-2].tool_call_ids != []
    assert again.tool_call(pending.id.value).result == "done"


def test_saves_of_one_loaded_conversation_in_a_row_each_write_their_changes(make: Factory) -> None:
    store = make()
    conversation = Conversation.start()
    conversation.add_user_message("one")
    store.save(conversation, 0)
    for n in range(2, 6):
        expected = conversation.version
        conversation.add_assistant_message(str(n))
        store.save(conversation, expected)

    loaded = store.get(conversation.id)
    assert loaded is not None
    assert [m.text for m in loaded.messages] == ["one", "2", "3", "4", "5"]


def test_a_conversation_not_loaded_from_the_store_is_saved_whole(make: Factory) -> None:
    """An object built in code (not read from the store) replaces what is stored, records and all."""
    store = make()
    conversation = full_conversation()
    store.save(conversation, 0)
    shorter = Conversation(id=conversation.id, version=conversation.version + 1, created_at=1.0)
    shorter.messages.append(Message(Role.USER, MessageContent("only this"), at=2.0))

    store.save(shorter, conversation.version)

    loaded = store.get(conversation.id)
    assert loaded is not None
    assert same(loaded, shorter)
    assert loaded.tool_calls == {}


# -- optimistic concurrency ------------------------------------------------------------------------


def test_creating_a_conversation_that_exists_is_a_conflict(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    store.save(conversation, 0)
    impostor = Conversation.start(conversation.id)
    impostor.add_user_message("overwrite")

    with pytest.raises(ConcurrencyConflict) as raised:
        store.save(impostor, 0)

    assert raised.value.actual_version == conversation.version
    loaded = store.get(conversation.id)
    assert loaded is not None
    assert same(loaded, conversation)


def test_a_stale_write_is_refused_and_writes_nothing(make: Factory) -> None:
    store = make()
    conversation = Conversation.start()
    conversation.add_user_message("hello")
    store.save(conversation, 0)
    read_version = conversation.version
    first = store.get(conversation.id)
    second = store.get(conversation.id)
    assert first is not None
    assert second is not None
    first.add_assistant_message("first writer")
    store.save(first, read_version)
    second.add_assistant_message("second writer")

    with pytest.raises(ConcurrencyConflict) as raised:
        store.save(second, read_version)

    assert raised.value.expected_version == read_version
    assert raised.value.actual_version == first.version
    loaded = store.get(conversation.id)
    assert loaded is not None
    assert [m.text for m in loaded.messages] == ["hello", "first writer"]


def test_saving_a_deleted_conversation_as_existing_is_a_conflict(make: Factory) -> None:
    store = make()
    conversation = Conversation.start()
    conversation.add_user_message("hello")
    store.save(conversation, 0)
    store.delete(conversation.id)
    conversation.add_assistant_message("late")

    with pytest.raises(ConcurrencyConflict):
        store.save(conversation, 1)

    assert store.get(conversation.id) is None


def test_of_many_simultaneous_writers_of_one_version_exactly_one_wins(make: Factory) -> None:
    store = make()
    conversation = Conversation.start()
    conversation.add_user_message("race")
    store.save(conversation, 0)
    version = conversation.version
    writers = 16
    barrier = threading.Barrier(writers)
    outcomes: list[str] = []

    def write(n: int) -> None:
        mine = store.get(conversation.id)
        assert mine is not None
        mine.add_assistant_message(f"writer {n}")
        barrier.wait()
        try:
            store.save(mine, version)
            outcomes.append(f"won {n}")
        except ConcurrencyConflict:
            outcomes.append("lost")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1
    assert outcomes.count("lost") == writers - 1
    loaded = store.get(conversation.id)
    assert loaded is not None
    assert loaded.messages[-1].text == f"writer {winners[0].split()[1]}"


# -- isolation ---------------------------------------------------------------------------------


def test_conversations_are_isolated_from_each_other(make: Factory) -> None:
    store = make()
    a = Conversation.start("conv-a")
    a.add_user_message("for a")
    b = Conversation.start("conv-b")
    b.add_user_message("for b")
    store.save(a, 0)
    store.save(b, 0)
    b.add_assistant_message("b only")
    store.save(b, 1)

    loaded_a = store.get("conv-a")
    assert loaded_a is not None
    assert [m.text for m in loaded_a.messages] == ["for a"]
    assert store.delete("conv-b")
    assert store.get("conv-a") is not None


@pytest.mark.parametrize(
    "make", ["sqlite", "redis", "dynamodb", "postgres"], indirect=True
)  # memory: one process, no sharing
def test_namespaces_sharing_a_store_do_not_see_each_other(make: Factory) -> None:
    ops = make(namespace="ops-agent")
    billing = make(namespace="billing-agent")
    conversation = Conversation.start("same-id")
    conversation.add_user_message("ops secret plan")
    ops.save(conversation, 0)

    assert billing.get("same-id") is None
    assert billing.list_ids() == []
    assert not billing.delete("same-id")
    other = Conversation.start("same-id")
    other.add_user_message("billing question")
    billing.save(other, 0)
    loaded = ops.get("same-id")
    assert loaded is not None
    assert loaded.messages[0].text == "ops secret plan"


# -- listing and deleting ----------------------------------------------------------------------------


def test_list_ids_gives_the_most_recently_updated_first(make: Factory) -> None:
    store = make()
    conversations = [Conversation.start(f"conv-{n}") for n in range(4)]
    for c in conversations:
        c.add_user_message("hi")
        store.save(c, 0)
    touched = conversations[1]
    touched.add_assistant_message("again")
    store.save(touched, 1)

    assert store.list_ids() == ["conv-1", "conv-3", "conv-2", "conv-0"]
    assert store.list_ids(limit=2) == ["conv-1", "conv-3"]


def pages_of(store: ConversationRepository, size: int) -> list[list[str]]:
    """The whole list, a page of `size` at a time, each page starting after the last one's end."""
    pages: list[list[str]] = []
    position = None
    while page := store.list_after(position, size):
        pages.append([p.conversation_id for p in page])
        position = page[-1]
    return pages


def test_the_list_is_read_a_page_at_a_time_each_starting_where_the_last_ended(make: Factory) -> None:
    """docs/stores.md, "Stores of any size": a page starts after the last one's position, and a
    conversation saved between pages moves to the front without repeating or hiding another."""
    now = [1_700_000_000.0]
    store = make(clock=lambda: now[0])
    for n in range(7):
        c = Conversation.start(f"conv-{n}")
        c.add_user_message("hi")
        now[0] += 0 if n in (3, 4, 5) else 1  # conv-2 to conv-5 are saved at the same moment
        store.save(c, 0)

    pages = pages_of(store, 3)
    listed = [i for page in pages for i in page]
    assert [len(page) for page in pages] == [3, 3, 1]
    assert listed[0] == "conv-6"
    assert listed[-2:] == ["conv-1", "conv-0"]
    assert sorted(listed[1:5]) == ["conv-2", "conv-3", "conv-4", "conv-5"]  # ties: each once
    assert listed == store.list_ids(100)

    first = store.list_after(None, 3)
    touched = store.get(listed[5])
    assert touched is not None
    touched.add_assistant_message("again")
    now[0] += 1
    store.save(touched, 1)
    rest = [p.conversation_id for p in store.list_after(first[-1], 100)]
    assert [p.conversation_id for p in first] + rest == [i for i in listed if i != listed[5]]
    assert store.list_after(None, 1)[0].conversation_id == listed[5]


def test_an_owners_page_lists_every_one_of_their_conversations_in_order(make: Factory) -> None:
    """docs/stores.md, "Stores of any size": with `owner`, every conversation of that owner is listed,
    newest first; a store that indexes owners (all but the in-memory one) lists no one else's, the others
    may (the list checks each conversation it reads)."""
    store = make()
    owners = ["alice", "bob", None, "alice", "bob", "alice"]
    for n, owner in enumerate(owners):
        c = Conversation.start(f"conv-{n}", owner=owner)
        c.add_user_message("hi")
        store.save(c, 0)

    listed = [p.conversation_id for p in store.list_after(None, 100, owner="alice")]

    alices = [i for i in listed if i in {"conv-0", "conv-3", "conv-5"}]
    assert alices == ["conv-5", "conv-3", "conv-0"]
    if type(store).__name__.startswith(("Sqlite", "Postgres", "Redis", "DynamoDB")):
        assert listed == alices
        first = store.list_after(None, 1, owner="alice")
        assert [p.conversation_id for p in store.list_after(first[-1], 100, owner="alice")] == alices[1:]


async def test_a_page_is_read_in_the_order_asked_with_none_for_a_missing_one(make: Factory) -> None:
    store = make()
    conversations = [Conversation.start(f"page-{n}") for n in range(3)]
    for c in conversations:
        c.add_user_message(f"hello {c.id}")
        store.save(c, 0)
    asked = ["page-2", "no-such-conversation", "page-0", "page-1"]

    for page in (store.get_many(asked), await store.aget_many(asked)):
        assert [c.id if c else None for c in page] == ["page-2", None, "page-0", "page-1"]
        assert [c.messages[0].text for c in page if c] == ["hello page-2", "hello page-0", "hello page-1"]
    assert store.get_many([]) == []
    close = getattr(store, "aclose", None)  # the asyncio client of this test's loop
    if close is not None:
        await close()


def test_delete_removes_a_conversation_once(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    store.save(conversation, 0)

    assert store.delete(conversation.id) is True
    assert store.get(conversation.id) is None
    assert conversation.id not in store.list_ids()
    assert store.delete(conversation.id) is False


# -- retention ---------------------------------------------------------------------------------------

DAY = 86_400.0
T0 = 1_700_000_000.0


def saved_at(
    store: ConversationRepository, clock: list[float], at: float, *, window: float | None = None
) -> str:
    """A conversation saved at `at`; with `window`, it waits for a decision that long."""
    clock[0] = at
    c = Conversation.start(at=at)
    c.add_user_message("delete web-1", at=at)
    if window is not None:
        c.add_assistant_message("", at=at)
        c.request_tool_call(
            "delete_pod", ToolInput.of({"name": "web-1"}), requires_approval=True, approval_ttl=window, at=at
        )
    store.save(c, 0)
    return c.id


def test_prune_forgets_what_retention_let_go_and_keeps_a_call_whose_window_is_open(make: Factory) -> None:
    clock = [T0]
    store = make(clock=lambda: clock[0])  # the in-memory store keeps no time: it reads the conversation's
    old = saved_at(store, clock, T0)
    window_closed = saved_at(store, clock, T0, window=DAY)
    window_open = saved_at(store, clock, T0, window=40 * DAY)
    recent = saved_at(store, clock, T0 + 10 * DAY)
    clock[0] = T0 + 31 * DAY

    would = store.prune(30 * DAY, now=clock[0], dry_run=True)
    kept_by_dry_run = store.get(old)
    gone = store.prune(30 * DAY, now=clock[0])
    again = store.prune(30 * DAY, now=clock[0])

    assert would == 2
    assert kept_by_dry_run is not None
    assert gone == 2
    assert again == 0
    assert store.get(old) is None
    assert store.get(window_closed) is None
    assert store.get(window_open) is not None
    assert store.get(recent) is not None
    assert set(store.list_ids()) == {window_open, recent}
    assert store.prune(30 * DAY, now=T0 + 41 * DAY) == 2  # the window closed, the retention passed


def test_the_conversations_a_prune_looks_at_include_every_one_saved_before_its_moment(make: Factory) -> None:
    """docs/stores.md, "Stores of any size": a store that reads them from an index by the time of the
    save still names every conversation saved before the moment (a prune never misses one)."""
    clock = [T0]
    store = make(clock=lambda: clock[0])
    before = [saved_at(store, clock, T0 + n) for n in range(3)]
    after = saved_at(store, clock, T0 + 10)

    looked_at = set(store.saved_before(T0 + 5))

    assert looked_at >= set(before)
    assert looked_at <= {*before, after}


# -- content -----------------------------------------------------------------------------------------

UNICODE = 'Ünïcödé ✓ — 日本語のテキスト — العربية — emoji 🚀🔥 — \u0000nul — "quotes" \\ back'


def test_unicode_and_a_large_history_round_trip(make: Factory) -> None:
    store = make()
    conversation = Conversation.start(f"unicode-{UNICODE[:6]}")
    conversation.replace_session({UNICODE: [UNICODE]})
    for n in range(600):
        conversation.add_user_message(f"{n} {UNICODE} " + "log line " * 20)
        conversation.add_assistant_message(f"{n} ok")
    conversation.request_tool_call("annotate", ToolInput.of({"text": UNICODE * 200}), requires_approval=True)

    store.save(conversation, 0)
    loaded = store.get(conversation.id)

    assert loaded is not None
    assert len(loaded.messages) == 1200
    assert same(loaded, conversation)
    assert len(conversation_to_dict(loaded)["messages"][0]["text"]) > 200


# -- asyncio ------------------------------------------------------------------------------------------


async def test_the_async_twins_read_write_and_conflict_like_the_sync_ones(make: Factory) -> None:
    store = make()
    conversation = full_conversation()

    await store.asave(conversation, 0)
    loaded = await store.aget(conversation.id)
    assert loaded is not None
    assert same(loaded, conversation)
    loaded.add_assistant_message("async")
    await store.asave(loaded, conversation.version)
    with pytest.raises(ConcurrencyConflict):
        await store.asave(conversation, conversation.version)

    results = await asyncio.gather(*(store.aget(conversation.id) for _ in range(5)))
    assert all(r is not None and r.version == loaded.version for r in results)
    assert store.get(conversation.id) is not None
    close = getattr(store, "aclose", None)
    if close is not None:
        await close()


# -- the audit trail ---------------------------------------------------------------------------------


def test_a_save_carrying_decisions_appends_their_records_and_nothing_more(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    assert len(conversation.unsaved_decisions) == 5

    store.save(conversation, 0)
    records = store.decision_records(conversation.id)
    conversation.add_assistant_message("a save without a decision")
    store.save(conversation, conversation.version - 1)

    assert conversation.unsaved_decisions == []
    assert store.decision_records(conversation.id) == records
    assert [r.at for r in records] == sorted((r.at for r in records), reverse=True)  # newest first
    assert sorted((r.decided_by, r.outcome.value) for r in records) == [
        ("alice", "approved"),
        ("alice", "approved"),
        ("bob", "rejected"),
        ("carol", "edited"),
        ("dave", "approved"),
    ]
    rejected = next(r for r in records if r.outcome is DecisionOutcome.REJECTED)
    call = conversation.tool_call(rejected.call_id)
    assert (rejected.tool_name, rejected.fingerprint, rejected.reason, rejected.at) == (
        "delete_pod",
        call.fingerprint,
        "not in business hours",
        1_700_000_004.0,
    )
    assert (rejected.decider, rejected.entrance, rejected.conversation_id) == (
        DeciderKind.HUMAN,
        "python",
        conversation.id,
    )


def test_decision_records_outlive_their_conversation(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    store.save(conversation, 0)

    assert store.delete(conversation.id)

    assert store.get(conversation.id) is None
    assert len(store.decision_records(conversation.id)) == 5


def test_a_save_that_loses_the_race_records_none_of_its_decisions(make: Factory) -> None:
    store = make()
    conversation = pending_conversation()
    store.save(conversation, 0)
    [call_id] = conversation.tool_calls
    winner, loser = store.get(conversation.id), store.get(conversation.id)
    assert winner is not None
    assert loser is not None
    winner.approve_tool_call(call_id, by="alice")
    loser.reject_tool_call(call_id, "no", by="mallory")

    store.save(winner, conversation.version)
    with pytest.raises(ConcurrencyConflict):
        store.save(loser, conversation.version)

    assert outcomes(store.decision_records(conversation.id)) == [("alice", "approved")]
    assert len(loser.unsaved_decisions) == 1  # not written: the conversation it belongs to was not


def test_a_refused_decision_is_recorded_without_touching_the_conversation(make: Factory) -> None:
    store = make()
    conversation = pending_conversation()
    store.save(conversation, 0)
    [call_id] = conversation.tool_calls

    store.record_decisions([conversation.refusal(call_id, "the arguments differ", by="mallory", at=5.0)])
    store.record_decisions([])

    [record] = store.decision_records(conversation.id)
    assert (record.outcome, record.decided_by, record.call_id, record.reason, record.at) == (
        DecisionOutcome.REFUSED,
        "mallory",
        call_id,
        "the arguments differ",
        5.0,
    )
    assert record.fingerprint == conversation.tool_call(call_id).fingerprint
    stored = store.get(conversation.id)
    assert stored is not None
    assert stored.version == conversation.version


def test_the_whole_trail_is_newest_first_and_limited(make: Factory) -> None:
    store = make()
    ids = []
    for n in range(3):
        conversation = pending_conversation(at=1_700_000_000.0 + n)
        [call_id] = conversation.tool_calls
        conversation.approve_tool_call(call_id, by=f"approver-{n}", at=1_700_000_100.0 + n)
        store.save(conversation, 0)
        ids.append(conversation.id)

    everything = store.decision_records()
    latest = store.decision_records(limit=2)

    assert [r.conversation_id for r in everything][:3] == ids[::-1]
    assert [r.conversation_id for r in latest] == ids[:0:-1]
    assert [r.conversation_id for r in store.decision_records(ids[0])] == [ids[0]]
    assert store.decision_records("no-such-conversation") == []


def test_decision_records_expire_by_their_own_ttl(make: Factory) -> None:
    now = [1_700_000_000.0]
    store = make(audit_ttl=60, clock=lambda: now[0])
    conversation = pending_conversation(at=now[0])
    [call_id] = conversation.tool_calls
    conversation.approve_tool_call(call_id, by="alice", at=now[0])
    store.save(conversation, 0)

    assert len(store.decision_records(conversation.id)) == 1
    now[0] += 61
    assert store.decision_records(conversation.id) == []
    assert store.get(conversation.id) is not None  # the conversation has no ttl of its own here


# -- the chain over the trail (ADR 34) ---------------------------------------------------------------

KEY = AuditKey(b"the contract suite's audit key")


def test_appended_records_form_one_chain_and_a_digest_signs_its_head(make: Factory) -> None:
    store = make()
    conversation = pending_conversation()
    store.save(conversation, 0)
    [call_id] = conversation.tool_calls
    store.record_decisions([conversation.refusal(call_id, "the arguments differ", by="mallory", at=5.0)])
    conversation.approve_tool_call(call_id, by="alice", at=6.0)
    store.save(conversation, conversation.version - 1)
    store.save(full_conversation(), 0)

    head, last = store.audit_tip()
    assert last is None
    digest = AuditDigest.after(None, head, at=7.0, key=KEY)
    assert store.append_digest(digest)
    assert not store.append_digest(digest)  # its number is taken: a second worker's is dropped
    trail = store.audit_trail()

    assert [r.seq for r in trail.records] == list(range(1, 8))
    assert trail.records[1].previous == record_hash(trail.records[0])
    assert [r.decided_by for r in trail.records[:2]] == ["mallory", "alice"]
    assert trail.head == head == ChainHead(7, record_hash(trail.records[-1]))
    assert trail.digests == [digest]
    assert store.audit_tip() == (head, digest)
    assert verify(trail, KEY).summary() == "intact: 7 records chained, 1 digest signed"
    assert store.decision_records(conversation.id)[0].seq == 2  # the trail as read carries the links


def test_a_writer_whose_known_head_is_stale_links_its_records_after_the_real_one(make: Factory) -> None:
    first, second = make(), make()
    for n, store in enumerate([first, second, first, second, first]):  # each behind the other's last
        store.record_decisions([DecisionRecord.refused("c", "x", by=f"writer-{n}", entrance="http", at=1.0)])
    conversation = pending_conversation()
    [call_id] = conversation.tool_calls
    conversation.approve_tool_call(call_id, by="writer-5")
    second.save(conversation, 0)

    trail = first.audit_trail()
    assert [(r.seq, r.decided_by) for r in trail.records] == [(n + 1, f"writer-{n}") for n in range(6)]
    assert verify(trail).intact, verify(trail).problem


# moto's emulated DynamoDB is not thread-safe (it fails inside with "dictionary changed size during
# iteration" under concurrent transactions): DynamoDB's conditional write on the head is shown by the
# interleaved writers above, and by real processes against real stores in tests/e2e/test_trail_http.py.
@pytest.mark.parametrize("make", [kind for kind in STORES if kind != "dynamodb"], indirect=True)
def test_writers_on_several_repositories_at_once_keep_one_chain(make: Factory) -> None:
    stores = [make(), make()]
    start = threading.Barrier(4)

    def write(n: int) -> None:
        store = stores[n % 2]
        start.wait()
        for i in range(10):
            refused = DecisionRecord.refused(
                f"c{n}", "no scope", by=f"writer-{n}", entrance="http", at=float(i)
            )
            store.record_decisions(
                [refused, refused.__class__.refused("x", "y", by="z", entrance="http", at=0.0)]
            )
            conversation = pending_conversation()
            [call_id] = conversation.tool_calls
            conversation.approve_tool_call(call_id, by=f"writer-{n}")
            store.save(conversation, 0)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    trail = stores[0].audit_trail()
    assert [r.seq for r in trail.records] == list(range(1, 121))
    assert verify(trail).intact, verify(trail).problem


def test_each_namespace_keeps_a_chain_of_its_own(make: Factory, request: pytest.FixtureRequest) -> None:
    memory = request.node.callspec.params["make"] == "memory"
    namespaces = ["default"] if memory else ["a", "b"]  # the in-memory store has none: one chain
    for namespace in namespaces:
        store = make(namespace)
        store.record_decisions([DecisionRecord.refused("c", "x", by=namespace, entrance="http", at=1.0)])
        [record] = store.audit_trail().records
        assert (record.seq, record.previous, record.decided_by) == (1, "", namespace)


def test_an_owner_survives_a_round_trip_and_no_owner_is_none(make: Factory) -> None:
    store = make()
    owned = Conversation.start(owner="alice")
    nobody = Conversation.start()
    store.save(owned, 0)
    store.save(nobody, 0)

    loaded, unowned = store.get(owned.id), store.get(nobody.id)
    assert loaded is not None
    assert unowned is not None
    assert (loaded.owner, unowned.owner) == ("alice", None)


def test_a_title_survives_a_round_trip_and_an_untitled_conversation_stays_untitled(make: Factory) -> None:
    store = make()
    titled, untitled = Conversation.start(), Conversation.start()
    titled.retitle("Pods restarting in prod — «eu-1»")
    store.save(titled, 0)
    store.save(untitled, 0)

    loaded, plain = store.get(titled.id), store.get(untitled.id)
    assert loaded is not None
    assert plain is not None
    assert (loaded.title, plain.title) == ("Pods restarting in prod — «eu-1»", None)
    loaded.retitle("Pods fixed")
    store.save(loaded, loaded.version - 1)
    again = store.get(titled.id)
    assert again is not None
    assert again.title == "Pods fixed"


# -- cancel requests -----------------------------------------------------------------------------------


def test_a_cancel_asked_through_one_repository_is_seen_through_another_on_one_store(make: Factory) -> None:
    asking, running = make(), make()  # two workers on one store
    assert not running.cancel_requested("conv-1", since=100.0)

    asking.request_cancel("conv-1", at=150.0)

    assert running.cancel_requested("conv-1", since=100.0)
    assert not running.cancel_requested("conv-1", since=200.0), "a turn started after the cancel runs on"
    assert not running.cancel_requested("conv-2", since=100.0), "only the conversation asked for"


async def test_the_async_twins_ask_and_read_cancels(make: Factory) -> None:
    asking, running = make(), make()
    await asking.arequest_cancel("conv-1", at=150.0)

    assert await running.acancel_requested("conv-1", since=100.0)
    assert not await running.acancel_requested("conv-1", since=151.0)
    for store in (asking, running):
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()


async def test_the_async_twins_append_and_read_the_trail(make: Factory) -> None:
    store = make()
    conversation = pending_conversation()
    [call_id] = conversation.tool_calls
    conversation.reject_tool_call(call_id, "not now", by="alice")

    await store.asave(conversation, 0)
    await store.arecord_decisions([conversation.refusal(call_id, "already decided", by="bob")])
    records = await store.adecision_records(conversation.id)

    assert sorted(outcomes(records)) == [("alice", "rejected"), ("bob", "refused")]
    close = getattr(store, "aclose", None)
    if close is not None:
        await close()


# -- a turn's recent part (ADR 22) -------------------------------------------------------------------


def long_conversation(exchanges: int = 30, at: float = 1_700_000_000.0) -> Conversation:
    """Exchanges of a question, a call with its result and an answer; in the fifth a call approved and
    still running (leased, no result yet); a summary of all but the last five exchanges."""
    c = Conversation.start(at=at)
    for n in range(exchanges):
        c.add_user_message(f"question {n}", at=at + n)
        c.add_assistant_message("", at=at + n)
        call = c.request_tool_call(
            "list_pods", ToolInput.of({"namespace": f"ns-{n}"}), requires_approval=False, at=at + n
        )
        c.approve_tool_call(call.id.value, by="policy", kind=DeciderKind.POLICY, at=at + n)
        if n == 5:
            c.lease_tool_call(call.id.value, "worker-1", until=at + 3600)
        else:
            c.record_tool_result(call.id.value, f"pods of ns-{n}", at=at + n)
        c.add_assistant_message(f"answer {n}", at=at + n)
    c.summarize("what came before", through=3 * (exchanges - 5))
    return c


def test_every_store_reads_the_recent_part_of_its_own(make: Factory) -> None:
    """Not the port's default whole read (ADR 22): the tests below hold each store to it."""
    assert type(make()).get_recent is not ConversationRepository.get_recent


def test_a_recent_read_holds_every_message_a_turn_may_send_and_every_call_not_settled(make: Factory) -> None:
    store = make()
    conversation = long_conversation()
    store.save(conversation, 0)
    whole = store.get(conversation.id)

    recent = store.get_recent(conversation.id)

    assert whole is not None
    assert recent is not None
    start, first_call = recent.message_offset, recent.call_offset
    assert [MESSAGE.to_dict(m) for m in recent.messages] == [
        MESSAGE.to_dict(m) for m in whole.messages[start:]
    ]
    assert list(recent.tool_calls) == list(whole.tool_calls)[first_call:]
    assert (recent.message_count, recent.call_count) == (len(whole.messages), len(whole.tool_calls))
    assert [c.id for c in recent.unfinished_tool_calls] == [c.id for c in whole.unfinished_tool_calls] != []
    assert (recent.version, recent.summary, recent.session) == (whole.version, whole.summary, whole.session)
    # From the message of the call still running (exchange 5): the summary's end is later.
    assert start <= 3 * 5 + 1
    assert (start, first_call) == (3 * 5 + 1, 5)


def test_a_turn_on_a_recent_read_saves_what_the_same_turn_on_a_whole_read_would(make: Factory) -> None:
    store = make()
    conversation = long_conversation()
    store.save(conversation, 0)

    def turn(c: Conversation) -> None:
        [running] = c.unfinished_tool_calls
        c.record_tool_result(running.id.value, "done", at=1_700_000_101.0)
        c.add_user_message("and now?", at=1_700_000_102.0)
        c.add_assistant_message("", at=1_700_000_103.0)
        c.request_tool_call(
            "list_pods",
            ToolInput.of({"namespace": "prod"}),
            requires_approval=True,
            call_id=ToolCallId("tc_the_new_one"),
            at=1_700_000_104.0,
        )
        c.summarize("more of it", through=c.message_count - 3)
        c.open_task(at=1_700_000_105.0)

    expected = store.get(conversation.id)
    assert expected is not None
    turn(expected)
    recent = store.get_recent(conversation.id)
    assert recent is not None
    turn(recent)

    store.save(recent, conversation.version)

    saved = store.get(conversation.id)
    assert saved is not None
    assert conversation_to_dict(saved) == conversation_to_dict(expected)
    again = store.get_recent(conversation.id)
    assert again is not None
    assert [c.id.value for c in again.pending_tool_calls] == ["tc_the_new_one"]
    # the running call settled: the window moved on to the summary's end
    assert saved.summary is not None
    assert again.message_offset == saved.summary.through


async def test_the_async_recent_read_is_the_sync_one(make: Factory) -> None:
    store = make()
    conversation = long_conversation()
    await store.asave(conversation, 0)

    recent = await store.aget_recent(conversation.id)
    again = store.get_recent(conversation.id)

    assert recent is not None
    assert again is not None
    assert (recent.message_offset, recent.call_offset) == (again.message_offset, again.call_offset)
    assert [MESSAGE.to_dict(m) for m in recent.messages] == [MESSAGE.to_dict(m) for m in again.messages]
    assert await store.aget_recent("no-such-conversation") is None
    close = getattr(store, "aclose", None)
    if close is not None:
        await close()


def test_a_conversation_read_in_part_cannot_be_saved_whole(make: Factory) -> None:
    store = make()
    conversation = long_conversation()
    store.save(conversation, 0)
    recent = store.get_recent(conversation.id)
    assert recent is not None

    with pytest.raises(ValueError, match="windowed read"):
        InMemoryConversationRepository().save(recent, 0)
    with pytest.raises(ValueError, match="windowed read"):
        store.save(recent, 0)


def test_a_windows_cut_is_stored_and_a_recent_read_starts_there(make: Factory) -> None:
    store = make()
    conversation = long_conversation()
    conversation.summary = None  # a window that does not summarize: it stores where it cut instead
    conversation.move_cut(3 * 20)
    store.save(conversation, 0)

    recent = store.get_recent(conversation.id)
    assert recent is not None
    whole = store.get(conversation.id)
    assert whole is not None
    assert (whole.cut, recent.cut, whole.summary) == (60, 60, None)
    # from the message of the call still running (exchange 5)
    assert (recent.message_offset, recent.call_offset) == (3 * 5 + 1, 5)
    [running] = recent.unfinished_tool_calls
    recent.record_tool_result(running.id.value, "done", at=1_700_000_101.0)
    recent.add_user_message("and now?", at=1_700_000_102.0)
    recent.move_cut(3 * 25)
    store.save(recent, conversation.version)

    again = store.get_recent(conversation.id)
    saved = store.get(conversation.id)
    assert again is not None
    assert saved is not None
    assert (saved.cut, saved.message_count, again.message_count) == (75, 91, 91)
    assert [m.text for m in again.messages[-2:]] == ["answer 29", "and now?"]
    # the running call settled: the window moved on to the cut
    assert (again.message_offset, again.call_offset) == (75, 25)


def pending_conversation(at: float = 1_700_000_000.0) -> Conversation:
    c = Conversation.start(at=at)
    c.add_user_message("delete web-2", at=at)
    c.add_assistant_message("deleting", at=at)
    c.request_tool_call(
        "delete_pod", ToolInput.of({"name": "web-2"}), requires_approval=True, description="Delete.", at=at
    )
    return c


def outcomes(records: list[DecisionRecord]) -> list[tuple[str, str]]:
    return [(r.decided_by, r.outcome.value) for r in records]


# -- the inbox's index (docs/approvals.md, "One inbox") ----------------------------------------------


def test_every_store_keeps_the_index_of_waiting_calls(make: Factory) -> None:
    """docs/approvals.md, "One inbox": every store the project ships keeps the index."""
    assert make().keeps_waiting_index


def waiting_ids(store: ConversationRepository) -> list[tuple[str, str]]:
    return sorted((w.conversation_id, w.call_id) for w in store.list_waiting())


def test_a_waiting_call_is_indexed_when_saved_and_dropped_once_decided(make: Factory) -> None:
    """docs/approvals.md, "One inbox": indexed when saved, removed when decided."""
    store = make()
    conversation = full_conversation()
    [pending] = conversation.pending_tool_calls
    pending.requested_by = "carol"
    pending.approvers = approvers(2, "sre")
    store.save(conversation, 0)
    idle = Conversation.start()
    idle.add_user_message("nothing to approve here")
    store.save(idle, 0)

    [entry] = store.list_waiting()
    assert (entry.conversation_id, entry.call_id, entry.name) == (
        conversation.id,
        pending.id.value,
        "delete_pod",
    )
    assert (entry.requested_by, entry.approvers, entry.approval_reason) == (
        "carol",
        approvers(2, "sre"),
        "deletes are dangerous",
    )
    assert entry.context == {"tenant": "acme"}  # never the credentials
    assert entry.input == {"name": "web-pending", "namespace": "prod", "grace": 30}

    policy = ApprovalPolicy(groups={"sre": {"alice", "bob"}})
    for who, at in (("alice", 1_700_000_008.0), ("bob", 1_700_000_009.0)):
        loaded = store.get_recent(conversation.id)  # a turn's read: the save writes its changes only
        assert loaded is not None
        read_at = loaded.version
        trusted = Trusted(Identity(who, frozenset({"approve"})))
        loaded.approve_tool_call(pending.id.value, by=who, policy=policy, trusted=trusted, at=at)
        store.save(loaded, read_at)
        if who == "alice":
            [counted] = store.list_waiting()
            assert [(a.by, a.stage) for a in counted.approvals] == [("alice", 0)]

    assert store.list_waiting() == []


def test_a_calls_escalation_and_the_notices_claimed_survive_saves_and_the_index(make: Factory) -> None:
    """docs/approvals.md, "Escalation": the rule's escalation is stored with the call and in the index,
    and a notice is claimed by a save, which a second claim of it from the same read loses."""
    store = make()
    conversation = full_conversation()
    [pending] = conversation.pending_tool_calls
    rule = approvers(
        1, "leads", remind_after=60, escalate_after=120, escalate_to="oncall", at_window_end="wait"
    )
    pending.approvers, pending.expires_at = rule, None
    store.save(conversation, 0)
    [entry] = store.list_waiting()
    assert entry.approvers == rule
    reminder_at = pending.proposed_at + 60
    assert entry.notice_due(reminder_at - 1) is None
    assert entry.notice_due(reminder_at) == "reminder"

    first, second = store.get(conversation.id), store.get(conversation.id)
    assert first is not None
    assert second is not None
    read_at = first.version
    first.claim_notice(pending.id.value, "reminder", at=reminder_at)
    second.claim_notice(pending.id.value, "reminder", at=reminder_at)
    store.save(first, read_at)
    with pytest.raises(ConcurrencyConflict):  # the second claim of one notice loses: it is not sent
        store.save(second, read_at)

    loaded = store.get(conversation.id)
    assert loaded is not None
    [claimed] = loaded.pending_tool_calls
    assert (claimed.approvers, claimed.reminded_at, claimed.escalated_at) == (rule, reminder_at, None)
    [indexed] = store.list_waiting()
    assert (indexed.reminded_at, indexed.notice_due(reminder_at)) == (reminder_at, None)
    assert indexed.notice_due(pending.proposed_at + 120) == "escalation"


def test_a_deleted_conversations_waiting_calls_leave_the_index(make: Factory) -> None:
    """docs/approvals.md, "One inbox": a forgotten conversation's calls are not listed."""
    store = make()
    kept, gone = full_conversation(), full_conversation()
    store.save(kept, 0)
    store.save(gone, 0)
    assert {c for c, _ in waiting_ids(store)} == {kept.id, gone.id}

    assert store.delete(gone.id)

    assert {c for c, _ in waiting_ids(store)} == {kept.id}


def test_the_index_of_one_namespace_is_its_own(make: Factory, request: pytest.FixtureRequest) -> None:
    if "memory" in request.node.name:  # no namespaces: each agent's in-memory store is its own object
        ops, billing = make(), InMemoryConversationRepository()
    else:
        ops, billing = make(namespace="ops-agent"), make(namespace="billing-agent")
    ops.save(full_conversation(), 0)

    assert billing.list_waiting() == []
    assert len(ops.list_waiting()) == 1


async def test_the_index_reads_alike_on_the_event_loop(make: Factory) -> None:
    store = make()
    conversation = full_conversation()
    await store.asave(conversation, 0)

    assert [w.conversation_id for w in await store.alist_waiting()] == [conversation.id]


def test_a_message_into_a_running_run_queued_messages_survive_saves_and_reads_of_the_recent_part(
    make: Factory,
) -> None:
    """docs/runs.md, "A message into a running run": a queued message is stored with its conversation
    (whole and windowed reads alike) until a turn reads it, and a conversation stored before queues
    existed reads with none."""
    store = make()
    conversation = Conversation.start("conv_queued", at=1_700_000_000.0)
    conversation.add_user_message("restart web", at=1_700_000_000.0)
    conversation.add_assistant_message("", at=1_700_000_001.0)
    conversation.request_tool_call("restart", ToolInput.of({"name": "web"}), requires_approval=True)
    store.save(conversation, 0)

    loaded = store.get(conversation.id)
    assert loaded is not None
    loaded.queue_user_message("and api too", at=1_700_000_002.0)
    loaded.queue_user_message("ü, and quickly", at=1_700_000_003.0)
    store.save(loaded, conversation.version)

    for read in (store.get(conversation.id), store.get_recent(conversation.id)):
        assert read is not None
        assert [(q.text, q.at) for q in read.queued] == [
            ("and api too", 1_700_000_002.0),
            ("ü, and quickly", 1_700_000_003.0),
        ]
    again = store.get(conversation.id)
    assert again is not None
    [call] = again.pending_tool_calls
    again.reject_tool_call(call.id.value, "no", by="alice", kind=DeciderKind.HUMAN, at=1_700_000_004.0)
    again.read_queued()
    store.save(again, loaded.version)

    read_at_last = store.get(conversation.id)
    assert read_at_last is not None
    assert read_at_last.queued == []
    assert [m.text for m in read_at_last.messages[-2:]] == ["and api too", "ü, and quickly"]


# -- standing grants (docs/approvals.md, "Grants") ---------------------------------------------------


def test_every_store_keeps_grants_and_their_revocation(make: Factory) -> None:
    """docs/approvals.md, "Grants": every store the project ships keeps them (a store of your own
    without GrantStore refuses them by name: tests/unit/application/test_standing_grants.py)."""
    from dcaf_like.application.ports import GrantStore, grants_in_force, require
    from dcaf_like.domain.grant import Grant

    store = make()
    grants = require(store, GrantStore)
    made = Grant.new(
        tool="restart_pod",
        requester="alice",
        granted_by="bob",
        at=100.0,
        duration=60,
        arguments={"namespace": ["dev", "staging"]},
        context={"tenant_name": "dev"},
    )
    grants.add_grant(made)
    assert grants.list_grants() == [made]
    assert grants_in_force(store, 159.0) == (made,)
    assert grants_in_force(store, 160.0) == ()

    revoked = grants.revoke_grant(made.id, by="carol", at=120.0)
    assert revoked is not None
    assert (revoked.revoked_by, revoked.revoked_at) == ("carol", 120.0)
    assert grants.list_grants() == [revoked]
    assert grants_in_force(store, 121.0) == ()
    assert grants.revoke_grant("g_unknown", by="carol", at=121.0) is None


def test_grants_that_ended_before_a_moment_are_forgotten_and_the_others_kept(make: Factory) -> None:
    """docs/approvals.md, "Grants": ``dcaf-like prune`` forgets the grants that ended (expired or were
    revoked) before its cut; those in force, or ended since, are kept."""
    from dcaf_like.application.ports import GrantStore, require
    from dcaf_like.domain.grant import Grant

    grants = require(make(), GrantStore)
    expired = Grant.new(tool="restart_pod", requester="alice", granted_by="bob", at=100.0, duration=10)
    revoked = Grant.new(tool="restart_pod", requester="alice", granted_by="bob", at=100.0, duration=900)
    in_force = Grant.new(tool="restart_pod", requester="alice", granted_by="bob", at=100.0, duration=900)
    ended_since = Grant.new(tool="restart_pod", requester="alice", granted_by="bob", at=100.0, duration=150)
    for grant in (expired, revoked, in_force, ended_since):
        grants.add_grant(grant)
    grants.revoke_grant(revoked.id, by="carol", at=120.0)

    would = grants.forget_grants(200.0, dry_run=True)
    kept_by_dry_run = len(grants.list_grants())
    forgot = grants.forget_grants(200.0)

    assert (would, kept_by_dry_run, forgot) == (2, 4, 2)
    assert sorted(g.id for g in grants.list_grants()) == sorted([in_force.id, ended_since.id])
    assert grants.forget_grants(200.0) == 0


def test_sqlite_grants_of_one_namespace_are_not_another_ones(tmp_path: Path) -> None:
    """The in-memory store has no namespaces: SQLite is the one store with grants that has them."""
    from dcaf_like import SqliteConversationRepository
    from dcaf_like.domain.grant import Grant

    ops = SqliteConversationRepository(tmp_path / "c.db", namespace="ops-agent")
    billing = SqliteConversationRepository(tmp_path / "c.db", namespace="billing-agent")
    try:
        ops.add_grant(Grant.new(tool="restart_pod", requester="*", granted_by="bob", at=0.0, duration=60))
        assert billing.list_grants() == []
        assert len(ops.list_grants()) == 1
    finally:
        ops.close()
        billing.close()
