"""docs/protocol.md, "A call's outcome": each finished call says how it ended (seed 001's ToolStatus)
and how long its tool ran, on the call's record and the wire; records stored before say it too."""

from __future__ import annotations

import asyncio

from dcaf_like import Agent, ApprovalPolicy, argument_in, deny, tool
from dcaf_like.application.dto import ToolCallView
from dcaf_like.application.hooks import Hook, HookContext, ToolCallInfo, Veto
from dcaf_like.domain import CallOutcome, Conversation, ToolInput
from dcaf_like.helpdesk.protocol import executed_call, rejected_call
from dcaf_like.stores._codec import decode, encode
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


@tool(requires_approval=False)
def check(name: str) -> str:
    """Check a deployment."""
    if name == "broken":
        raise RuntimeError("the API answered 500")
    return f"{name} is healthy"


@tool(requires_approval=False, timeout=0.05)
async def wait_forever() -> str:
    """Wait for something that never comes."""
    await asyncio.Event().wait()
    return "never"


class Freeze(Hook):
    def before_tool(self, context: HookContext, call: ToolCallInfo) -> Veto | None:
        return Veto("change freeze") if call.arguments.get("name") == "frozen" else None


def run(*proposals: object, **options: object) -> list[ToolCallView]:
    runtime = FakeRuntime([tool_calls(*proposals), reply("Done.")])
    agent = Agent(tools=[check, wait_forever], runtime=runtime, **options)  # type: ignore[arg-type]
    response = agent.run("go")
    return [*response.executed_tool_calls, *response.rejected_tool_calls]


def test_a_calls_outcome_success_with_its_execution_time_and_error_when_it_raises():
    ok, broken = run(tool_call("check", name="web"), tool_call("check", name="broken"))

    assert (ok.status, ok.outcome) == ("executed", "success")
    assert ok.execution_time is not None
    assert ok.execution_time >= 0
    assert (broken.status, broken.outcome) == ("failed", "error")
    assert broken.execution_time is not None
    assert executed_call(ok)["outcome"] == "success"
    assert executed_call(broken)["execution_time"] == broken.execution_time


def test_a_calls_outcome_not_found_for_a_tool_the_agent_lacks():
    [unknown] = run(tool_call("drop_database"))

    assert (unknown.status, unknown.outcome, unknown.execution_time) == ("failed", "not_found", None)


def test_a_calls_outcome_unauthorized_for_the_policy_and_for_a_hooks_refusal():
    policy = ApprovalPolicy([deny("protected", when=argument_in("name", "db"), tools=["check"])])
    calls = run(
        tool_call("check", name="db"),
        tool_call("check", name="frozen"),
        approval_policy=policy,
        hooks=[Freeze()],
    )
    by_name = {c.input["name"]: c for c in calls}

    assert (by_name["db"].status, by_name["db"].outcome) == ("rejected", "unauthorized")
    assert rejected_call(by_name["db"])["outcome"] == "unauthorized"
    assert (by_name["frozen"].status, by_name["frozen"].outcome) == ("failed", "unauthorized")


def test_a_calls_outcome_timeout_when_its_time_limit_runs_out():
    [slow] = run(tool_call("wait_forever"))

    assert (slow.status, slow.outcome) == ("failed", "timeout")


def test_a_calls_outcome_of_a_record_stored_before_outcomes_is_told_by_its_status_and_error():
    conversation = Conversation.start("conv_old", at=1.0)
    conversation.add_user_message("go", at=1.0)
    conversation.add_assistant_message("", at=2.0)
    texts = {
        "ran": None,
        "gone": "tool 'x' is no longer available",
        "stopped": "not run: the run was cancelled before it",
        "late": "not run: the turn's time limit of 5 s ran out before it",
        "vetoed": "not run: refused by the hook 'Freeze': change freeze",
        "raised": "the API answered 500",
    }
    for name, error in texts.items():
        call = conversation.request_tool_call(name, ToolInput.of({}), requires_approval=False, at=2.0)
        conversation.approve_tool_call(call.id.value, by="policy", at=2.0)
        if error is None:
            conversation.record_tool_result(call.id.value, "ok", at=3.0)
        else:
            conversation.record_tool_failure(call.id.value, error, at=3.0)
    stored = encode(conversation)
    for call in conversation.tool_calls.values():  # as a writer before outcomes wrote it
        assert call.outcome is not None
    old = stored.replace(',"outcome":"success"', "")
    for kind in CallOutcome:
        old = old.replace(f',"outcome":"{kind.value}"', "")
    assert '"outcome"' not in old

    read = decode(old, "conv_old")

    outcomes = {c.name: ToolCallView.of(c).outcome for c in read.tool_calls.values()}
    assert outcomes == {
        "ran": "success",
        "gone": "not_found",
        "stopped": "cancelled",
        "late": "timeout",
        "vetoed": "unauthorized",
        "raised": "error",
    }
    assert encode(read) == old  # written back as it was
