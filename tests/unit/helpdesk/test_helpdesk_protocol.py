"""The HelpDesk protocol outside the application: one set of rules, read from plain data or from the
HTTP body pydantic validated, and the old methods kept for a release."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dcaf_like import AgentRequest, AgentResponse, InvalidRequest, ToolCallView, ToolDecision
from dcaf_like.helpdesk import protocol
from dcaf_like.helpdesk.wire import ChatRequest
from dcaf_like.server.a2a_tasks import Incoming
from dcaf_like.server.a2a_tasks import agent_request as a2a_request
from dcaf_like.server.auth import ANYONE, authorized
from dcaf_like.server.chat import agent_request

ids = st.text("abc_1", min_size=1, max_size=6)
texts = st.none() | st.text("ab ", max_size=4)
objects = st.dictionaries(
    st.sampled_from(["a", "b"]), st.integers(0, 3) | st.text("xy", max_size=2), max_size=2
)

tool_calls = st.fixed_dictionaries(
    {"id": ids},
    optional={
        "execute": st.booleans(),
        "name": st.none() | st.sampled_from(["delete_pod", "list_pods"]),
        "input": st.none() | objects,
        "edited_input": st.none() | objects,
        "rejection_reason": st.none() | st.text("no ", max_size=3),
        "rejected": st.booleans(),
        "tool_description": st.text("d", max_size=2),
    },
)
commands = st.fixed_dictionaries(
    {"execute": st.booleans()},
    optional={
        "id": ids,
        "command": st.sampled_from(["ls", "kubectl get pods", "ls 'a b'", "ls 'unclosed"]),
        "argv": st.lists(st.sampled_from(["ls", "a b", "kubectl", "get", "pods"]), max_size=3),
        "rejection_reason": st.none() | st.text("no ", max_size=3),
    },
)
data = st.fixed_dictionaries(
    {},
    optional={
        "tool_calls": st.none() | st.lists(tool_calls, max_size=3),
        "cmds": st.none() | st.lists(commands, max_size=3),
        "session": st.none() | objects,
        "executed_tool_calls": st.none() | st.lists(objects, max_size=1),
        "executed_cmds": st.none() | st.lists(objects, max_size=1),
        "conversation_id": st.none() | st.sampled_from(["", "conv_1", "conv_2"]),
        "thread_id": st.none() | st.sampled_from(["", "thread_1"]),
    },
)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "user", "assistant"])},
    optional={"content": texts, "data": st.none() | data, "platform_context": st.none() | objects},
)
bodies = st.fixed_dictionaries(
    {"messages": st.lists(messages, min_size=1, max_size=4)},
    optional={
        "conversation_id": st.none() | st.sampled_from(["conv_9"]),
        "platform_context": st.none() | objects,
    },
)


def outcome(read: Any) -> AgentRequest | tuple[str, str]:
    try:
        return read()
    except InvalidRequest as exc:
        return ("refused", exc.field)


def as_before(body: dict[str, Any]) -> AgentRequest:
    """What the server did before the protocol left the application: the validated body dumped back
    to plain data and read again."""
    payload = ChatRequest.model_validate(body).model_dump(mode="json", exclude_none=True)
    request = protocol.read_messages(
        payload["messages"],
        conversation_id=payload.get("conversation_id"),
        platform_context=payload.get("platform_context"),
        user=ANYONE.name,
    )
    return authorized(request, ANYONE, "http")


def last(data: dict[str, Any], **message: Any) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": "hi", "data": {"conversation_id": "conv_1"}},
            {**message, "data": data},
        ]
    }


@settings(max_examples=300, deadline=None)
@given(bodies)
@example(last({"tool_calls": [{"id": "tc_1", "rejected": True}]}, role="user"))
@example(last({"tool_calls": [{"id": "tc_1", "rejection_reason": "no", "input": {"a": 1}}]}, role="user"))
@example(
    last(
        {"tool_calls": [{"id": "tc_1", "execute": True, "edited_input": {"a": 2}, "name": "x"}]}, role="user"
    )
)
@example(last({"tool_calls": [{"id": "tc_1", "execute": False}]}, role="user", content="go"))
@example(
    last({"cmds": [{"command": "ls", "execute": False}, {"command": "ls", "execute": True}]}, role="user")
)
@example(last({"session": {"a": 1}, "thread_id": "thread_1"}, role="user", platform_context={"b": 2}))
@example({**last({"session": {}}, role="user", platform_context={"b": 2}), "platform_context": {}})
@example(last({}, role="assistant", content="yes"))
def test_the_validated_body_reads_as_the_same_turn_as_its_plain_data(body):
    typed = outcome(lambda: agent_request(ChatRequest.model_validate(body), ANYONE, "http"))

    assert typed == outcome(lambda: as_before(body))


def test_a_decision_is_read_from_execute_or_a_rejection_and_an_echo_is_none():
    assert protocol.decision("tc_1", execute=True) == ToolDecision("tc_1", True)
    assert protocol.decision("tc_1", execute=False, reason="no") == ToolDecision.rejected("tc_1", "no")
    assert protocol.decision("tc_1", execute=False, rejected=True) == ToolDecision.rejected("tc_1")
    assert protocol.decision("tc_1", execute=False) is None


def test_a_command_decision_is_the_decision_on_its_call_bound_to_the_argv_shown():
    bound = {"argv": ["kubectl", "get", "pods", "-n", "prod x"]}
    approved = ToolDecision("tc_1", True, "run_command", bound)
    line = "kubectl get pods -n 'prod x'"

    assert protocol.command_decision("tc_1", execute=True, command=line, path="c") == approved
    assert protocol.command_decision("tc_1", execute=True, argv=bound["argv"], path="c") == approved
    assert protocol.command_decision("tc_1", execute=True, path="c") == ToolDecision(
        "tc_1", True, "run_command"
    )
    assert protocol.command_decision("tc_1", execute=False, reason="no", path="c") == ToolDecision(
        "tc_1", False, "run_command", reason="no"
    )
    assert protocol.command_decision(None, execute=False, command="ls", path="c") is None
    for refused, field in [
        (lambda: protocol.command_decision(None, execute=True, command="ls", path="c"), "c"),
        (
            lambda: protocol.command_decision("tc_1", execute=True, command="ls", argv=["rm"], path="c"),
            "c.command",
        ),
        (lambda: protocol.command_decision("tc_1", execute=True, command="ls 'open", path="c"), "c.command"),
        (lambda: protocol.read_data({"cmds": [{"id": "tc_1", "argv": "ls"}]}), "data.cmds[0].argv"),
    ]:
        with pytest.raises(InvalidRequest) as caught:
            refused()
        assert caught.value.field == field


def test_the_last_message_must_be_the_users_and_a_refusal_names_the_field():
    with pytest.raises(InvalidRequest) as refused:
        protocol.read_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}])
    assert refused.value.field == "messages[1].role"

    body = ChatRequest.model_validate({"messages": [{"role": "assistant", "content": "yes"}]})
    with pytest.raises(InvalidRequest) as refused:
        agent_request(body, ANYONE, "http")
    assert refused.value.field == "messages[0].role"


DEV, STAGING = {"tenant_name": "dev"}, {"tenant_name": "staging"}


@pytest.mark.parametrize(
    ("top_level", "carried", "in_force"),
    [
        (None, [DEV, None, None], DEV),  # the seed's example: on the first message only
        (None, [DEV, None, STAGING], STAGING),  # the latest message that carries one
        (None, [DEV, STAGING, {}], STAGING),  # an empty object carries none
        (STAGING, [DEV, None, DEV], STAGING),  # the top level comes first
        ({}, [DEV, None, None], DEV),
        (None, [None, None], {}),
    ],
)
def test_the_platform_context_is_the_top_levels_else_the_latest_a_message_carries(
    top_level, carried, in_force
):
    roles = ["user", "assistant"] * 2
    messages = [
        {"role": role, "content": "x", **({} if c is None else {"platform_context": c})}
        for role, c in zip(roles, carried[:-1], strict=False)
    ]
    messages.append(
        {
            "role": "user",
            "content": "go",
            **({} if carried[-1] is None else {"platform_context": carried[-1]}),
        }
    )
    body = {"messages": messages, **({} if top_level is None else {"platform_context": top_level})}

    plain = protocol.read_messages(messages, platform_context=top_level)
    typed = agent_request(ChatRequest.model_validate(body), ANYONE, "http")

    assert dict(plain.platform_context) == dict(typed.platform_context) == in_force


def test_an_a2a_data_part_carries_decisions_and_a_refusal_names_its_own_field():
    incoming = Incoming(
        "go", {"tool_calls": [{"id": "tc_1", "execute": True}], "platform_context": {"env": "dev"}}
    )

    request = a2a_request(incoming, ANYONE)

    assert request.decisions == (ToolDecision("tc_1", True),)
    assert (request.text, dict(request.platform_context), request.entrance) == ("go", {"env": "dev"}, "a2a")
    with pytest.raises(InvalidRequest) as refused:
        a2a_request(Incoming("", {"tool_calls": [{"id": "tc_1", "execute": "yes"}]}), ANYONE)
    assert refused.value.field == "data.tool_calls[0].execute"
    with pytest.raises(InvalidRequest) as refused:
        a2a_request(Incoming("", {"cmds": [{"command": "rm -rf /", "execute": True}]}), ANYONE)
    assert refused.value.field == "data.cmds[0]"
    command = {"id": "tc_2", "argv": ["kubectl", "get", "pods"], "execute": True}
    assert a2a_request(Incoming("", {"cmds": [command]}), ANYONE).decisions == (
        ToolDecision("tc_2", True, "run_command", {"argv": ["kubectl", "get", "pods"]}),
    )


def test_a_custom_function_gets_the_turn_as_messages_without_the_clients_decisions():
    request = AgentRequest(
        text="and now?",
        conversation_id="conv_1",
        decisions=(ToolDecision("tc_1", True),),
        session={"k": 1},
        history=(("user", "hi"), ("assistant", "hello")),
    )

    assert protocol.function_messages(request) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and now?", "data": {"conversation_id": "conv_1", "session": {"k": 1}}},
    ]


def view() -> ToolCallView:
    return ToolCallView("tc_1", "delete_pod", {"name": "web-1"}, "pending", description="Delete a pod.")


def test_the_application_s_results_know_no_wire_format():
    """Issue 34: the deprecated methods that wrote the protocol from the application's results (through
    an import by name, the last circle) are gone; the protocol's functions write it."""
    response = AgentResponse("conv_1", "Approve?", pending_tool_calls=(view(),))

    for gone in ("to_helpdesk_message",):
        assert not hasattr(response, gone)
    for gone in ("to_pending_dict", "to_executed_dict", "to_rejected_dict"):
        assert not hasattr(view(), gone)
    assert not hasattr(AgentRequest, "from_messages")
    assert protocol.assistant_message(response)["data"]["tool_calls"] == [protocol.pending_call(view())]


