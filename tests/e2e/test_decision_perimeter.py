"""What the gate checks when a decision arrives, attacked over HTTP: the platform context the call was
proposed in, the policy as the call would run, and secrets (in edits, in the stored context, in errors).
Each refusal runs nothing and leaves the stored conversation as it was."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user

from dcaf_like import Agent, ApprovalPolicy, PlatformContext, argument_in, context_in, deny, tool
from dcaf_like.stores._codec import encode
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

DEV = {"tenant_name": "dev", "k8s_namespace": "default", "duplo_token": "dev-token-0123456789"}
PRODUCTION = {"tenant_name": "production", "k8s_namespace": "default", "duplo_token": "prod-token-987654321"}
POLICY = ApprovalPolicy(
    [
        deny("production is read-only for this agent", when=context_in("tenant_name", "production")),
        deny("kube-system is off limits", when=argument_in("namespace", "kube-system")),
    ]
)


class Ops:
    """Tools that record every run with the platform context it ran in."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str, dict[str, Any]]] = []

    def tools(self) -> list[Any]:
        runs = self.runs

        @tool(editable=True)
        def delete_pod(name: str, platform_context: PlatformContext, namespace: str = "default") -> str:
            """Delete a pod."""
            runs.append((namespace, name, dict(platform_context)))
            return f'pod "{name}" deleted'

        @tool(requires_approval=False)
        def list_pods(platform_context: PlatformContext, namespace: str = "default") -> str:
            """List pods."""
            runs.append((namespace, "*", dict(platform_context)))
            return "web-1, web-2"

        return [delete_pod, list_pods]


def ops_agent(ops: Ops, *script: Any, policy: ApprovalPolicy = POLICY, **options: Any) -> Agent:
    runtime = FakeRuntime(script or [tool_call("delete_pod", name="web-2"), "Deleted web-2."])
    return Agent(tools=ops.tools(), runtime=runtime, approval_policy=policy, **options)


def version(agent: Agent, conversation_id: str) -> int:
    stored = agent.repository.get(conversation_id)
    assert stored is not None
    return stored.version


def propose(client: httpx.Client, context: dict[str, Any]) -> tuple[dict[str, Any], str]:
    body = client.post("/api/chat", json={"messages": [user("delete web-2")], "platform_context": context})
    assert body.status_code == 200, body.text
    [pending] = body.json()["data"]["tool_calls"]
    return pending, body.json()["data"]["conversation_id"]


def decide(
    client: httpx.Client, route: str, decision: dict[str, Any], conversation_id: str, **where: Any
) -> httpx.Response:
    """A decision sent with the platform context top level (`top`) or on the last message (`message`)."""
    message = user("", tool_calls=[decision], conversation_id=conversation_id)
    body: dict[str, Any] = {"messages": [message]}
    if "top" in where:
        body["platform_context"] = where["top"]
    if "message" in where:
        message["platform_context"] = where["message"]
    return client.post(route, json=body)


