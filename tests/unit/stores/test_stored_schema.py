"""One declared schema, every stored form derived from it: the dict, the JSON text, the in-memory tuples."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dcaf_like import InMemoryConversationRepository
from dcaf_like.domain import (
    Approval,
    Approvers,
    ContextSummary,
    Conversation,
    DeciderKind,
    DecisionOutcome,
    DecisionRecord,
    Message,
    MessageContent,
    PlatformContext,
    Role,
    Stage,
    TaskRecord,
    ToolCall,
    ToolCallId,
    ToolCallStatus,
    ToolInput,
)
from dcaf_like.domain.conversation import TaskOutcome
from dcaf_like.stores._codec import (
    conversation_to_dict,
    decode,
    decode_parts,
    encode,
    encode_header,
    header_to_dict,
)
from dcaf_like.stores._schema import CALL, CONVERSATION, MESSAGE, NOT_STORED, SUMMARY, TASK, forms

# Written by the JSON writer of main before the schema was declared (the conversation of
# test_serialization.py, with an owner, a summary and a lease).
MAIN_SAMPLE = Path(__file__).parent / "stored" / "conversation_v1_main.json"


def plain_json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def fields_of(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.init}


# -- stored data written before --------------------------------------------------------------------------


def test_a_conversation_stored_by_the_previous_writer_reads_and_is_written_back_byte_for_byte():
    stored = MAIN_SAMPLE.read_text(encoding="utf-8").rstrip("\n")

    loaded = decode(stored, "conv")

    assert encode(loaded) == stored  # fields added since and left empty are not written (SPARSE)
    assert loaded.owner == "key:ops"
    assert loaded.summary == ContextSummary("they asked about pods", 1)
    leased = list(loaded.tool_calls.values())[1]
    assert (leased.lease_owner, leased.lease_expires_at) == ("worker-1", 1_700_000_100.5)
    assert {c.status for c in loaded.tool_calls.values()} == {
        ToolCallStatus.EXECUTED, ToolCallStatus.APPROVED, ToolCallStatus.REJECTED, ToolCallStatus.FAILED,
        ToolCallStatus.PENDING,
    }  # fmt: skip


# Written by the writers of 2026-11-28 (a4e162e), before the header was generated from the schema: the
# main sample with a question, a queued message and a cut, whole (format 1) and as a header (format 2).
RICH_SAMPLE = Path(__file__).parent / "stored" / "conversation_v1_rich.json"
RICH_HEADER = Path(__file__).parent / "stored" / "header_v2_rich.json"


def test_a_rich_conversation_stored_whole_before_reads_and_is_written_back_byte_for_byte():
    stored = RICH_SAMPLE.read_text(encoding="utf-8").rstrip("\n")

    loaded = decode(stored, "conv")

    assert encode(loaded) == stored
    assert plain_json(conversation_to_dict(loaded)) == stored
    assert loaded.cut == 1
    assert [(q.kind.value, q.prompt, q.options) for q in loaded.questions.values()] == [
        ("selection", "Which «cluster»?", ["prod-1", "staging 2"])
    ]
    assert [(q.text, q.at) for q in loaded.queued] == [('and the logs? "quoted" 😀', 1_700_000_300.75)]


def test_a_header_stored_before_reads_with_its_records_and_is_written_back_byte_for_byte():
    whole = decode(RICH_SAMPLE.read_text(encoding="utf-8"), "conv")
    header = RICH_HEADER.read_text(encoding="utf-8").rstrip("\n")
    messages = [MESSAGE.write(m) for m in whole.messages]
    calls = [CALL.write(c) for c in whole.tool_calls.values()]

    loaded = decode_parts(header, messages, calls, "conv")

    assert encode_header(loaded) == header
    assert plain_json(header_to_dict(loaded)) == header
    assert encode(loaded) == RICH_SAMPLE.read_text(encoding="utf-8").rstrip("\n")
    assert loaded.window_start() == (1, 0)


def test_a_title_is_written_last_in_every_form_only_when_there_is_one():
    conversation = decode(RICH_SAMPLE.read_text(encoding="utf-8"), "conv")
    assert conversation.title is None  # stored before titles
    conversation.retitle("Pods «eu-1»")

    whole, header = encode(conversation), encode_header(conversation)

    assert whole == plain_json(conversation_to_dict(conversation))
    assert whole.endswith(',"title":"Pods «eu-1»"}')
    assert header == plain_json(header_to_dict(conversation))
    assert ',"title":"Pods «eu-1»",' in header  # before the window, which is the header's own
    assert decode(whole, "conv").title == "Pods «eu-1»"


def test_a_conversation_stored_before_the_fields_added_since_reads_with_what_they_meant_then():
    data = json.loads(MAIN_SAMPLE.read_text(encoding="utf-8"))
    for added in ("tasks", "owner", "summary"):
        del data[added]
    for call in data["tool_calls"]:
        for added in ("secret_arguments", "lease_owner", "lease_expires_at", "context_fingerprint"):
            del call[added]
        del call["decided_by_kind"]
    data["tool_calls"][0]["decided_by"] = "policy"

    loaded = decode(json.dumps(data), "conv")

    assert (loaded.tasks, loaded.owner, loaded.summary) == ({}, None, None)
    calls = list(loaded.tool_calls.values())
    assert [c.secret_arguments for c in calls] == [frozenset()] * 5
    assert [(c.lease_owner, c.lease_expires_at) for c in calls] == [(None, None)] * 5
    assert {c.context_fingerprint for c in calls} == {loaded.platform_context.fingerprint}
    assert [c.decided_by_kind for c in calls] == [
        DeciderKind.POLICY, DeciderKind.HUMAN, DeciderKind.HUMAN, DeciderKind.HUMAN, None
    ]  # fmt: skip


def test_a_question_stored_before_windows_reads_as_one_without_a_window_that_never_expires():
    conversation = Conversation.start("conv", at=0.0)
    conversation.add_user_message("scale web to zero", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call("scale", ToolInput.of({}), requires_approval=False, at=0.0)
    conversation.approve_tool_call(call.id.value, by="policy", kind=DeciderKind.POLICY, at=0.0)
    question = conversation.ask_question(call.id.value, "confirmation", "Sure?", ttl=60.0, at=1.0)
    data = json.loads(encode(conversation))
    assert data["questions"][0]["expires_at"] == 61.0
    del data["questions"][0]["expires_at"]

    loaded = decode(json.dumps(data), "conv")

    old = loaded.question(question.id)
    assert (old.expires_at, old.status.value) == (None, "open")
    assert loaded.expire_questions(at=1e12) == []


def test_a_decision_record_written_before_questions_reads_as_a_decision_about_a_call():
    record = DecisionRecord(
        "conv", "tc_1", "scale", "f1", DecisionOutcome.APPROVED, "alice", DeciderKind.HUMAN, "http", 5.0
    )
    old = record.to_dict()
    del old["question_id"]

    assert DecisionRecord.from_json(json.dumps(old)) == record
    assert DecisionRecord.from_json(record.to_json()) == record


def test_a_call_stored_under_its_old_names_reads_with_the_new_ones_and_is_stored_under_the_old():
    # ADR 20 renamed the attributes (policy_reason, decision_note); the stored keys stayed: no migration.
    stored = MAIN_SAMPLE.read_text(encoding="utf-8").rstrip("\n")
    raw = {c["name"]: c for c in json.loads(stored)["tool_calls"]}

    loaded = {c.name: c for c in decode(stored, "conv").tool_calls.values()}

    assert raw["tool_reject"]["decision_note"] == "not now\t(please)"
    assert loaded["tool_reject"].rejection_reason == "not now\t(please)"
    assert raw["tool_wait"]["policy_reason"] == "asks first"
    assert loaded["tool_wait"].approval_reason == "asks first"
    assert {"decision_note", "policy_reason"} <= set(CALL.keys)
    assert not {"rejection_reason", "approval_reason"} & set(CALL.keys)
    assert encode(decode(stored, "conv")) == stored


def test_a_record_missing_a_field_it_always_had_is_unreadable_not_half_read():
    data = json.loads(MAIN_SAMPLE.read_text(encoding="utf-8"))
    del data["tool_calls"][0]["status"]

    with pytest.raises(Exception, match="KeyError: 'status'"):
        decode(json.dumps(data), "conv")


# -- every form from one schema -----------------------------------------------------------------------

texts = st.text(max_size=12)
times = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(10**12), 10**12))
tool_inputs = st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3).map(
    ToolInput.of
)
calls = st.builds(
    ToolCall,
    id=st.text(alphabet="abcdef0123456789", min_size=1, max_size=24).map(ToolCallId),
    name=texts,
    proposed_input=tool_inputs,
    requires_approval=st.booleans(),
    editable=st.booleans(),
    description=texts,
    proposed_at=times,
    expires_at=st.none() | times,
    status=st.sampled_from(ToolCallStatus),
    approved_input=st.none() | tool_inputs,
    decided_by=st.none() | texts,
    decided_at=st.none() | times,
    rejection_reason=st.none() | texts,
    result=st.none() | texts,
    error=st.none() | texts,
    finished_at=st.none() | times,
    approval_reason=st.none() | texts,
    secret_arguments=st.frozensets(texts, max_size=3),
    lease_owner=st.none() | texts,
    lease_expires_at=st.none() | times,
    context_fingerprint=st.none() | texts,
    decided_by_kind=st.none() | st.sampled_from(DeciderKind),
    requested_by=st.none() | st.text(min_size=1, max_size=12),  # an identity: never empty (SPARSE)
    approvers=st.builds(
        Approvers,
        st.lists(
            st.builds(Stage, st.integers(1, 5), st.frozensets(texts, max_size=2)), min_size=1, max_size=3
        ).map(tuple),
        st.booleans(),
    ),
    approvals=st.lists(st.builds(Approval, texts, times, st.integers(0, 3), texts), max_size=3).map(tuple),
    risk=st.none() | st.text(min_size=1, max_size=12),  # a declared risk: never empty (SPARSE)
)
messages = st.builds(
    Message, st.sampled_from(Role), texts.map(MessageContent), times, st.lists(texts, max_size=3).map(tuple)
)
tasks = st.builds(
    TaskRecord, texts, st.integers(0, 10**6), times, st.none() | st.sampled_from(TaskOutcome), texts
)
summaries = st.builds(ContextSummary, texts, st.integers(0, 10**6))


@pytest.mark.parametrize(
    ("record_forms", "records"), [(CALL, calls), (MESSAGE, messages), (TASK, tasks), (SUMMARY, summaries)]
)
def test_every_form_of_a_generated_record_holds_every_field_and_the_json_is_what_json_dumps_writes(
    record_forms, records
):
    @given(records)
    def check(record):
        as_dict = record_forms.to_dict(record)

        assert record_forms.write(record) == plain_json(as_dict)
        for copy in (
            record_forms.from_dict(json.loads(plain_json(as_dict)), PlatformContext()),
            record_forms.from_tuple(record_forms.to_tuple(record)),
            *record_forms.from_tuples([record_forms.to_tuple(record)]),
        ):
            assert fields_of(copy) == fields_of(record)
        assert all(type(value) is not list for value in record_forms.to_tuple(record))

    check()


def test_every_field_of_a_conversation_is_stored_or_named_as_not_stored():
    """The header is generated from Conversation's fields: a new one is stored without an edit of the
    writers (omitted while empty, if it is SPARSE, as the rich sample's fields are)."""
    rich = decode(RICH_SAMPLE.read_text(encoding="utf-8"), "conv")
    fields = {f.name for f in dataclasses.fields(Conversation)}
    empty = {name for name in fields - NOT_STORED if not getattr(rich, name)}

    assert set(conversation_to_dict(rich)) - {"format"} == fields - NOT_STORED - empty
    assert set(CONVERSATION.keys) == fields - NOT_STORED


def test_the_in_memory_store_keeps_what_the_json_keeps():
    stored = decode(MAIN_SAMPLE.read_text(encoding="utf-8"), "conv")
    store = InMemoryConversationRepository()

    store.save(stored, 0)
    loaded = store.get(stored.id)

    assert loaded is not None
    assert encode(loaded) == encode(stored)
    for original, copy in zip(stored.tool_calls.values(), loaded.tool_calls.values(), strict=True):
        assert fields_of(copy) == fields_of(original)


# -- a new field ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Later:
    """A record as a new field would leave it."""

    name: str
    at: float
    note: str | None = None
    tags: frozenset[str] = frozenset()
    kind: DeciderKind | None = None
    cache: int = dataclasses.field(default=0, init=False)


def test_a_new_field_of_a_known_type_is_in_every_form_without_an_edit():
    later = forms(Later)
    record = Later("a", 1.5, "n", frozenset({"y", "x"}), DeciderKind.SYSTEM)

    assert later.to_dict(record) == {
        "name": "a", "at": 1.5, "note": "n", "tags": ["x", "y"], "kind": "system"
    }  # fmt: skip
    assert later.write(record) == plain_json(later.to_dict(record))
    assert later.from_tuple(later.to_tuple(record)) == record
    assert later.keys == ("name", "at", "note", "tags", "kind")  # init=False: derived, not stored


def test_a_field_of_a_type_with_no_stored_form_is_refused_when_its_forms_are_first_used():
    @dataclasses.dataclass
    class Odd:
        ids: set[int]

    odd = forms(Odd)  # importing builds nothing: the forms are made on first use

    with pytest.raises(TypeError, match="no stored form for a field of type set"):
        odd.to_dict(Odd({1}))


def test_a_messages_attachments_are_written_only_when_it_has_some_and_read_back_alike():
    from dcaf_like.domain import attachment

    plain = Message(Role.USER, MessageContent("hi"), 1.0)
    carrying = Message(Role.USER, MessageContent("look"), 2.0)
    carrying.attachments = (
        attachment("image", media_type="image/png", data="iVBORw0KGgo="),
        attachment("file", media_type="text/plain", data="aGk=", name="notes é.txt"),
        attachment("image", url="https://example.com/a.png"),
    )

    assert "attachments" not in MESSAGE.to_dict(plain)
    assert MESSAGE.write(plain) == plain_json(MESSAGE.to_dict(plain))
    for message in (plain, carrying):
        written = MESSAGE.write(message)
        assert written == plain_json(MESSAGE.to_dict(message))
        assert MESSAGE.from_dict(json.loads(written), PlatformContext()) == message
        assert MESSAGE.from_tuple(MESSAGE.to_tuple(message)) == message
