"""One vocabulary for a call (ADR 20): Python's view, the protocol's call objects and the stream's events
name a call's arguments and reasons alike, for a call proposed, edited and run, and for a rejected one."""

from __future__ import annotations

from typing import Any

import pytest

from dcaf_like import Agent, ApprovalAnswer, PendingApproval, RemoteCall, ToolCallView, ToolDecision
from dcaf_like.application.events import ToolFinished, ToolRejected
from dcaf_like.helpdesk.protocol import assistant_message, event_lines
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

NAMES = ("input", "proposed_input", "edited", "approval_reason")
PROPOSED = {"name": "web-1", "namespace": "default"}
RAN = {"name": "web-2", "namespace": "default"}


def named(call: ToolCallView | dict[str, Any], *extra: str) -> dict[str, Any]:
    """A call's values under the shared names, from a view or a protocol dict."""
    if isinstance(call, dict):
        return {name: call[name] for name in (*NAMES, *extra)}
    return {name: getattr(call, name) for name in (*NAMES, *extra)}


@pytest.fixture
def agent(cluster):
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("delete_pod", name="web-1"), tool_call("restart_pod", name="web-3")),
            reply("Deleted web-2; left web-3."),
        ]
    )
    return Agent(tools=cluster.tools(), runtime=runtime)


def decisions(first) -> list[ToolDecision]:
    delete, restart = first.pending_tool_calls
    return [
        ToolDecision.approved(delete.id, edited_arguments={"name": "web-2"}),
        ToolDecision.rejected(restart.id, "not now"),
    ]


def test_a_waiting_call_shows_its_proposal_as_input_and_why_it_waits_in_python_and_on_the_wire(agent):
    first = agent.run("delete web-1, restart web-3")

    view, _ = first.pending_tool_calls
    [wire, _] = assistant_message(first)["data"]["tool_calls"]

    expected = {
        "input": PROPOSED,
        "proposed_input": PROPOSED,
        "edited": False,
        "approval_reason": "delete_pod requires approval",
    }
    assert named(view) == named(wire) == expected
    assert view.rejection_reason is None
    assert (view.status, view.description, view.requires_approval, view.editable) == (
        "pending",
        "Delete a pod.",
        True,
        True,
    )
    assert wire["reason"] == "delete_pod requires approval"  # the deprecated alias, still sent


def test_an_edited_call_that_ran_and_a_rejected_one_have_the_same_names_in_python_and_on_the_wire(agent):
    first = agent.run("delete web-1, restart web-3")

    done = agent.decide(first.conversation_id, decisions(first))

    [ran], [rejected] = done.executed_tool_calls, done.rejected_tool_calls
    assert (ran.status, ran.output, ran.error, rejected.editable) == (
        "executed",
        'pod "web-2" deleted',
        None,
        False,
    )
    data = assistant_message(done)["data"]
    assert (
        named(ran)
        == named(data["executed_tool_calls"][0])
        == {
            "input": RAN,
            "proposed_input": PROPOSED,
            "edited": True,
            "approval_reason": "delete_pod requires approval",
        }
    )
    assert (
        named(rejected, "rejection_reason")
        == named(data["rejected_tool_calls"][0], "rejection_reason")
        == {
            "input": {"name": "web-3", "namespace": "default"},
            "proposed_input": {"name": "web-3", "namespace": "default"},
            "edited": False,
            "approval_reason": "restart_pod requires approval",
            "rejection_reason": "not now",
        }
    )
    assert data["rejected_tool_calls"][0]["reason"] == "not now"  # the deprecated alias, still sent
    assert "edited_input" not in data["executed_tool_calls"][0]


