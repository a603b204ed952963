"""docs/approvals.md, "What the approver sees": a tool's preview runs when a call is proposed, is
shown with it, and is part of what an approval binds to (ADR 38)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dcaf_like import Agent, ToolDecision, tool
from dcaf_like.application.notifications import ApprovalNotice, ApprovalNotifier
from dcaf_like.domain import PreviewChanged, ToolCallStatus
from dcaf_like.helpdesk import protocol
from dcaf_like.stores._codec import decode, encode
from dcaf_like.testing import FakeRuntime, reply, tool_call

REPLICAS = {"api": 2}
RAN: list[tuple[str, int]] = []


def scale_preview(deployment: str, replicas: int) -> str:
    return (
        f"--- {deployment} (now)\n+++ {deployment} (after)\n@@ spec @@\n"
        f"-replicas: {REPLICAS[deployment]}\n+replicas: {replicas}\n"
    )


@tool(preview=scale_preview, risk="reversible")
def scale(deployment: str, replicas: int) -> str:
    """Scale a deployment."""
    RAN.append((deployment, replicas))
    REPLICAS[deployment] = replicas
    return f"{deployment} scaled to {replicas}"


def broken_preview(name: str) -> str:
    raise RuntimeError("the cluster did not answer")


@tool(preview=broken_preview)
def delete_pod(name: str) -> str:
    """Delete a pod."""
    return f"deleted {name}"


class RecordingNotifier(ApprovalNotifier):
    def __init__(self) -> None:
        self.notices: list[ApprovalNotice] = []

    def approval_required(self, notice: ApprovalNotice) -> None:
        self.notices.append(notice)


@pytest.fixture(autouse=True)
def cluster() -> None:
    REPLICAS.clear()
    REPLICAS["api"] = 2
    RAN.clear()


def test_a_preview_runs_when_the_call_is_proposed_and_is_shown_with_it_never_run_as_the_call():
    """docs/approvals.md, "What the approver sees": the preview in data.tool_calls, the webhook and
    the stored conversation; the tool itself did not run."""
    notifier = RecordingNotifier()
    agent = Agent(
        tools=[scale],
        runtime=FakeRuntime([tool_call("scale", deployment="api", replicas=5)]),
        approval_notifier=notifier,
    )

    [call] = agent.run("scale api to 5").pending_tool_calls

    assert call.status == "pending"
    assert RAN == []
    assert call.preview_kind == "diff"
    assert "-replicas: 2\n+replicas: 5" in (call.preview or "")
    wire = protocol.pending_call(call)
    assert (wire["preview"], wire["preview_kind"], wire["preview_digest"]) == (
        call.preview,
        "diff",
        call.preview_digest,
    )
    [waiting] = notifier.notices[0].calls
    assert (waiting.preview, waiting.preview_kind) == (call.preview, "diff")


def test_an_approval_sent_against_another_preview_is_refused_and_carries_the_current_one():
    """docs/approvals.md, "What the approver sees": the decision binds to the preview's digest."""
    runtime = FakeRuntime([tool_call("scale", deployment="api", replicas=5), reply("Scaled.")])
    agent = Agent(tools=[scale], runtime=runtime)
    response = agent.run("scale api to 5")
    [call] = response.pending_tool_calls

    with pytest.raises(PreviewChanged) as refused:
        agent.decide(response.conversation_id, [ToolDecision(call.id, True, preview_digest="0" * 64)])

    assert refused.value.current["preview_digest"] == call.preview_digest
    assert refused.value.current["preview"] == call.preview
    assert RAN == []
    done = agent.decide(
        response.conversation_id, [ToolDecision(call.id, True, preview_digest=call.preview_digest)]
    )
    assert [c.status for c in done.executed_tool_calls] == ["executed"]
    assert RAN == [("api", 5)]


def approved_then_stale() -> tuple[Agent, Any, Any, Any]:
    """A rescale of api to 5 (``recheck=True``), approved after someone scaled api to 3: the agent,
    the response that proposed it, the call as first seen, and the response to the approval."""

    @tool(preview=scale_preview, recheck=True)
    def rescale(deployment: str, replicas: int) -> str:
        """Scale a deployment, checking the preview still holds first."""
        RAN.append((deployment, replicas))
        return "scaled"

    runtime = FakeRuntime([tool_call("rescale", deployment="api", replicas=5), reply("Scaled.")])
    agent = Agent(tools=[rescale], runtime=runtime)
    first = agent.run("scale api to 5")
    [seen] = first.pending_tool_calls
    REPLICAS["api"] = 3  # someone scaled it meanwhile
    again = agent.decide(
        first.conversation_id, [ToolDecision(seen.id, True, preview_digest=seen.preview_digest)]
    )
    return agent, first, seen, again


