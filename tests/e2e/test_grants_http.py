"""docs/approvals.md, "Grants", over HTTP with API keys: bob (``approve``) grants alice's restarts in
namespace dev for ten minutes. A matching call alice's message proposes runs at once, shown as
approved by the grant in ``data``, audited; past the grant's end by the agent's clock, after it is
revoked, for another namespace, another requester, a call the policy denies or an irreversible one,
the call waits for a person (or is denied). Grants need ``approve``; what is wrong is named."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from _helpdesk import user

from dcaf_like import Agent, ApprovalPolicy, InMemoryConversationRepository, argument_in, deny, tool
from dcaf_like.application.messages import ModelRequest, ModelResponse, UserTurn
from dcaf_like.testing import FakeRuntime, ManualClock, reply, tool_call, tool_calls

ALICE = "alice-key-0123456789abcdef0"
BOB = "bob-key-0123456789abcdef0000"
CAROL = "carol-key-0123456789abcdef0"  # chat only
OPS = "ops-key-0123456789abcdef0000"
DAVE = "dave-key-0123456789abcdef00"  # approves, not an admin
KEYS = {
    ALICE: "alice:chat+read",
    BOB: "bob:chat+approve+admin",
    CAROL: "carol:chat",
    DAVE: "dave:chat+approve",
    OPS: "ops:admin",
}
JSON = {"Content-Type": "application/json"}


def key(value: str) -> dict[str, str]:
    return {"X-API-Key": value, **JSON}


def acting(request: ModelRequest) -> ModelResponse:
    """ "restart NAME NAMESPACE" or "delete NAME NAMESPACE": the call; then done."""
    last = request.messages[-1]
    if isinstance(last, UserTurn):
        verb, name, namespace = last.text.split()
        return tool_calls(tool_call(f"{verb}_pod", name=name, namespace=namespace))
    return reply("Done.")


class Cluster:
    def __init__(self) -> None:
        self.done: list[str] = []

        @tool(risk="reversible")
        def restart_pod(name: str, namespace: str) -> str:
            """Restart a pod."""
            self.done.append(f"restart {namespace}/{name}")
            return f"restarted {name}"

        @tool(risk="irreversible")
        def delete_pod(name: str, namespace: str) -> str:
            """Delete a pod."""
            self.done.append(f"delete {namespace}/{name}")
            return f"deleted {name}"

        self.tools = [restart_pod, delete_pod]


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000.0)


@pytest.fixture
def server(start_server: Any, cluster: Cluster, clock: ManualClock) -> httpx.Client:
    frozen = deny("namespace frozen is frozen", when=argument_in("namespace", "frozen"))
    agent = Agent(
        tools=cluster.tools,
        runtime=FakeRuntime([acting] * 40),
        repository=InMemoryConversationRepository(clock=clock),
        approval_policy=ApprovalPolicy([frozen]),
        clock=clock,
    )
    client: httpx.Client = start_server(agent, api_keys=KEYS)
    return client


def grant(server: httpx.Client, who: str = BOB, **changes: Any) -> httpx.Response:
    body = {
        "tool": "restart_pod",
        "requester": "alice",
        "arguments": {"namespace": "dev"},
        "duration": 600,
        **changes,
    }
    return server.post("/api/grants", headers=key(who), json=body)


def ask(server: httpx.Client, text: str, who: str = ALICE) -> dict[str, Any]:
    response = server.post("/api/chat", headers=key(who), json={"messages": [user(text)]})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def test_a_grant_approves_matching_calls_for_its_lifetime_only(server, cluster, clock):
    """docs/approvals.md, "Grants": it runs at once, "approved by grant g_... from bob"; past the
    grant's end by the agent's clock, the next one waits for a person."""
    made = grant(server)
    assert made.status_code == 201, made.text
    g = made.json()
    assert g["id"].startswith("g_")
    assert (g["granted_by"], g["active"], g["expires_at"]) == ("bob", True, clock.now + 600)

    data = ask(server, "restart web-1 dev")
    assert data["tool_calls"] == []
    [ran] = data["executed_tool_calls"]
    assert ran["grant"] == {
        "id": g["id"],
        "granted_by": "bob",
        "approval": f"approved by grant {g['id']} from bob",
    }
    assert cluster.done == ["restart dev/web-1"]
    record = server.get(f"/api/conversations/{data['conversation_id']}", headers=key(ALICE)).json()
    [call] = record["tool_calls"]
    assert (call["decided_by"], call["decided_by_kind"]) == (f"grant {g['id']} from bob", "grant")

    clock.advance(599)
    assert ask(server, "restart web-2 dev")["tool_calls"] == []
    clock.advance(1)
    [waiting] = ask(server, "restart web-3 dev")["tool_calls"]
    assert "grant" not in waiting
    assert cluster.done == ["restart dev/web-1", "restart dev/web-2"]
    assert server.get("/api/grants", headers=key(BOB)).json()["grants"] == []
    [expired] = server.get("/api/grants", headers=key(BOB), params={"all": "true"}).json()["grants"]
    assert expired["active"] is False

    records = server.get("/api/audit", headers=key(OPS)).json()["records"]
    used = [r for r in records if r["decider"] == "grant"]
    assert [r["decided_by"] for r in used] == [f"grant {g['id']} from bob"] * 2
    assert [r["decided_by"] for r in records if r["outcome"] == "granted"] == ["bob"]


def test_a_revoked_grant_approves_nothing(server, cluster):
    """docs/approvals.md, "Grants": revoked at once; the revocation is in the trail."""
    g = grant(server).json()
    revoked = server.delete(f"/api/grants/{g['id']}", headers=key(BOB))
    assert revoked.status_code == 200, revoked.text
    assert (revoked.json()["revoked_by"], revoked.json()["active"]) == ("bob", False)

    [waiting] = ask(server, "restart web-1 dev")["tool_calls"]
    assert waiting["name"] == "restart_pod"
    assert cluster.done == []
    records = server.get("/api/audit", headers=key(OPS)).json()["records"]
    assert [r["reason"].split(":")[0] for r in records if r["outcome"] == "revoked"] == [g["id"]]


def test_a_grant_never_approves_a_denied_or_irreversible_call_nor_anothers_or_elsewhere(server, cluster):
    """docs/approvals.md, "Grants": the policy's denial stands, an irreversible call waits."""
    assert grant(server, arguments={}).status_code == 201  # alice's restarts, any namespace
    assert grant(server, tool="delete_pod", arguments={}).status_code == 201

    frozen = ask(server, "restart web-1 frozen")
    assert [c["name"] for c in frozen["rejected_tool_calls"]] == ["restart_pod"]
    [irreversible] = ask(server, "delete web-1 dev")["tool_calls"]
    assert irreversible["name"] == "delete_pod"
    [not_alice] = ask(server, "restart web-1 dev", who=CAROL)["tool_calls"]
    assert not_alice["name"] == "restart_pod"
    assert cluster.done == []