def test_the_stream_events_of_a_call_carry_the_names_of_the_response(agent):
    first = agent.run("delete web-1, restart web-3")
    request = {"conversation_id": first.conversation_id}

    events = list(
        agent.run_stream(
            [{"role": "user", "content": "", "data": {**request, "tool_calls": wire_decisions(first)}}]
        )
    )

    finished = next(e for e in events if isinstance(e, ToolFinished))
    rejected = next(e for e in events if isinstance(e, ToolRejected))
    [finished_line, executed_line] = event_lines(finished, "req")
    [rejected_line] = event_lines(rejected, "req")
    assert named(finished_line["tool_call"]) == named(executed_line["executed_tool_calls"][0])
    assert named(finished_line["tool_call"]) == {
        "input": RAN,
        "proposed_input": PROPOSED,
        "edited": True,
        "approval_reason": "delete_pod requires approval",
    }
    assert named(rejected_line["tool_call"], "rejection_reason") == {
        "input": {"name": "web-3", "namespace": "default"},
        "proposed_input": {"name": "web-3", "namespace": "default"},
        "edited": False,
        "approval_reason": "restart_pod requires approval",
        "rejection_reason": "not now",
    }


def wire_decisions(first) -> list[dict[str, Any]]:
    delete, restart = assistant_message(first)["data"]["tool_calls"]
    return [
        {**delete, "execute": True, "edited_input": {"name": "web-2"}},
        {**restart, "execute": False, "rejection_reason": "not now"},
    ]


def test_a_call_the_policy_ran_without_asking_never_waited(cluster):
    runtime = FakeRuntime([tool_calls(tool_call("list_pods")), reply("Two pods.")])
    agent = Agent(tools=cluster.tools(), runtime=runtime)

    [ran] = agent.run("list the pods").executed_tool_calls

    assert (ran.approval_reason, ran.edited, ran.input, ran.proposed_input) == (
        None,
        False,
        {"namespace": "default"},
        {"namespace": "default"},
    )


def test_a_view_built_by_hand_was_proposed_as_it_runs():
    view = ToolCallView("tc_1", "delete_pod", {"name": "web-1"}, "pending")

    assert (view.proposed_input, view.edited) == ({"name": "web-1"}, False)
    view.input["name"] = "web-2"
    assert view.proposed_input == {"name": "web-1"}  # a copy, not the same dict


# -- the old names, kept for one release ----------------------------------------------------------------


def test_the_old_names_of_a_view_still_read_and_warn(agent):
    first = agent.run("delete web-1, restart web-3")
    done = agent.decide(first.conversation_id, decisions(first))
    [waiting, _] = first.pending_tool_calls
    [ran] = done.executed_tool_calls

    with pytest.warns(DeprecationWarning, match=r"ToolCallView.reason .* use ToolCallView.approval_reason"):
        assert waiting.reason == "delete_pod requires approval"
    with pytest.warns(DeprecationWarning, match=r"ToolCallView.edited_input .* use ToolCallView.input"):
        assert ran.edited_input == RAN
    with pytest.warns(DeprecationWarning, match="ToolCallView.edited_input"):
        assert waiting.edited_input is None


def test_the_old_name_of_why_a_call_waits_still_reads_and_warns_for_an_approver_and_a_remote_call(cluster):
    asked: list[PendingApproval] = []

    def approver(pending: PendingApproval) -> ApprovalAnswer:
        asked.append(pending)
        return ApprovalAnswer(approved=False, reason="no")

    runtime = FakeRuntime([tool_calls(tool_call("restart_pod", name="web-1")), reply("ok")])
    Agent(tools=cluster.tools(), runtime=runtime, approver=approver).run("restart web-1")
    remote = RemoteCall("tc_1", "restart_pod", {"name": "web-1"}, "restart_pod requires approval")

    assert asked[0].approval_reason == "restart_pod requires approval"
    with pytest.warns(
        DeprecationWarning, match=r"PendingApproval.reason .* use PendingApproval.approval_reason"
    ):
        assert asked[0].reason == "restart_pod requires approval"
    with pytest.warns(DeprecationWarning, match=r"RemoteCall.reason .* use RemoteCall.approval_reason"):
        assert remote.reason == "restart_pod requires approval"