def test_the_request_id_goes_last_in_meta_when_given():
    response = AgentResponse("conv_1", "Done.")

    assert "request_id" not in protocol.assistant_message(response)["meta"]
    assert list(protocol.assistant_message(response, request_id="r1")["meta"])[-1] == "request_id"


def test_stream_lines_are_numbered_from_zero_and_timed_never_earlier_than_the_line_before():
    from dcaf_like.helpdesk.protocol import Stamps

    times = iter([1795750737.1234, 1795750737.9999, 1795750700.0, 1795750738.5])  # the clock stepped back
    stamps = Stamps(clock=lambda: next(times))

    lines = [stamps.stamp({"type": "text_delta", "text": str(n)}) for n in range(4)]

    assert [line["seq"] for line in lines] == [0, 1, 2, 3]
    assert [line["ts"] for line in lines] == [
        "2026-11-27T03:38:57.123Z",
        "2026-11-27T03:38:58.000Z",  # .9999 rounds up to the next second
        "2026-11-27T03:38:58.000Z",  # held, not earlier
        "2026-11-27T03:38:58.500Z",
    ]
    assert lines[0] == {"type": "text_delta", "text": "0", "seq": 0, "ts": lines[0]["ts"]}  # only added


def test_answers_are_read_from_plain_data_and_from_the_http_body_alike():
    data = {
        "answers": [
            {"id": "q_1", "value": True},
            {"id": "q_2", "value": "staging"},
            {"id": "q_3", "declined": True},
        ]
    }
    message = {"role": "user", "content": "", "data": data}

    plain = protocol.read_messages([message])
    served = agent_request(ChatRequest.model_validate({"messages": [message]}), ANYONE, "http")

    expected = (
        protocol.answer("q_1", True),
        protocol.answer("q_2", "staging"),
        protocol.answer("q_3", declined=True),
    )
    assert plain.answers == served.answers == expected


