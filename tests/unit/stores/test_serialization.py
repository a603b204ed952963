"""The stored JSON of a conversation is exactly what json.dumps writes of its dict form."""

from __future__ import annotations

import json
import math

import pytest

from dcaf_like.domain import Conversation, DeciderKind, PlatformContext, ToolInput
from dcaf_like.domain.conversation import TaskOutcome
from dcaf_like.stores._codec import conversation_to_dict, decode, encode


def reference(conversation: Conversation) -> str:
    return json.dumps(conversation_to_dict(conversation), ensure_ascii=False, separators=(",", ":"))


def conversation() -> Conversation:
    c = Conversation.start('conv-"quoted"-ü', at=1_700_000_000.123456789)
    c.use_platform_context(PlatformContext(tenant="acmé", api_token="s3cr3t", nested={"k": [1, 2.5]}))
    c.replace_session({"ключ": "значение", "tab\t": ["a\nb", None, True, 1e300, -0.0], "n": {}})
    c.add_user_message('line 1\nline 2 "quoted" \\ back\u2028slash \x00 nul, 日本語 😀', at=1_700_000_001)
    c.add_assistant_message("", at=1_700_000_002.5)
    for name, ttl in (("run", None), ("edit", 600.0), ("reject", None), ("fail", None), ("wait", 1)):
        c.request_tool_call(
            "tool_" + name,
            ToolInput.of({"name": f"web-{name}", "n": 1.0, "deep": {"x": ["é"]}}),
            requires_approval=name != "run",
            editable=name == "edit",
            description='Does "things".\n',
            approval_reason=None if name == "run" else "asks first",
            approval_ttl=ttl,
            secret_arguments=frozenset({"name", "deep"}) if name == "wait" else frozenset(),
            at=1_700_000_003.1,
        )
    ids = list(c.tool_calls)
    c.approve_tool_call(ids[0], by="policy", at=1_700_000_004.2)
    c.record_tool_result(ids[0], '{"web-1": "Running"}', at=1_700_000_005.3)
    c.approve_tool_call(ids[1], by="ålice", edited_input=ToolInput.of({"name": "web-2"}), at=1e9)
    c.reject_tool_call(ids[2], "not now\t(please)", by="bob", at=1_700_000_006)
    c.approve_tool_call(ids[3], by="carol", at=1_700_000_007.0)
    c.record_tool_failure(ids[3], "RuntimeError: ✗", at=1_700_000_008.0)
    c.open_task(at=1_700_000_009.5)
    ended = c.open_task(at=1_700_000_010)
    c.end_task(ended.id, TaskOutcome.CANCELED, 'by "them"')
    c.move_cut(1)
    return c


def test_the_stored_text_is_byte_for_byte_what_json_dumps_writes():
    c = conversation()

    assert encode(c) == reference(c)
    assert encode(Conversation.start("empty", at=0.0)) == reference(Conversation.start("empty", at=0.0))


def test_the_stored_text_reads_back_into_the_same_conversation():
    c = conversation()

    assert conversation_to_dict(decode(encode(c), c.id)) == conversation_to_dict(c)


def test_values_of_unusual_types_are_written_as_json_dumps_writes_them():
    c = conversation()
    c.created_at = math.inf  # a clock gone wrong: json.dumps writes Infinity
    c.session["nan"] = math.nan
    c.messages[0].at = True

    assert encode(c) == reference(c)


def test_a_value_json_cannot_write_fails_as_json_dumps_fails():
    c = conversation()
    c.use_platform_context(PlatformContext(tenant={1, 2}))

    with pytest.raises(TypeError, match="set is not JSON serializable"):
        encode(c)


def test_what_decided_and_the_bound_context_survive_a_round_trip():
    c = conversation()
    c.reject_tool_call(list(c.tool_calls)[4], "too late", by="system", kind=DeciderKind.SYSTEM)

    loaded = decode(encode(c), c.id)

    kinds = [(call.decided_by, call.decided_by_kind) for call in loaded.tool_calls.values()]
    assert kinds == [
        ("policy", DeciderKind.HUMAN),  # a person whose name is "policy": approved with the default kind
        ("ålice", DeciderKind.HUMAN),
        ("bob", DeciderKind.HUMAN),
        ("carol", DeciderKind.HUMAN),
        ("system", DeciderKind.SYSTEM),
    ]
    fingerprints = {call.context_fingerprint for call in loaded.tool_calls.values()}
    assert fingerprints == {PlatformContext(tenant="acmé", nested={"k": [1, 2.5]}).fingerprint}


def test_a_call_stored_before_kinds_and_bound_contexts_reads_back_with_both():
    c = conversation()
    old = conversation_to_dict(c)
    for call in old["tool_calls"]:
        del call["decided_by_kind"], call["context_fingerprint"]
    old["tool_calls"][0]["decided_by"] = "approver"

    loaded = decode(json.dumps(old), c.id)

    assert [call.decided_by_kind for call in loaded.tool_calls.values()] == [
        DeciderKind.APPROVER, DeciderKind.HUMAN, DeciderKind.HUMAN, DeciderKind.HUMAN, None
    ]  # fmt: skip
    # Bound to the stored context, the one of the turn that proposed the calls still waiting.
    waiting = loaded.tool_calls[list(c.tool_calls)[4]]
    assert waiting.context_fingerprint == PlatformContext(tenant="acmé", nested={"k": [1, 2.5]}).fingerprint