def test_a_call_that_went_stale_leaves_a_record_in_the_audit_trail_between_its_two_approvals():
    """docs/operations.md, "The audit trail": a call the stale-plan check stopped is recorded (`stale`, by
    the system), so the trail shows why an approved call did not run and why it was approved twice."""

    agent, first, seen, again = approved_then_stale()
    [waiting] = again.pending_tool_calls
    agent.decide(first.conversation_id, [ToolDecision(seen.id, True, preview_digest=waiting.preview_digest)])

    records = sorted(agent.repository.decision_records(first.conversation_id), key=lambda r: r.at)
    assert [(r.outcome, r.decider, r.call_id) for r in records] == [
        ("approved", "human", seen.id),
        ("stale", "system", seen.id),
        ("approved", "human", seen.id),
    ]
    assert records[1].decided_by == "system"
    assert records[1].reason == "not run: its preview changed since it was approved"
    assert "replicas" not in records[1].reason  # what the preview said stays with the call


def test_a_failing_preview_is_recorded_as_such_and_the_call_still_waits_for_approval():
    """docs/approvals.md, "What the approver sees": a preview error, never a failed call."""
    agent = Agent(
        tools=[delete_pod], runtime=FakeRuntime([tool_call("delete_pod", name="web-1"), reply("ok")])
    )

    [call] = agent.run("delete web-1").pending_tool_calls

    assert call.status == ToolCallStatus.PENDING
    assert call.preview is None
    assert "the cluster did not answer" in (call.preview_error or "")
    assert call.preview_digest is not None


def test_a_preview_is_stored_with_its_call_and_reads_back_with_the_same_digest():
    agent = Agent(tools=[scale], runtime=FakeRuntime([tool_call("scale", deployment="api", replicas=5)]))
    response = agent.run("scale")
    conversation = agent.repository.get(response.conversation_id)
    assert conversation is not None

    loaded = decode(encode(conversation), conversation.id)

    [call] = loaded.tool_calls.values()
    [shown] = response.pending_tool_calls
    assert (call.preview, call.preview_kind, call.preview_digest) == (
        shown.preview,
        "diff",
        shown.preview_digest,
    )


def test_a_preview_of_a_dict_is_json_and_one_of_text_is_text():
    @tool(preview=lambda name: {"pod": name, "owner": "ReplicaSet/web"})
    def evict(name: str) -> str:
        """Evict a pod."""
        return ""

    @tool(preview=lambda name: f"would evict {name}")
    def drain(name: str) -> str:
        """Drain a node."""
        return ""

    runtime = FakeRuntime([tool_calls_of("evict", "drain")])
    [json_call, text_call] = Agent(tools=[evict, drain], runtime=runtime).run("go").pending_tool_calls

    assert (json_call.preview_kind, json.loads(json_call.preview or "")) == (
        "json",
        {"pod": "web-1", "owner": "ReplicaSet/web"},
    )
    assert (text_call.preview_kind, text_call.preview) == ("text", "would evict web-1")


def tool_calls_of(*names: str):
    from dcaf_like.testing import tool_calls

    return tool_calls(*(tool_call(name, name="web-1") for name in names))


def test_a_tool_that_needs_no_approval_takes_no_preview():
    with pytest.raises(ValueError, match="preview"):

        @tool(requires_approval=False, preview=lambda: "")
        def read() -> str:
            return ""


def test_a_call_whose_preview_changed_before_it_ran_is_not_run_and_waits_for_a_new_approval():
    """docs/approvals.md, "What the approver sees": the stale-plan check (``recheck=True``)."""

    agent, first, seen, again = approved_then_stale()

    assert RAN == []
    [waiting] = again.pending_tool_calls
    assert waiting.id == seen.id
    assert "-replicas: 3\n+replicas: 5" in (waiting.preview or "")
    for stale in (seen.preview_digest, None):  # the old preview, or none echoed: refused alike
        with pytest.raises(PreviewChanged):
            agent.decide(first.conversation_id, [ToolDecision(seen.id, True, preview_digest=stale)])
    done = agent.decide(
        first.conversation_id, [ToolDecision(seen.id, True, preview_digest=waiting.preview_digest)]
    )
    assert [c.status for c in done.executed_tool_calls] == ["executed"]
    assert RAN == [("api", 5)]


def test_an_edit_re_runs_the_preview_and_the_edited_call_waits_for_an_approval_of_it():
    """docs/approvals.md, "What the approver sees": an edit re-runs the preview."""

    @tool(preview=scale_preview, editable=True)
    def resize(deployment: str, replicas: int) -> str:
        """Scale a deployment."""
        RAN.append((deployment, replicas))
        return "scaled"

    runtime = FakeRuntime([tool_call("resize", deployment="api", replicas=5), reply("Scaled.")])
    agent = Agent(tools=[resize], runtime=runtime)
    first = agent.run("scale api to 5")
    [seen] = first.pending_tool_calls

    edited = agent.approve(first.conversation_id, seen.id, edited_arguments={"replicas": 3})

    assert RAN == []
    [waiting] = edited.pending_tool_calls
    assert waiting.input == {"deployment": "api", "replicas": 3}
    assert "-replicas: 2\n+replicas: 3" in (waiting.preview or "")
    done = agent.decide(
        first.conversation_id, [ToolDecision(seen.id, True, preview_digest=waiting.preview_digest)]
    )
    assert [c.status for c in done.executed_tool_calls] == ["executed"]
    assert RAN == [("api", 3)]