@pytest.mark.parametrize(
    ("answers", "field"),
    [
        ([{"value": True}], "messages[0].data.answers[0].id"),
        ([{"id": "q_1", "value": 3}], "messages[0].data.answers[0].value"),
        ([{"id": "q_1", "value": True, "declined": "yes"}], "messages[0].data.answers[0].declined"),
        ({"id": "q_1"}, "messages[0].data.answers"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_refused_naming_where(answers, field):
    with pytest.raises(InvalidRequest) as info:
        protocol.read_messages([{"role": "user", "data": {"answers": answers}}])

    assert info.value.field == field


def test_a2a_data_carries_answers_too():
    request = a2a_request(Incoming("", {"answers": [{"id": "q_1", "value": "prod"}]}), ANYONE)

    assert request.answers == (protocol.answer("q_1", "prod"),)


# -- images and files in a message --------------------------------------------------------------------


def test_a_message_of_parts_reads_as_its_text_and_its_attachments_in_python():
    from dcaf_like import Agent, attachment
    from dcaf_like.testing import FakeRuntime

    runtime = FakeRuntime(["A crash loop."], accepts={"image"})
    agent = Agent(runtime=runtime)
    content = [
        {"type": "text", "text": "what is wrong"},
        {"type": "image", "url": "https://example.com/a.png"},
        {"type": "text", "text": "here?"},
    ]

    agent.run([{"role": "user", "content": content}])

    [turn] = runtime.requests[0].messages
    assert turn.text == "what is wrong\n\nhere?"
    assert turn.attachments == (attachment("image", url="https://example.com/a.png"),)


def test_a_part_over_its_limit_is_refused_in_python_naming_it():
    import base64

    from dcaf_like import MAX_PART_BYTES, PartTooLarge

    big = base64.b64encode(b"\0" * (MAX_PART_BYTES + 1)).decode()

    part = {"type": "file", "name": "a", "media_type": "a/b", "data": big}

    with pytest.raises(PartTooLarge) as refused:
        protocol.read_messages([{"role": "user", "content": [part]}])

    assert refused.value.field == "messages[0].content[0]"


def test_an_attachments_repr_shows_its_size_not_its_data():
    from dcaf_like import attachment

    part = attachment("file", media_type="application/pdf", data="JVBERi0xLjQ=", name="r.pdf")

    assert repr(part) == "Attachment(file, 'application/pdf', 8 bytes, name='r.pdf')"