def test_grants_need_the_approve_scope_and_a_wrong_one_is_named(server):
    """docs/approvals.md, "Grants": 403 without ``approve`` (without ``admin``, for another's calls);
    422 naming the field; 404 for an unknown id."""
    assert grant(server, who=ALICE).status_code == 403
    assert grant(server, who=ALICE).json()["error"]["code"] == "missing_scope"
    assert server.get("/api/grants", headers=key(CAROL)).status_code == 403
    assert server.get("/api/grants").status_code == 401

    others = grant(server, who=DAVE)  # alice's calls: dave is no admin
    assert (others.status_code, others.json()["error"]["code"]) == (403, "missing_scope")
    assert "admin" in others.json()["error"]["message"]
    assert grant(server, who=DAVE, requester="dave").status_code == 201  # his own

    too_long = grant(server, duration=7 * 24 * 3600)
    assert too_long.status_code == 422
    assert (too_long.json()["error"]["code"], too_long.json()["error"]["field"]) == (
        "invalid_grant",
        "duration",
    )
    nested = grant(server, arguments={"namespace": {"a": 1}})
    assert nested.status_code == 422
    assert "arguments" in nested.json()["error"]["field"]
    no_requester = server.post("/api/grants", headers=key(BOB), json={"tool": "restart_pod", "duration": 60})
    assert no_requester.status_code == 422
    assert no_requester.json()["error"]["field"].endswith("requester")

    unknown = server.delete("/api/grants/g_0000", headers=key(BOB))
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "grant_not_found")
    assert server.delete("/api/grants/g_0000", headers=key(ALICE)).status_code == 403
