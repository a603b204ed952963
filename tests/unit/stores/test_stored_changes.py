"""What a save writes (ADR 16): the aggregate says what changed since it was loaded or saved, and
`changes()` turns that into the header and the records a store writes."""

from __future__ import annotations

import json

from dcaf_like.domain import Conversation, ToolInput
from dcaf_like.stores._codec import changes, decode_parts, encode_header, header_to_dict
from dcaf_like.stores._schema import CALL, MESSAGE, dumps


def proposal() -> Conversation:
    c = Conversation.start(at=1.0)
    c.add_user_message("delete web-1", at=2.0)
    c.add_assistant_message("", at=3.0)
    c.request_tool_call("delete_pod", ToolInput.of({"name": "web-1"}), requires_approval=True, at=3.0)
    c.request_tool_call("delete_pod", ToolInput.of({"name": "web-2"}), requires_approval=True, at=3.0)
    return c


def test_a_new_conversation_is_written_whole() -> None:
    c = proposal()

    written = changes(c, 0)

    assert written.whole
    assert written.first_message == 0
    assert written.messages == [MESSAGE.write(m) for m in c.messages]
    assert written.calls == [(i, CALL.write(call)) for i, call in enumerate(c.tool_calls.values())]
    assert written.header == encode_header(c)


def test_a_saved_conversation_writes_its_new_messages_and_changed_calls_only() -> None:
    c = proposal()
    c.mark_saved()
    second = list(c.tool_calls)[1]

    c.reject_tool_call(second, "not now", by="alice", at=4.0)
    c.add_assistant_message("web-2 stays; waiting for web-1.", at=5.0)
    written = changes(c, c.version)

    assert not written.whole
    assert written.first_message == 2
    assert written.messages == [MESSAGE.write(c.messages[2])]
    assert written.calls == [(1, CALL.write(c.tool_calls[second]))]


def test_nothing_changed_writes_the_header_alone() -> None:
    c = proposal()
    c.mark_saved()

    written = changes(c, c.version)

    assert (written.whole, written.first_message, written.messages, written.calls) == (False, 2, [], [])


def test_a_call_proposed_on_a_stored_message_rewrites_that_message() -> None:
    c = Conversation.start(at=1.0)
    c.add_user_message("list the pods", at=2.0)
    c.add_assistant_message("", at=3.0)
    c.mark_saved()

    c.request_tool_call("list_pods", ToolInput.of({}), requires_approval=False, at=4.0)
    written = changes(c, c.version)

    assert written.first_message == 1
    assert written.messages == [MESSAGE.write(c.messages[1])]
    assert [seq for seq, _ in written.calls] == [0]


def test_a_conversation_not_read_from_a_header_is_written_whole_whatever_the_version() -> None:
    c = proposal()  # never marked saved: built in code, or read from a whole document of format 1

    assert changes(c, 7).whole


def test_records_read_back_make_the_conversation_marked_saved() -> None:
    c = proposal()
    written = changes(c, 0)

    read = decode_parts(written.header, written.messages, [call for _, call in written.calls], c.id)

    assert [m.text for m in read.messages] == ["delete web-1", ""]
    assert list(read.tool_calls) == list(c.tool_calls)
    assert (read.saved_messages, read.changed_calls) == (2, set())


# -- the cut of a window without a summary (ADR 25) ----------------------------------------------------


def exchanges(count: int) -> Conversation:
    c = Conversation.start(at=1.0)
    for n in range(count):
        c.add_user_message(f"question {n}", at=2.0 + n)
        c.add_assistant_message(f"answer {n}", at=2.0 + n)
    return c


def test_a_header_keeps_the_cut_and_a_windowed_read_starts_there() -> None:
    c = exchanges(10)
    c.move_cut(12)
    written = changes(c, 0)

    header = json.loads(written.header)
    read = decode_parts(written.header, written.messages[12:], [], c.id, windowed=True)

    assert (header["cut"], header["window"]) == (12, [12, 0])
    assert written.header == dumps(header_to_dict(c))  # the fast path writes what json.dumps would
    assert (read.cut, read.message_offset, read.message_count) == (12, 12, 20)
    assert [m.text for m in read.messages[:1]] == ["question 6"]


def test_a_header_written_before_cuts_reads_as_no_cut_and_an_uncut_one_is_written_as_before() -> None:
    c = exchanges(3)
    written = changes(c, 0)
    header = json.loads(written.header)

    read = decode_parts(written.header, written.messages, [], c.id, windowed=True)

    assert "cut" not in header  # the bytes an earlier version wrote
    assert "window" not in header
    assert (read.cut, read.message_offset, len(read.messages)) == (0, 0, 6)


def test_a_call_not_settled_before_the_cut_keeps_the_window_at_its_message() -> None:
    c = exchanges(2)
    c.add_assistant_message("", at=9.0)
    call = c.request_tool_call("restart_pod", ToolInput.of({"name": "web-1"}), requires_approval=False)
    c.approve_tool_call(call.id.value, by="policy", at=9.0)  # approved, running: not settled
    for n in range(2, 8):
        c.add_user_message(f"question {n}", at=10.0 + n)
        c.add_assistant_message(f"answer {n}", at=10.0 + n)
    c.move_cut(11)

    assert c.window_start() == (4, 0)
    c.record_tool_result(call.id.value, "restarted", at=20.0)
    assert c.window_start() == (11, 1)  # settled: the window starts at the cut, after every call