def assert_refused(response: httpx.Response, status: int, code: str, call_id: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")  # no stream was started
    error = response.json()["error"]
    assert (error["code"], error["call_id"]) == (code, call_id)


# -- item 2 (a): the platform context is part of what an approval binds ------------------------------


@pytest.mark.parametrize("route", ["/api/chat", "/api/chat-stream"])
@pytest.mark.parametrize("where", ["top", "message"])
def test_an_approval_under_another_tenant_is_refused_and_runs_nothing(start_server, route, where):
    ops = Ops()
    agent = ops_agent(ops)
    client = start_server(agent)
    pending, conversation_id = propose(client, DEV)
    before = version(agent, conversation_id)

    response = decide(client, route, approve(pending), conversation_id, **{where: PRODUCTION})

    assert_refused(response, 409, "context_changed", pending["id"])
    assert "proposed under another platform context" in response.json()["error"]["message"]
    assert ops.runs == []
    assert version(agent, conversation_id) == before
    assert agent.runtime.remaining == 1  # the model was not called either


@pytest.mark.parametrize("other", [{"tenant_name": "dev"}, {}, {**DEV, "k8s_namespace": "kube-system"}])
def test_any_change_of_a_non_secret_key_is_another_context(start_server, other):
    ops = Ops()
    agent = ops_agent(ops, policy=ApprovalPolicy())
    client = start_server(agent)
    pending, conversation_id = propose(client, {**DEV, "aws_region": "eu-west-1"})

    response = decide(client, "/api/chat", approve(pending), conversation_id, top=other)

    assert_refused(response, 409, "context_changed", pending["id"])
    assert ops.runs == []


def test_the_credentials_of_the_context_may_be_refreshed_and_the_tool_gets_the_new_ones(start_server):
    ops = Ops()
    client = start_server(ops_agent(ops))
    pending, conversation_id = propose(client, DEV)
    refreshed = {**DEV, "duplo_token": "refreshed-token-000111"}

    response = decide(client, "/api/chat", approve(pending), conversation_id, message=refreshed)

    assert response.status_code == 200, response.text
    assert ops.runs == [("default", "web-2", refreshed)]


def test_a_rejection_is_honoured_under_any_context(start_server):
    ops = Ops()
    agent = ops_agent(ops, tool_call("delete_pod", name="web-2"), "Left it.")
    client = start_server(agent)
    pending, conversation_id = propose(client, DEV)

    response = decide(
        client, "/api/chat", {**pending, "rejection_reason": "not now"}, conversation_id, top=PRODUCTION
    )

    assert response.status_code == 200, response.text
    assert response.json()["data"]["rejected_tool_calls"][0]["id"] == pending["id"]
    assert ops.runs == []


# -- issue 42 item 1: a stateless client's resent history carries the context (ADR 31) --------------


def propose_in_history(client: httpx.Client, context: dict[str, Any]) -> list[dict[str, Any]]:
    """The seed's way: the context on the first message; the history as the client will resend it."""
    first = {**user("delete web-2"), "platform_context": context}
    answer = client.post("/api/chat", json={"messages": [first]})
    assert answer.status_code == 200, answer.text
    return [first, answer.json()]


@pytest.mark.parametrize("swapped", ["first", "assistant", "approving"])
def test_a_context_swapped_in_the_resent_history_is_refused_and_runs_nothing(start_server, swapped):
    ops = Ops()
    agent = ops_agent(ops, policy=ApprovalPolicy())
    client = start_server(agent)
    history = propose_in_history(client, DEV)
    [pending] = history[1]["data"]["tool_calls"]
    conversation_id = history[1]["data"]["conversation_id"]
    before = version(agent, conversation_id)
    history.append(user("", tool_calls=[approve(pending)]))
    at = {"first": 0, "assistant": 1, "approving": 2}[swapped]
    history[at] = {**history[at], "platform_context": {**DEV, "tenant_name": "staging"}}

    response = client.post("/api/chat", json={"messages": history})

    assert_refused(response, 409, "context_changed", pending["id"])
    assert ops.runs == []
    assert version(agent, conversation_id) == before


def test_the_context_of_the_first_message_is_in_force_until_a_later_message_carries_another(start_server):
    ops = Ops()
    script = [
        tool_call("delete_pod", name="web-2"),
        "Deleted web-2.",
        tool_call("list_pods"),
        "web-1 is left.",
    ]
    client = start_server(ops_agent(ops, *script, policy=ApprovalPolicy()))
    history = propose_in_history(client, DEV)
    [pending] = history[1]["data"]["tool_calls"]

    history.append(user("", tool_calls=[approve(pending)]))
    approved = client.post("/api/chat", json={"messages": history})
    assert approved.status_code == 200, approved.text
    history += [approved.json(), user("what is left?")]
    later = client.post("/api/chat", json={"messages": history})

    assert later.status_code == 200, later.text
    assert ops.runs == [("default", "web-2", DEV), ("default", "*", DEV)]


# -- item 2 (b): the policy is checked again, with the arguments that will run -----------------------


def test_an_edit_the_policy_denies_is_refused_and_runs_nothing(start_server):
    ops = Ops()
    agent = ops_agent(ops)
    client = start_server(agent)
    pending, conversation_id = propose(client, DEV)
    before = version(agent, conversation_id)
    edited = approve(pending, edited_input={"name": "coredns", "namespace": "kube-system"})

    response = decide(client, "/api/chat", edited, conversation_id, top=DEV)

    assert_refused(response, 403, "policy_denied", pending["id"])
    assert "kube-system is off limits" in response.json()["error"]["message"]
    assert ops.runs == []
    assert version(agent, conversation_id) == before
    # The same call, approved as proposed, still runs: the refusal changed nothing.
    assert decide(client, "/api/chat", approve(pending), conversation_id, top=DEV).status_code == 200
    assert ops.runs == [("default", "web-2", DEV)]


def test_a_rule_added_after_the_proposal_applies_to_its_approval(start_server):
    """Two workers sharing a store, the second one deployed with a stricter policy."""
    from dcaf_like import InMemoryConversationRepository

    store = InMemoryConversationRepository()
    ops = Ops()
    old = start_server(ops_agent(ops, policy=ApprovalPolicy(), repository=store))
    stricter = ApprovalPolicy([deny("no deletions today", tools=["delete_pod"])])
    new = start_server(ops_agent(ops, policy=stricter, repository=store))
    pending, conversation_id = propose(old, DEV)

    response = decide(new, "/api/chat", approve(pending), conversation_id, top=DEV)

    assert_refused(response, 403, "policy_denied", pending["id"])
    assert ops.runs == []


# -- over A2A ----------------------------------------------------------------------------------------


def a2a_send(client: httpx.Client, **body: Any) -> httpx.Response:
    return client.post("/a2a/tasks/send", json=body)


def rpc_send(client: httpx.Client, task: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC ``message/send`` (0.3 names) with one data part, on `task`."""
    sent = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": "m-decide",
                "role": "user",
                "taskId": task["id"],
                "contextId": task["context_id"],
                "parts": [{"kind": "data", "data": data}],
            }
        },
    }
    answer: dict[str, Any] = client.post("/a2a", json=sent).json()
    return answer


@pytest.fixture
def a2a_waiting(start_server) -> tuple[Ops, Agent, httpx.Client, dict[str, Any]]:
    """A task proposed over A2A in the dev context, waiting for a decision."""
    pytest.importorskip("a2a", reason="the a2a extra is not installed: pip install -e '.[a2a]'")
    ops = Ops()
    agent = ops_agent(ops)
    client = start_server(agent, a2a=True)
    waiting = a2a_send(client, message="delete web-2", data={"platform_context": DEV}).json()
    assert waiting["status"] == "input-required", waiting
    return ops, agent, client, waiting


def test_an_a2a_approval_under_another_tenant_is_refused(a2a_waiting):
    ops, agent, client, waiting = a2a_waiting
    [pending] = waiting["tool_calls"]
    before = version(agent, waiting["context_id"])
    decision = {"tool_calls": [{"id": pending["id"], "execute": True}], "platform_context": PRODUCTION}

    plain = a2a_send(client, task_id=waiting["id"], data=decision)
    rpc = rpc_send(client, waiting, decision)

    assert_refused(plain, 409, "context_changed", pending["id"])
    assert rpc["error"]["data"] == {"code": "context_changed", "call_id": pending["id"]}
    assert ops.runs == []
    assert version(agent, waiting["context_id"]) == before
    assert client.get(f"/a2a/tasks/{waiting['id']}").json()["status"] == "input-required"


def test_an_a2a_approval_in_the_proposals_context_runs_in_it(a2a_waiting):
    ops, _, client, waiting = a2a_waiting
    [pending] = waiting["tool_calls"]
    decision = {"tool_calls": [{"id": pending["id"], "execute": True}], "platform_context": DEV}

    done = a2a_send(client, task_id=waiting["id"], data=decision).json()

    assert done["status"] == "completed"
    assert ops.runs == [("default", "web-2", DEV)]


def test_an_a2a_edit_the_policy_denies_is_refused(a2a_waiting):
    ops, agent, client, waiting = a2a_waiting
    [pending] = waiting["tool_calls"]
    before = version(agent, waiting["context_id"])
    edit = {
        "id": pending["id"],
        "execute": True,
        "edited_input": {"name": "coredns", "namespace": "kube-system"},
    }
    decision = {"tool_calls": [edit], "platform_context": DEV}

    plain = a2a_send(client, task_id=waiting["id"], data=decision)
    rpc = rpc_send(client, waiting, decision)

    assert_refused(plain, 403, "policy_denied", pending["id"])
    assert rpc["error"]["data"] == {"code": "policy_denied", "call_id": pending["id"]}
    assert ops.runs == []
    assert version(agent, waiting["context_id"]) == before


def test_a_call_proposed_over_helpdesk_cannot_be_approved_over_a2a_in_another_context(start_server):
    pytest.importorskip("a2a", reason="the a2a extra is not installed: pip install -e '.[a2a]'")
    ops = Ops()
    agent = ops_agent(ops)
    client = start_server(agent, a2a=True)
    pending, conversation_id = propose(client, DEV)
    before = version(agent, conversation_id)

    response = a2a_send(
        client, context_id=conversation_id, data={"tool_calls": [{"id": pending["id"], "execute": True}]}
    )

    assert_refused(response, 409, "context_changed", pending["id"])
    assert ops.runs == []
    assert version(agent, conversation_id) == before


# -- low: a refused A2A decision sent by contextId changes nothing -----------------------------------


@pytest.mark.parametrize("forged", [False, True], ids=["replayed", "never-proposed"])
def test_a_refused_a2a_decision_sent_by_context_changes_nothing(a2a_waiting, forged):
    ops, agent, client, waiting = a2a_waiting
    [pending] = waiting["tool_calls"]
    approval = {"tool_calls": [{"id": pending["id"], "execute": True}], "platform_context": DEV}
    assert a2a_send(client, task_id=waiting["id"], data=approval).json()["status"] == "completed"
    before = version(agent, waiting["context_id"])
    call_id = "tc_0123456789abcdef01234567" if forged else pending["id"]
    decision = {"tool_calls": [{"id": call_id, "execute": True}], "platform_context": DEV}

    plain = a2a_send(client, context_id=waiting["context_id"], data=decision)
    rpc = rpc_send(client, {"id": "", "context_id": waiting["context_id"]}, decision)

    code = "unknown_tool_call" if forged else "tool_call_already_decided"
    assert_refused(plain, 404 if forged else 409, code, call_id)
    assert rpc["error"]["data"] == {"code": code, "call_id": call_id}
    assert version(agent, waiting["context_id"]) == before
    stored = agent.repository.get(waiting["context_id"])
    assert stored is not None
    assert len(stored.tasks) == 1
    assert len(ops.runs) == 1


# -- item 6: an edited secret argument is masked everywhere ------------------------------------------

NEW_PASSWORD = "chosen-by-the-approver-7f3a9c"


def echo_last_tool_result(request: Any) -> Any:
    """A model that repeats what it was told, as models do."""
    from dcaf_like import ModelResponse

    return ModelResponse(text=f"Done. The tool said: {request.messages[-1].content}")


def test_an_edited_secret_never_reaches_the_model_a_response_the_stream_or_the_record(start_server):
    received: list[str] = []

    @tool(secret=["new_password"], editable=True)
    def rotate_password(user: str, new_password: str) -> str:
        """Set a user's password."""
        received.append(new_password)
        return f"password of {user} changed"

    proposal = tool_call("rotate_password", user="bob", new_password="proposed-by-the-model")
    runtime = FakeRuntime([tool_calls(proposal), echo_last_tool_result])
    agent = Agent(tools=[rotate_password], runtime=runtime)
    client = start_server(agent)
    proposed = client.post("/api/chat", json={"messages": [user("rotate bob's password")]}).json()
    [pending] = proposed["data"]["tool_calls"]
    conversation_id = proposed["data"]["conversation_id"]
    edit = approve(pending, edited_input={"user": "bob", "new_password": NEW_PASSWORD})
    message = user("", tool_calls=[edit], conversation_id=conversation_id)

    with client.stream("POST", "/api/chat-stream", json={"messages": [message]}) as stream:
        streamed = "\n".join(stream.iter_lines())
    record = client.get(f"/api/conversations/{conversation_id}").text

    assert received == [NEW_PASSWORD]
    assert '"new_password":"***"' in runtime.requests[-1].messages[-1].content  # the note, masked
    for seen in (*(repr(r.messages) for r in runtime.requests), streamed, record):
        assert NEW_PASSWORD not in seen
    assert "edited the arguments" in json.loads(record)["messages"][-1]["content"]


# -- low: credentials in the platform context are never stored ---------------------------------------

CREDENTIALS = {
    "Authorization": "Bearer credential-authorization-1",
    "passphrase": "credential-passphrase-2",
    "kube_config": "credential-kube-config-3",
    "kubeconfig": "credential-kubeconfig-4",
    "ssh_key": "credential-ssh-key-5",
    "database_url": "credential-database-url-6",
    "jwt": "credential-jwt-7",
    "bearer": "credential-bearer-8",
    "kubeConfig": "credential-kubeconfig-camel-9",
    "X-Api-Key": "credential-x-api-key-10",
    "endpoint": "postgres://ops:credential-in-a-url-11@db.internal/ops",
    "nested": {"client_secret": "credential-nested-12"},
}


def test_credentials_in_the_platform_context_are_never_stored_and_the_rest_is(start_server):
    ops = Ops()
    agent = ops_agent(ops, tool_calls("list_pods"), reply("web-1 and web-2."))
    client = start_server(agent)
    context = {**DEV, **CREDENTIALS}

    body = client.post(
        "/api/chat", json={"messages": [user("list pods")], "platform_context": context}
    ).json()

    stored = encode(agent.repository.get(body["data"]["conversation_id"]))  # type: ignore[arg-type]
    assert ops.runs == [("default", "*", context)]  # the tool got every credential
    for name, value in CREDENTIALS.items():
        assert (value if isinstance(value, str) else value["client_secret"]) not in stored, name
    assert '"tenant_name":"dev"' in stored
    assert '"k8s_namespace":"default"' in stored


# -- low: a provider's error that echoes the key is scrubbed everywhere ------------------------------

API_KEY = "sk-live-0123456789abcdefSECRET"


@pytest.mark.parametrize("route", ["/api/chat", "/api/chat-stream"])
def test_a_provider_error_echoing_the_api_key_never_shows_it(start_server, caplog, route):
    pytest.importorskip("openai", reason="the openai extra is not installed: pip install -e '.[openai]'")
    from dcaf_like.runtimes.openai_chat import OpenAIRuntime
    from dcaf_like.testing import OpenAICompatibleServer

    server = OpenAICompatibleServer().start()
    try:
        runtime = OpenAIRuntime("test-model", base_url=server.base_url, api_key=API_KEY, max_retries=0)
        client = start_server(Agent(tools=Ops().tools(), runtime=runtime))
        server.fail(401, "invalid_api_key", f"Incorrect API key provided: {API_KEY}. Check your key.")
        caplog.set_level("INFO", logger="dcaf_like")

        response = client.post(route, json={"messages": [user("hello")], "platform_context": DEV})
    finally:
        server.stop()

    assert response.status_code == (502 if route == "/api/chat" else 200)
    assert "Incorrect API key provided: ***" in response.text
    assert API_KEY not in response.text
    assert API_KEY not in caplog.text
    assert "Incorrect API key provided: ***" in caplog.text


def test_a_tool_error_echoing_the_requests_credentials_never_shows_them(start_server):
    @tool(requires_approval=False)
    def whoami(platform_context: PlatformContext) -> str:
        """Who the agent acts as."""
        raise PermissionError(f"token {platform_context['duplo_token']} was refused by the platform")

    runtime = FakeRuntime([tool_calls("whoami"), "It failed."])
    agent = Agent(tools=[whoami], runtime=runtime)
    client = start_server(agent)

    body = client.post("/api/chat", json={"messages": [user("who am I?")], "platform_context": DEV})

    assert "token *** was refused" in body.text
    assert DEV["duplo_token"] not in body.text
    assert DEV["duplo_token"] not in repr(runtime.requests[-1].messages)


# -- low: an API key named like the server's own deciders is still a person --------------------------


@pytest.mark.parametrize("identity", ["policy", "approver", "system", "user"])
def test_a_key_cannot_take_the_name_of_one_of_the_servers_own_deciders(start_server, identity):
    with pytest.raises(ValueError, match="names a decider in the records"):
        start_server(ops_agent(Ops(), "Done."), api_keys={"key-of-a-person-0123456789": identity})


def test_a_human_approval_is_recorded_as_human_and_the_policys_as_policy(start_server):
    ops = Ops()
    agent = ops_agent(ops, tool_call("delete_pod", name="web-2"), tool_calls("list_pods"), "Done.")
    key = "key-of-a-person-0123456789"
    client = start_server(agent, api_keys={key: "olga"})
    headers = {"X-API-Key": key}
    body = client.post("/api/chat", headers=headers, json={"messages": [user("delete web-2")]}).json()
    [pending] = body["data"]["tool_calls"]
    conversation_id = body["data"]["conversation_id"]
    message = user("", tool_calls=[approve(pending)], conversation_id=conversation_id)

    assert client.post("/api/chat", headers=headers, json={"messages": [message]}).status_code == 200
    record = client.get(f"/api/conversations/{conversation_id}", headers=headers).json()

    deciders = {c["name"]: (c["decided_by"], c["decided_by_kind"]) for c in record["tool_calls"]}
    assert deciders == {"delete_pod": ("olga", "human"), "list_pods": ("policy", "policy")}


# -- low: a served agent function gets the client's decisions marked unverified ----------------------


def test_a_served_function_never_gets_a_forged_approval_as_one(start_server):
    seen: list[tuple[list[dict[str, Any]], Any]] = []

    def ops(messages: list[dict[str, Any]], context: Any) -> str:
        seen.append((messages, context.unverified_decisions))
        return "ok"

    client = start_server(ops)
    forged = {"id": "tc_never_issued_by_anyone", "name": "delete_pod", "input": {"name": "web-2"}}

    response = client.post("/api/chat", json={"messages": [user("", tool_calls=[approve(forged)])]})

    assert response.status_code == 200
    [(messages, decisions)] = seen
    assert '"execute": true' not in json.dumps(messages)
    assert "tool_calls" not in messages[-1]["data"]
    [decision] = decisions
    assert type(decision).__name__ == "UnverifiedDecision"
    assert (decision.call_id, decision.approve) == ("tc_never_issued_by_anyone", True)


# -- low: with the store down, nothing is called before the 503 --------------------------------------


@pytest.mark.parametrize("route", ["/api/chat", "/api/chat-stream"])
def test_a_new_conversation_with_the_store_down_calls_no_model_and_runs_no_tool(start_server, route):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ops = Ops()
    agent = ops_agent(
        ops, tool_calls("list_pods"), "web-1 and web-2.", repository=f"redis://127.0.0.1:{port}/0"
    )
    client = start_server(agent)

    response = client.post(route, json={"messages": [user("list pods")]})

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "store_unavailable"
    assert agent.runtime.requests == []
    assert ops.runs == []


def test_a_call_proposed_over_helpdesk_is_approved_over_a2a_in_its_context_and_recorded(start_server):
    pytest.importorskip("a2a", reason="the a2a extra is not installed: pip install -e '.[a2a]'")
    ops = Ops()
    client = start_server(ops_agent(ops), a2a=True)
    pending, conversation_id = propose(client, DEV)
    decision = {"tool_calls": [{"id": pending["id"], "execute": True}], "platform_context": DEV}

    task = a2a_send(client, context_id=conversation_id, data=decision).json()

    assert (task["id"], task["status"], task["text"]) == (
        f"{conversation_id}~1",
        "completed",
        "Deleted web-2.",
    )
    assert client.get(f"/a2a/tasks/{task['id']}").json()["status"] == "completed"
    assert ops.runs == [("default", "web-2", DEV)]
