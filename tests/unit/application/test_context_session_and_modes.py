"""Session and platform context injection, dynamic instructions, pause-on-every-call, synchronous
approvers, stateless runs and custom agent functions."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from pydantic import BaseModel, Field

from dcaf_like import (
    Agent,
    AgentContext,
    AgentResult,
    ApprovalAnswer,
    FunctionAgent,
    PendingApproval,
    PlatformContext,
    RunContext,
    RuntimeNotConfigured,
    Session,
    tool,
)
from dcaf_like.helpdesk.protocol import assistant_message
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


class Cart(BaseModel):
    items: list[str] = Field(default_factory=list)


@tool(requires_approval=False)
def add_to_cart(item: str, session: Session) -> str:
    """Add an item to the cart."""
    cart = session.get("cart", as_type=Cart) or Cart()
    cart.items.append(item)
    session.set("cart", cart)
    return f"{len(cart.items)} items"


def test_a_tool_keeps_typed_state_in_the_session_across_turns():
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("add_to_cart", item="disk")),
            reply("added"),
            tool_calls(tool_call("add_to_cart", item="cpu")),
            reply("added"),
        ]
    )
    agent = Agent(tools=[add_to_cart], runtime=runtime)

    first = agent.run("add a disk")
    second = agent.run("add a cpu", conversation_id=first.conversation_id)

    assert first.session == {"cart": {"items": ["disk"]}}
    assert second.session == {"cart": {"items": ["disk", "cpu"]}}
    assert assistant_message(second)["data"]["session"] == {"cart": {"items": ["disk", "cpu"]}}
    assert "session" not in add_to_cart.input_schema["properties"]


def test_a_session_sent_by_the_client_replaces_the_stored_one():
    runtime = FakeRuntime([tool_calls(tool_call("add_to_cart", item="ram")), reply("ok")])
    agent = Agent(tools=[add_to_cart], runtime=runtime)

    response = agent.run(
        [{"role": "user", "content": "add ram", "data": {"session": {"cart": {"items": ["gpu"]}}}}]
    )

    assert response.session == {"cart": {"items": ["gpu", "ram"]}}


def test_tools_receive_the_platform_context_but_its_credentials_are_never_stored_or_shown():
    seen = []

    @tool(requires_approval=False)
    def whoami(platform_context: PlatformContext) -> str:
        """Say which tenant this is."""
        seen.append(platform_context["duplo_token"])
        return platform_context["tenant_name"]

    agent = Agent(tools=[whoami], runtime=FakeRuntime([tool_calls("whoami"), reply("prod")]))
    context = {
        "tenant_name": "prod",
        "duplo_token": "s3cr3t-token",
        "aws_credentials": {"secret_access_key": "AKIA/x"},
    }

    response = agent.run("who am i?", platform_context=context)

    assert seen == ["s3cr3t-token"]
    assert response.executed_tool_calls[0].output == "prod"
    stored = agent.conversation(response.conversation_id)
    assert stored.platform_context == PlatformContext({"tenant_name": "prod"})
    assert "s3cr3t" not in repr(PlatformContext(context))
    assert "AKIA" not in repr(PlatformContext(context))
    assert "s3cr3t" not in str(assistant_message(response))
    assert "platform_context" not in whoami.input_schema["properties"]


async def test_instructions_can_be_computed_per_run_by_a_sync_or_async_function():
    def sync_instructions(context: RunContext) -> str:
        return f"Tenant {context.platform_context['tenant_name']}, agent {context.agent_name}."

    async def async_instructions(context: RunContext) -> str:
        return f"Conversation {context.conversation_id}."

    sync_runtime = FakeRuntime([reply("ok")])
    Agent(system=sync_instructions, name="ops", runtime=sync_runtime).run(
        "hi", platform_context={"tenant_name": "acme"}
    )
    async_runtime = FakeRuntime([reply("ok")])
    response = await Agent(system=async_instructions, runtime=async_runtime).arun("hi")

    assert sync_runtime.requests[0].system == "Tenant acme, agent ops."
    assert async_runtime.requests[0].system == f"Conversation {response.conversation_id}."


def test_pause_on_tool_calls_suspends_even_on_tools_that_run_without_approval(cluster):
    agent = Agent(
        tools=cluster.tools(),
        runtime=FakeRuntime([tool_calls("list_pods"), reply("listed")]),
        pause_on_tool_calls=True,
    )

    first = agent.run("list pods")

    assert [c.name for c in first.pending_tool_calls] == ["list_pods"]
    assert first.pending_tool_calls[0].approval_reason == "this agent pauses on every tool call"
    second = agent.approve(first.conversation_id, first.pending_tool_calls[0].id)
    assert second.text == "listed"


def test_a_synchronous_approver_is_asked_instead_of_suspending(cluster):
    asked: list[PendingApproval] = []

    def approver(pending: PendingApproval) -> ApprovalAnswer:
        asked.append(pending)
        if pending.arguments["name"] == "web-1":
            return ApprovalAnswer(approved=True)
        return ApprovalAnswer(approved=False, reason="not that one")

    runtime = FakeRuntime(
        [
            tool_calls(tool_call("delete_pod", name="web-1"), tool_call("delete_pod", name="web-2")),
            reply("Done."),
        ]
    )
    agent = Agent(tools=cluster.tools(), runtime=runtime, approver=approver)

    response = agent.run("delete both")

    assert [p.arguments["name"] for p in asked] == ["web-1", "web-2"]
    assert (asked[0].description, asked[0].approval_reason) == (
        "Delete a pod.",
        "delete_pod requires approval",
    )
    assert cluster.deleted == [("default", "web-1")]
    assert response.rejected_tool_calls[0].rejection_reason == "not that one"
    assert response.text == "Done."


def test_a_blocking_run_waits_for_an_async_approver_and_async_instructions(cluster):
    async def approver(pending: PendingApproval) -> ApprovalAnswer:
        await asyncio.sleep(0)  # really waits on an event loop
        return ApprovalAnswer(approved=pending.arguments["name"] == "web-1", reason="not that one")

    async def instructions(context: object) -> str:
        await asyncio.sleep(0)
        return "You operate Kubernetes."

    runtime = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-1")), reply("Done.")])
    agent = Agent(tools=cluster.tools(), system=instructions, runtime=runtime, approver=approver)

    response = agent.run("delete web-1")

    assert cluster.deleted == [("default", "web-1")]
    assert runtime.requests[0].system == "You operate Kubernetes."
    assert response.text == "Done."


def test_a_stateless_run_sees_no_earlier_history_and_keeps_nothing():
    runtime = FakeRuntime([reply("one"), reply("two")])
    agent = Agent(runtime=runtime)

    agent.run_stateless("first")
    agent.run_stateless("second")

    assert [len(r.messages) for r in runtime.requests] == [1, 1]
    assert agent.repository.list_ids() == []


def test_get_or_create_returns_the_same_conversation_for_the_same_id():
    agent = Agent(runtime=FakeRuntime())

    created = agent.get_or_create_conversation("thread-7")
    again = agent.get_or_create_conversation("thread-7")

    assert created.id == again.id == "thread-7"
    assert agent.repository.list_ids() == ["thread-7"]


def test_an_agent_without_a_runtime_says_how_to_get_one():
    with pytest.raises(RuntimeNotConfigured, match="runtime=") as info:
        Agent(tools=[add_to_cart])

    assert "FakeRuntime" in str(info.value)


def test_a_runtime_name_nobody_provides_is_a_clear_error():
    with pytest.raises(RuntimeNotConfigured, match="no runtime provider named 'nosuch'"):
        Agent(runtime="nosuch:model-x")


def test_a_custom_agent_function_gets_messages_and_context_and_returns_a_result():
    seen = {}

    def triage(messages: list[dict], context: AgentContext) -> AgentResult:
        seen["messages"] = messages
        seen["tenant"] = context.platform_context["tenant_name"]
        context.session.set("visits", context.session.get("visits", 0) + 1)
        return AgentResult(text=f"You said: {messages[-1]['content']}")

    agent = FunctionAgent(triage)
    response = agent.run("hello", platform_context={"tenant_name": "acme"}, session={"visits": 2})

    assert response.text == "You said: hello"
    assert response.session == {"visits": 3}
    assert seen["tenant"] == "acme"
    assert seen["messages"][-1]["role"] == "user"
    assert agent.name == "triage"


def test_a_custom_functions_context_is_the_seeds_dict_its_own_to_change():
    seen: dict[str, Any] = {}

    def triage(messages: list[dict], context: dict) -> AgentResult:
        seen["is a dict"] = isinstance(context, dict)
        seen["json"] = json.loads(json.dumps(context))
        context.setdefault("k8s_namespace", "default")
        context["tenant_name"] = "somewhere else"
        seen["changed"] = dict(context)
        seen["kept"] = dict(context.platform_context)  # type: ignore[attr-defined]
        return AgentResult(text="ok")

    FunctionAgent(triage).run("hi", platform_context={"tenant_name": "acme", "duplo_token": "t0ken"})

    assert seen["is a dict"]
    assert seen["json"]["tenant_name"] == "acme"
    assert seen["json"]["platform_context"] == {"tenant_name": "acme", "duplo_token": "t0ken"}
    assert set(seen["json"]) == {"tenant_name", "duplo_token", "conversation_id", "platform_context", "user"}
    assert (seen["changed"]["tenant_name"], seen["changed"]["k8s_namespace"]) == ("somewhere else", "default")
    assert seen["kept"] == {"tenant_name": "acme", "duplo_token": "t0ken"}, "the server's view is unchanged"


def test_a_custom_functions_context_keeps_its_attributes_and_never_shows_a_credential():
    contexts: list[AgentContext] = []

    def triage(messages: list[dict], context: AgentContext) -> str:
        contexts.append(context)
        return "ok"

    FunctionAgent(triage).run("hi", platform_context={"tenant_name": "acme", "duplo_token": "t0ken"})

    [context] = contexts
    with pytest.raises(AttributeError, match="read-only"):
        context.conversation_id = "conv_other"  # type: ignore[misc]
    assert "t0ken" not in repr(context)
    assert "acme" in repr(context)


async def test_a_custom_function_can_delegate_to_an_agent_and_pass_its_approvals_through(cluster):
    inner = Agent(
        tools=cluster.tools(),
        runtime=FakeRuntime([tool_calls(tool_call("delete_pod", name="web-1")), reply("Deleted.")]),
    )

    async def ops(messages, context):
        if context.unverified_decisions:  # the inner Agent's gate checks them against its store
            decisions = [d.to_tool_decision() for d in context.unverified_decisions]
            return await inner.adecide(context.conversation_id, decisions)
        return await inner.arun(messages, conversation_id=context.conversation_id)

    agent = FunctionAgent(ops)
    first = await agent.arun("delete web-1")
    [pending] = first.pending_tool_calls
    decision = {"role": "user", "content": "", "data": {"tool_calls": [{"id": pending.id, "execute": True}]}}
    second = await agent.arun([decision], conversation_id=first.conversation_id)

    assert second.text == "Deleted."
    assert cluster.deleted == [("default", "web-1")]


def test_dataclasses_round_trip_through_the_session():
    @dataclasses.dataclass
    class Prefs:
        theme: str = "light"

    session = Session()
    session.set("prefs", Prefs("dark"))

    assert session.get("prefs") == {"theme": "dark"}
    assert session.get("prefs", as_type=Prefs) == Prefs("dark")


# -- the session is saved as JSON: what is not JSON is refused where it enters ------------------------


def test_a_session_value_that_is_not_json_is_refused_with_where_it_is():
    from dcaf_like import Session

    session = Session()
    session.set("pods", {"web-1": ["Running", 3, None, {"ok": True}]})

    with pytest.raises(TypeError, match=r"session value cache\.seen is a set, not JSON"):
        session.set("cache", {"seen": {"web-1"}})
    with pytest.raises(TypeError, match=r"session value by_port has a key that is not text \(8080\)"):
        session.set("by_port", {8080: "web"})
    assert session.to_dict() == {"pods": {"web-1": ["Running", 3, None, {"ok": True}]}}


def test_a_run_with_a_session_that_is_not_json_is_an_invalid_request():
    import datetime

    from dcaf_like import Agent, InvalidRequest
    from dcaf_like.testing import FakeRuntime

    agent = Agent(runtime=FakeRuntime(["never"]))

    with pytest.raises(InvalidRequest) as raised:
        agent.run("hi", session={"since": datetime.datetime(2026, 1, 1)})

    assert raised.value.field == "session"
    assert "since is a datetime, not JSON" in str(raised.value)
    assert agent.runtime.requests == []  # type: ignore[attr-defined]


def test_a_tool_storing_something_that_is_not_json_fails_that_call_and_the_turn_goes_on():
    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime, tool_call

    @tool(requires_approval=False)
    def remember(session: Session) -> str:
        """Remember the pods seen."""
        session.set("seen", {"web-1", "web-2"})
        return "remembered"

    agent = Agent(tools=[remember], runtime=FakeRuntime([tool_call("remember"), "I could not remember."]))

    response = agent.run("remember the pods")

    [failed] = response.executed_tool_calls
    assert "seen is a set, not JSON" in (failed.error or "")
    assert response.text == "I could not remember."
    stored = agent.conversation(response.conversation_id)
    assert stored is not None
    assert "seen" not in stored.session
