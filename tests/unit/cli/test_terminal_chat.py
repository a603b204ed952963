"""The terminal chat's loop with a scripted transport and a scripted person: what it prints and sends."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from dcaf_like import Agent, ToolContext
from dcaf_like.application.errors import ModelError
from dcaf_like.cli.terminal import InProcessTransport, TerminalChat
from dcaf_like.testing import FakeRuntime, fail

PENDING = {
    "id": "tc_1",
    "name": "delete_pod",
    "input": {"name": "web-2"},
    "execute": False,
    "tool_description": "Delete a pod.",
    "editable": False,
    "approval_reason": "delete_pod requires approval",
}


def done(*pending: dict[str, Any]) -> dict[str, Any]:
    return {"type": "done", "conversation_id": "conv_1", "message": {"data": {"tool_calls": list(pending)}}}


class ScriptedTransport:
    def __init__(self, *turns: list[dict[str, Any]]) -> None:
        self.turns = list(turns)
        self.sent: list[dict[str, Any]] = []

    def turn(self, message: dict[str, Any]) -> Iterator[dict[str, Any]]:
        self.sent.append(message)
        yield from self.turns.pop(0)


def chat(transport: Any, *typed: str | type[EOFError]) -> str:
    """Run the chat, typing `typed` at its prompts; `EOFError` in it is Ctrl-D, as is the end of it."""
    answers = iter(typed)

    def ask(prompt: str) -> str:
        out.write(prompt)
        answer = next(answers, EOFError)
        if answer is EOFError:
            raise EOFError
        return answer

    out = io.StringIO()
    TerminalChat(transport, ask=ask, out=out).run()
    return out.getvalue()


def test_control_characters_from_the_model_or_a_tool_are_shown_not_obeyed():
    executed = {
        "id": "tc_0",
        "name": "cat",
        "input": {},
        "output": "\x1b]0;owned\x07ok",
        "status": "executed",
    }
    transport = ScriptedTransport(
        [
            {"type": "text_delta", "text": "\x1b[2Jcleared?\n"},
            {"type": "tool_finished", "tool_call": executed},
            done(),
        ]
    )

    shown = chat(transport, "hi")

    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "\ufffd[2Jcleared?" in shown
    assert "\ufffd]0;owned\ufffdok" in shown


def test_a_call_a_standing_grant_approved_says_so_on_the_terminal():
    """docs/approvals.md, "Grants": the call says who approved it, on every surface."""
    executed = {
        "id": "tc_0",
        "name": "restart_pod",
        "input": {"name": "web-1"},
        "output": "restarted web-1",
        "status": "executed",
        "grant": {"id": "g_1", "granted_by": "bob", "approval": "approved by grant g_1 from bob"},
    }
    transport = ScriptedTransport([{"type": "tool_finished", "tool_call": executed}, done()])

    shown = chat(transport, "restart web-1")

    assert "executed: restart_pod" in shown
    assert "(approved by grant g_1 from bob)" in shown


def test_a_rejection_without_a_reason_still_says_who_rejected_and_edit_is_refused_for_a_fixed_tool():
    transport = ScriptedTransport(
        [{"type": "approval_required", "call_ids": ["tc_1"]}, done(PENDING)], [done()]
    )

    shown = chat(transport, "delete web-2", "e", "maybe", "n", "")

    assert "delete_pod does not allow editing its arguments" in shown
    decision = transport.sent[1]
    assert decision["data"] == {
        "tool_calls": [{"id": "tc_1", "execute": False, "rejection_reason": "rejected on the terminal"}],
        "conversation_id": "conv_1",
    }
    assert decision["content"] == ""


def test_a_local_agent_whose_model_fails_is_an_error_line_with_the_http_status():
    agent = Agent(runtime=FakeRuntime([fail(ModelError("provider down", runtime="fake"))]))
    transport = InProcessTransport(agent)
    try:
        shown = chat(transport, "hello")
    finally:
        transport.close()

    assert "error 502 model_error: provider down" in shown


def test_ctrl_c_during_a_turn_stops_the_run_at_its_next_step_and_the_chat_goes_on():
    from dcaf_like import tool
    from dcaf_like.testing import reply, tool_call, tool_calls

    ran = []

    def ctrl_c() -> None:
        raise KeyboardInterrupt  # as the signal handler does, in the chat's loop while it waits for events

    @tool(requires_approval=False)
    def scale(name: str, context: ToolContext) -> str:
        """Scale a deployment."""
        ran.append(name)
        if name == "web":  # the person presses Ctrl-C while it runs
            transport.loop.call_soon_threadsafe(ctrl_c)
            context.cancel_signal.wait(30)  # until the cancel it asked for reached this call (a bound)
        return f"{name} scaled"

    runtime = FakeRuntime(
        [
            tool_calls(tool_call("scale", name="web"), tool_call("scale", name="api")),
            reply("Picked up again."),
        ]
    )
    agent = Agent(tools=[scale], runtime=runtime)
    transport = InProcessTransport(agent)
    try:
        shown = chat(transport, "scale web and api", "go on")
    finally:
        transport.close()

    assert "(stopping the run at its next step" in shown
    assert "(run cancelled)" in shown
    assert ran == ["web"]
    assert "not run: the run was cancelled before it" in shown
    assert "agent> Picked up again." in shown


def test_a_tools_progress_is_shown_as_it_comes():
    progress = {"type": "tool_progress", "id": "tc_1", "name": "restart_pods", "message": "3/10 restarted"}
    transport = ScriptedTransport(
        [
            {"type": "tool_started", "id": "tc_1", "name": "restart_pods"},
            {**progress, "fraction": 0.3},
            {**progress, "message": "\x1b[2Jstill going", "fraction": None},
            done(),
        ]
    )

    shown = chat(transport, "restart the pods")

    assert "  restart_pods: 3/10 restarted (30%)\n" in shown
    assert "  restart_pods: \ufffd[2Jstill going\n" in shown


def test_ctrl_d_at_an_approval_prompt_keeps_the_chat_and_asks_again_before_the_next_message():
    transport = ScriptedTransport([done(PENDING)], [done()], [{"type": "text_delta", "text": "ok\n"}, done()])

    shown = chat(transport, "delete web-2", EOFError, "and then?", "y", "and then?")

    assert "(left undecided: the calls keep waiting" in shown
    assert "1 call(s) still wait for your decision; your message was not sent" in shown
    # the held-back message was never sent; the decision was, then the next message
    assert [m["content"] for m in transport.sent] == ["delete web-2", "", "and then?"]
    assert transport.sent[1]["data"]["tool_calls"] == [{"id": "tc_1", "execute": True}]


def test_reject_with_its_reason_in_one_line_at_the_approval_prompt():
    second = {**PENDING, "id": "tc_2", "input": {"name": "web-3"}}
    transport = ScriptedTransport([done(PENDING, second)], [done()])

    chat(transport, "delete both", "/reject not today", "/reject not now either")

    assert transport.sent[1]["data"]["tool_calls"] == [
        {"id": "tc_1", "execute": False, "rejection_reason": "not today"},
        {"id": "tc_2", "execute": False, "rejection_reason": "not now either"},
    ]


def test_help_pending_and_reject_at_the_chat_prompt():
    second = {**PENDING, "id": "tc_2", "input": {"name": "web-3"}}
    transport = ScriptedTransport([done(PENDING, second)], [done()])

    shown = chat(transport, "/pending", "delete both", EOFError, "/help", "/reject maintenance window")

    assert "nothing waits for a decision" in shown  # /pending before anything was proposed
    assert "/reject REASON   reject every waiting call" in shown  # /help
    assert transport.sent[1]["data"]["tool_calls"] == [
        {"id": "tc_1", "execute": False, "rejection_reason": "maintenance window"},
        {"id": "tc_2", "execute": False, "rejection_reason": "maintenance window"},
    ]


def test_an_edit_is_a_patch_shown_as_a_diff_and_runs_only_once_confirmed():
    proposed = {"deployment": "api", "replicas": 5, "namespace": "prod"}
    transport = ScriptedTransport([done({**PENDING, "editable": True, "input": proposed})], [done()])

    shown = chat(
        transport, "scale api", "e", '{"replicas": 3}', "n", "e", '{"replicas": 3, "namespace": null}', "y"
    )

    assert 'deployment: "api" (unchanged)' in shown
    assert "replicas: 5 -> 3" in shown
    assert 'namespace: "prod" (unchanged)' in shown
    assert 'namespace: "prod" (removed)' in shown
    assert transport.sent[1]["data"]["tool_calls"] == [
        {"id": "tc_1", "execute": True, "edited_input": {"replicas": 3, "namespace": None}}
    ]
    assert len(transport.sent) == 2  # the first, unconfirmed edit sent nothing


def test_the_session_seeds_the_first_message_and_the_platform_context_goes_with_every_one():
    transport = ScriptedTransport([done()], [done()])
    out = io.StringIO()
    answers = iter(["first", "second"])

    def ask(prompt: str) -> str:
        answer = next(answers, None)
        if answer is None:
            raise EOFError
        return answer

    TerminalChat(
        transport, ask=ask, out=out, session={"namespace": "prod"}, platform_context={"tenant": "acme"}
    ).run()

    first, second = transport.sent
    assert first["data"]["session"] == {"namespace": "prod"}
    assert "session" not in second["data"], "resent, it would undo what the tools changed"
    assert first["platform_context"] == second["platform_context"] == {"tenant": "acme"}


def test_the_terminal_reads_a_calls_reasons_and_edit_by_their_names_and_a_server_before_them_by_reason():
    edited = {"id": "tc_0", "name": "scale", "input": {"replicas": 3}, "proposed_input": {"replicas": 5}}
    rejected = {"id": "tc_2", "name": "restart_pod", "input": {}, "rejection_reason": "not today"}
    before = {key: value for key, value in PENDING.items() if key != "approval_reason"}
    old_server = {**before, "id": "tc_3", "reason": "an older server says why"}
    transport = ScriptedTransport(
        [
            {
                "type": "tool_finished",
                "tool_call": {**edited, "edited": True, "output": "ok", "status": "executed"},
            },
            {"type": "tool_rejected", "tool_call": rejected},
            done(PENDING, old_server),
        ],
        [done()],
    )

    shown = chat(transport, "go", "y", "y")

    assert 'executed: scale {"replicas": 3} (arguments edited)' in shown
    assert "rejected: restart_pod {}: not today" in shown
    assert "why it waits: delete_pod requires approval" in shown
    assert "why it waits: an older server says why" in shown


def test_a_question_is_prompted_in_its_kind_until_the_answer_is_one_it_takes():
    from dcaf_like import ask_user
    from dcaf_like.testing import reply, tool_call, tool_calls

    pick = tool_call("ask_user", question="Which namespace?", kind="selection", options=["prod", "staging"])
    sure = tool_call("ask_user", question="Delete them all?", kind="confirmation")
    runtime = FakeRuntime([tool_calls(pick), tool_calls(sure), reply("Deleting staging's pods.")])
    agent = InProcessTransport(Agent(tools=[ask_user], runtime=runtime))
    try:
        shown = chat(agent, "clean up", "3", "2", "maybe", "y", "thanks")
    finally:
        agent.close()

    assert shown.count("asks: Which namespace?") == 1  # issue 36 item 5: it was printed twice
    assert "The agent asks: Which namespace?\n  1. prod\n  2. staging\n" in shown
    assert "a number from 1 to 2" in shown  # "3" was asked again
    assert "y or n" in shown  # so was "maybe"
    assert "agent> Deleting staging's pods." in shown
    [first, second] = runtime.requests[1:3]
    assert first.messages[-1].content == "staging"
    assert second.messages[-1].content == "yes"


def test_a_declined_question_fails_the_call_and_the_chat_goes_on():
    from dcaf_like import ask_user
    from dcaf_like.testing import reply, tool_call, tool_calls

    runtime = FakeRuntime([tool_calls(tool_call("ask_user", question="Why?")), reply("As you wish.")])
    agent = InProcessTransport(Agent(tools=[ask_user], runtime=runtime))
    try:
        shown = chat(agent, "go", "/decline")
    finally:
        agent.close()

    assert "failed: ask_user" in shown
    assert "agent> As you wish." in shown


def test_the_model_that_answered_is_shown_when_a_fallback_chose_it_and_not_otherwise():
    def answered(runtime: str, answered_by: str) -> dict[str, Any]:
        meta = {"runtime": runtime, "answered_by": answered_by}
        return {"type": "done", "conversation_id": "c", "message": {"data": {"tool_calls": []}, "meta": meta}}

    fell_back = chat(ScriptedTransport([answered("fallback(openai, local)", "local")]), "hi")
    plain = chat(ScriptedTransport([answered("openai", "openai")]), "hi")

    assert "(answered by local)" in fell_back
    assert "answered by" not in plain


class ReadableTransport(ScriptedTransport):
    """A scripted transport whose conversation, read back, is `record`."""

    def __init__(self, record: dict[str, Any], *turns: list[dict[str, Any]]) -> None:
        super().__init__(*turns)
        self.record = record

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        return self.record


EMPTY = {"id": "conv_1", "messages": [], "tool_calls": [], "questions": []}


def test_a_stream_that_ends_before_the_run_did_says_so():
    """docs/ui.md, "The terminal: `dcaf-like chat`": a stream that ends before the run did says so."""
    transport = ReadableTransport(EMPTY, [{"type": "tool_started", "id": "tc_1", "name": "snapshot_volume"}])

    shown = chat(transport, "snapshot vol-7")

    assert "  running snapshot_volume ...\n  (the stream ended before the run did)\n" in shown


def test_stopping_is_said_once_whoever_asked_for_the_cancel():
    """docs/ui.md, "The terminal: `dcaf-like chat`": the chat's own Ctrl-C and the stream's
    `cancel_requested` event say "stopping" once."""
    cancelled = {"type": "done", "conversation_id": "conv_1",
                 "message": {"data": {"tool_calls": []}, "meta": {"stop_reason": "cancelled"}}}  # fmt: skip
    transport = ScriptedTransport([{"type": "cancelling"}, {"type": "cancel_requested"}, cancelled])
    alone = ScriptedTransport([{"type": "cancel_requested"}, {"type": "cancel_requested"}, cancelled])

    mine, another = chat(transport, "snapshot vol-7"), chat(alone, "snapshot vol-7")

    assert mine.count("(stopping the run at its next step; Ctrl-C again to leave)") == 1
    assert "a cancel was asked for" not in mine
    assert another.count("(a cancel was asked for: the run stops at its next step)") == 1
    assert "(run cancelled)" in another


def test_a_call_under_a_team_rule_shows_who_approved_so_far_and_what_it_still_needs():
    """docs/approvals.md, "Approvals by teams": a partial approval is shown where the call is."""
    counted = {
        **PENDING,
        "approvals": {
            "rule": "2 approvers from sre, not the requester",
            "given": [{"by": "alice", "at": 1.0, "stage": 1}],
            "needed": [{"stage": 1, "count": 1, "groups": ["sre"]}],
        },
    }
    transport = ScriptedTransport([done(counted)])

    shown = chat(transport, "delete web-2")

    assert (
        "  approvals: 2 approvers from sre, not the requester; approved by alice; needs 1 more from sre"
        in shown
    )


def test_a_call_whose_escalation_sent_its_notices_says_so_on_the_terminal():
    """docs/approvals.md, "Escalation": every surface shows the notices sent."""
    escalated = {
        **PENDING,
        "approvals": {
            "rule": "1 approver from leads, escalated to oncall after 1800s",
            "given": [],
            "needed": [{"stage": 1, "count": 1, "groups": ["leads"]}],
            "reminded_at": 600.0,
            "escalated_at": 1800.0,
            "escalated_to": ["oncall"],
        },
    }
    transport = ScriptedTransport([done(escalated)])

    shown = chat(transport, "delete web-2")

    assert "needs 1 more from leads; approvers reminded; escalated to oncall" in shown


def test_the_terminal_shows_a_calls_risk_and_that_an_irreversible_one_cannot_be_undone():
    """docs/approvals.md, "What the approver sees": the terminal names the risk before asking."""
    irreversible = {**PENDING, "risk": "irreversible"}
    transport = ScriptedTransport([done(irreversible)], [done()])

    out = chat(transport, "delete it", "n", "not now")

    assert "  risk: irreversible (cannot be undone)\n" in out
    assert out.index("risk: irreversible") < out.index("approve?")


def test_the_terminal_shows_a_calls_preview_and_binds_its_approval_to_it():
    """docs/approvals.md, "What the approver sees": the preview before the question, its digest echoed."""
    shown = {"preview": "-replicas: 2\n+replicas: 5", "preview_kind": "diff", "preview_digest": "d1"}
    previewed = {**PENDING, **shown}
    transport = ScriptedTransport([done(previewed)], [done()])

    out = chat(transport, "scale it", "y")

    assert "  what it would do:\n    -replicas: 2\n    +replicas: 5\n" in out
    approval = {"id": "tc_1", "execute": True, "preview_digest": "d1"}
    assert transport.sent[1]["data"]["tool_calls"] == [approval]


def test_a_call_sent_to_the_background_is_said_with_how_to_read_its_result():
    """docs/runs.md, "Tools on a job engine": `dcaf-like chat` says the call runs in the background."""
    meta = {"stop_reason": "running_in_background"}
    done = {
        "type": "done",
        "conversation_id": "conv_1",
        "message": {"data": {"tool_calls": []}, "meta": meta},
    }
    transport = ScriptedTransport([{"type": "tool_queued", "id": "tc_1", "name": "drain_node"}, done])

    shown = chat(transport, "drain n1")

    assert "  drain_node runs in the background: send an empty line later for its result\n" in shown
    assert "  (a tool runs in the background)\n" in shown
