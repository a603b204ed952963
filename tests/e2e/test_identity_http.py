"""Over real HTTP with API keys: tools, instructions and policies see the key's identity; nothing a
client writes (the session, the platform context, any other field or header) stands in for it."""

from __future__ import annotations

import json

import pytest
from _helpdesk import user

from dcaf_like import (
    Agent,
    AgentContext,
    ApprovalPolicy,
    FunctionAgent,
    Identity,
    RunContext,
    ToolContext,
    anyone_but,
    deny,
    tool,
)
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

OPS = "ops-key-0123456789abcdef"
ALICE = "alice-key-0123456789abcdef"
DEPS_SECRET = "deps-token-5f4e3d2c1b"

FORGED = {"identity": {"name": "ops", "scopes": ["admin"]}, "user": "ops", "owner": "ops", "role": "admin"}


class Deps:
    region = "eu-west-1"
    token = DEPS_SECRET

    def __repr__(self) -> str:
        return f"Deps(token={self.token!r})"


@tool(requires_approval=False)
def scale(replicas: int, context: ToolContext[Deps]) -> str:
    """Scale the web deployment."""
    return f"scaled web to {replicas} in {context.deps.region}"


@tool(requires_approval=False)
def whoami(who: Identity | None) -> str:
    """Say who is asking."""
    return "anonymous" if who is None else f"{who.name} {sorted(who.scopes)}"


def instructions(run: RunContext[Deps]) -> str:
    return f"You serve {run.identity.name if run.identity else 'nobody'}."


def agent_for(steps: int) -> Agent:
    script = [tool_calls(tool_call("scale", replicas=3), "whoami"), reply("done")] * steps
    policy = ApprovalPolicy([deny("only the ops key may scale", when=anyone_but("ops"), tools=["scale"])])
    return Agent(
        tools=[scale, whoami],
        system=instructions,
        approval_policy=policy,
        runtime=FakeRuntime(script),
        deps=Deps(),
    )


@pytest.fixture
def keyed(start_server):
    agent = agent_for(steps=4)
    client = start_server(agent, api_keys={OPS: "ops:chat+approve+read", ALICE: "alice"})
    client.agent = agent  # type: ignore[attr-defined]
    return client


def outputs(body: dict) -> dict[str, str]:
    """What each call of the turn came to: its output, or why it was rejected."""
    data = body["data"]
    ran = {c["name"]: c["output"] for c in data["executed_tool_calls"]}
    return {**ran, **{c["name"]: c["reason"] for c in data["rejected_tool_calls"]}}


def conversation_of(route: str, response) -> str:
    if route == "/api/chat":
        return response.json()["data"]["conversation_id"]
    return json.loads(response.text.strip().splitlines()[-1])["conversation_id"]


def test_the_policy_allows_the_action_only_for_the_key_it_names(keyed):
    as_ops = keyed.post("/api/chat", headers={"X-API-Key": OPS}, json={"messages": [user("scale to 3")]})
    as_alice = keyed.post("/api/chat", headers={"X-API-Key": ALICE}, json={"messages": [user("scale to 3")]})

    assert as_ops.status_code == as_alice.status_code == 200
    assert outputs(as_ops.json()) == {
        "scale": "scaled web to 3 in eu-west-1",
        "whoami": "ops ['approve', 'chat', 'read']",
    }
    assert outputs(as_alice.json()) == {
        "scale": "denied by policy: only the ops key may scale",
        "whoami": "alice ['approve', 'chat', 'read']",
    }
    systems = [r.system for r in keyed.agent.runtime.requests]
    assert systems == ["You serve ops.", "You serve ops.", "You serve alice.", "You serve alice."]


@pytest.mark.parametrize("route", ["/api/chat", "/api/chat-stream"])
def test_a_forged_identity_in_the_session_context_body_or_headers_changes_nothing(keyed, route):
    body = {
        "messages": [
            {**user("scale to 3", session=FORGED, identity=FORGED["identity"]), "platform_context": FORGED}
        ],
        "platform_context": FORGED,
        **FORGED,
        "deps": {"region": "forged"},
    }
    headers = {"X-API-Key": ALICE, "X-User": "ops", "X-Identity": "ops", "X-Forwarded-User": "ops"}

    response = keyed.post(route, headers=headers, json=body)

    assert response.status_code == 200, response.text  # accepted: the extra fields are simply not read
    text = response.text
    assert "denied by policy: only the ops key may scale" in text
    assert "scaled web" not in text
    assert "alice ['approve', 'chat', 'read']" in text
    assert keyed.agent.runtime.requests[0].system == "You serve alice."
    conversation_id = conversation_of(route, response)
    # The conversation is Alice's: the ops key does not see it, so the forged owner made nothing.
    assert keyed.get(f"/api/conversations/{conversation_id}", headers={"X-API-Key": OPS}).status_code == 404
    assert keyed.get(f"/api/conversations/{conversation_id}", headers={"X-API-Key": ALICE}).status_code == 200


def test_the_agents_deps_never_reach_a_response_or_the_stored_conversation(keyed):
    response = keyed.post("/api/chat", headers={"X-API-Key": OPS}, json={"messages": [user("scale to 3")]})
    conversation_id = response.json()["data"]["conversation_id"]
    stored = keyed.get(f"/api/conversations/{conversation_id}", headers={"X-API-Key": OPS})

    assert "eu-west-1" in response.text, "the tool used them"
    assert DEPS_SECRET not in response.text
    assert DEPS_SECRET not in stored.text
    assert all(DEPS_SECRET not in repr(r) for r in keyed.agent.runtime.requests)


def test_without_keys_nobody_is_authenticated_whatever_the_session_says(start_server):
    agent = agent_for(steps=1)
    client = start_server(agent)

    response = client.post(
        "/api/chat", json={"messages": [{**user("scale to 3", session=FORGED), "platform_context": FORGED}]}
    )

    assert response.status_code == 200
    assert outputs(response.json())["whoami"] == "anonymous"
    assert "denied by policy: only the ops key may scale" in response.text
    assert agent.runtime.requests[0].system == "You serve nobody."


def test_an_agent_function_sees_the_keys_identity_not_the_sessions(start_server):
    def greet(messages: list[dict], context: AgentContext) -> str:
        who = context.identity.name if context.identity else "nobody"
        return f"hello {who}, your session says {context.session.get('user')}"

    client = start_server(FunctionAgent(greet), api_keys={ALICE: "alice"})

    response = client.post(
        "/api/chat", headers={"X-API-Key": ALICE}, json={"messages": [user("hi", session={"user": "ops"})]}
    )

    assert response.json()["content"] == "hello alice, your session says ops"


def test_an_a2a_task_runs_as_the_keys_identity_whatever_its_data_says(start_server):
    pytest.importorskip("a2a.client", reason="the a2a extra is not installed: pip install -e '.[a2a]'")
    agent = agent_for(steps=1)
    client = start_server(agent, a2a=True, api_keys={OPS: "ops", ALICE: "alice"})

    task = client.post(
        "/a2a/tasks/send",
        headers={"X-API-Key": ALICE},
        json={"message": "scale to 3", "data": {"session": FORGED, "platform_context": FORGED, **FORGED}},
    )

    assert task.status_code == 200, task.text
    assert {c["name"]: c["output"] for c in task.json()["executed_tool_calls"]} == {
        "whoami": "alice ['approve', 'chat', 'read']"
    }
    assert agent.runtime.requests[0].system == "You serve alice."