def test_recheck_with_background_is_refused_when_the_tool_is_declared():
    """docs/approvals.md, "What the approver sees": recheck=True with background=True is refused."""

    def plan(path: str) -> str:
        return f"would write {path}"

    with pytest.raises(ValueError, match="recheck=True cannot be combined with background=True"):

        @tool(preview=plan, recheck=True, background=True)
        def write(path: str) -> str:
            return path


def test_a_secret_argument_is_masked_in_a_preview_and_its_error_and_in_a_tools_error() -> None:
    """docs/approvals.md, "Secret arguments": the values of secret arguments never reach a preview's
    text or error, nor the error of a failing run, as stored, shown or read by the model."""
    from dcaf_like import ToolResult
    from dcaf_like.testing import tool_calls

    secret_value = "hunter2-SECRET-value"

    def preview_rotate(user: str, new_password: str) -> str:
        raise ValueError(f"cannot diff: password {new_password} rejected by the directory")

    def preview_echo(user: str, new_password: str) -> str:
        return f"{user}: password {new_password} -> (new)"

    @tool(secret=["new_password"], preview=preview_rotate)
    def rotate(user: str, new_password: str) -> str:
        """Set a password."""
        return "ok"

    @tool(secret=["new_password"], preview=preview_echo)
    def reset(user: str, new_password: str) -> str:
        """Reset a password."""
        raise RuntimeError(f"the directory refused {new_password}")

    model = FakeRuntime(
        [
            tool_calls(
                tool_call("rotate", user="bob", new_password=secret_value),
                tool_call("reset", user="eve", new_password=secret_value),
            ),
            reply("done"),
        ]
    )
    agent = Agent(tools=[rotate, reset], runtime=model)
    asked = agent.run("rotate bob, reset eve")
    failed, echoed = asked.pending_tool_calls
    assert failed.preview_error is not None
    assert "rejected by the directory" in failed.preview_error
    assert echoed.preview is not None
    assert "-> (new)" in echoed.preview
    answered = agent.decide(
        asked.conversation_id, [ToolDecision(echoed.id, True), ToolDecision(failed.id, False)]
    )
    stored = agent.repository.get(asked.conversation_id)
    written = [(c.error, c.result, c.preview, c.preview_error) for c in stored.tool_calls.values()]
    assert "the directory refused" in repr(written)
    read_by_the_model = [m for m in model.requests[-1].messages if isinstance(m, ToolResult)]
    assert len(read_by_the_model) == 2
    assert secret_value not in repr([asked, answered, written, read_by_the_model])


def test_a_synchronous_approver_is_shown_the_preview_and_the_risk_and_its_approval_binds_to_them():
    """docs/approvals.md, "How decisions arrive": the approver callback is shown what the page shows,
    and approves that preview."""
    shown: list[Any] = []

    def approver(pending: Any) -> bool:
        shown.append(pending)
        return True

    runtime = FakeRuntime([tool_call("scale", deployment="api", replicas=5), reply("Scaled.")])
    agent = Agent(tools=[scale], runtime=runtime, approver=approver)

    ran = agent.run("scale api to 5")

    [pending] = shown
    assert (pending.risk, pending.preview_kind) == ("reversible", "diff")
    assert "-replicas: 2\n+replicas: 5" in (pending.preview or "")
    stored = agent.repository.get(ran.conversation_id)
    [call] = stored.tool_calls.values()
    assert pending.preview_digest == call.preview_digest
    assert ran.text == "Scaled."
    assert RAN == [("api", 5)]


def test_a_policy_rule_on_a_risk_holds_a_call_of_a_tool_that_declares_it():
    """docs/approvals.md, "What the approver sees": ``require_approval(..., risks=["irreversible"])``
    makes a call of a tool declaring that risk wait, though the tool itself asks no approval."""
    from dcaf_like import ApprovalPolicy, require_approval

    gone: list[str] = []

    @tool(requires_approval=False, risk="irreversible")
    def drop_volume(name: str) -> str:
        """Drop a volume."""
        gone.append(name)
        return f"dropped {name}"

    policy = ApprovalPolicy([require_approval("irreversible: a human decides", risks=["irreversible"])])
    runtime = FakeRuntime([tool_call("drop_volume", name="data-1"), reply("Dropped.")])
    agent = Agent(tools=[drop_volume], runtime=runtime, approval_policy=policy)

    asked = agent.run("drop data-1")

    [call] = asked.pending_tool_calls
    assert (call.approval_reason, call.risk) == ("irreversible: a human decides", "irreversible")
    assert gone == []
    assert agent.approve(asked.conversation_id, call.id).text == "Dropped."
    assert gone == ["data-1"]
