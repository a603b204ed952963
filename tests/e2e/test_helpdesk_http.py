"""The HelpDesk protocol over real HTTP: uvicorn on a loopback port, httpx as the client."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from _helpdesk import approve, reject, user

from dcaf_like import (
    Agent,
    AgentContext,
    AgentResult,
    ContextWindow,
    ModelRequest,
    ModelResponse,
    Session,
    ToolResult,
    Usage,
    tool,
)
from dcaf_like.application.context import SUMMARY_SYSTEM
from dcaf_like.testing import FakeRuntime, tool_call, tool_calls


def ops_agent(cluster: Any, runtime: FakeRuntime, **options: Any) -> Agent:
    return Agent(tools=cluster.tools(), system="You operate Kubernetes.", runtime=runtime, **options)


def test_the_seed_approval_sequence_proposes_waits_executes_and_answers(start_server, cluster):
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("delete_pod", name="web-2"), text="I'll delete that pod."),
            "The pod web-2 has been deleted.",
        ]
    )
    client = start_server(ops_agent(cluster, runtime))
    first = user("Delete the crashing pod web-2", cmds=[], executed_cmds=[], tool_calls=[])
    # As the seed writes it: the platform context on the first message only, never on the approval.
    first["platform_context"] = {"tenant_name": "production", "k8s_namespace": "default", "duplo_token": "t"}

    proposed = client.post("/api/chat", json={"messages": [first]})

    assert proposed.status_code == 200
    message = proposed.json()
    assert message["role"] == "assistant"
    assert message["content"] == "I'll delete that pod."
    [pending] = message["data"]["tool_calls"]
    assert pending["name"] == "delete_pod"
    assert pending["input"] == {"name": "web-2", "namespace": "default"}
    assert pending["execute"] is False
    assert pending["tool_description"].startswith("Delete a pod.")
    assert message["data"]["executed_tool_calls"] == []
    assert cluster.deleted == [], "nothing runs before a human approves"

    # The HelpDesk client resends the whole history with the call approved.
    history = [first, message, user("", tool_calls=[approve(pending)])]
    done = client.post("/api/chat", json={"messages": history})

    assert done.status_code == 200, done.text
    answer = done.json()
    assert answer["content"] == "The pod web-2 has been deleted."
    [executed] = answer["data"]["executed_tool_calls"]
    assert executed["id"] == pending["id"]
    assert executed["output"] == 'pod "web-2" deleted'
    assert answer["data"]["tool_calls"] == []
    assert answer["data"]["conversation_id"] == message["data"]["conversation_id"]
    assert cluster.deleted == [("default", "web-2")]


def test_a_rejection_with_a_reason_runs_nothing_and_tells_the_model_why(start_server, cluster):
    runtime = FakeRuntime([tool_call("delete_pod", name="web-1"), "Understood, I left web-1 alone."])
    client = start_server(ops_agent(cluster, runtime))
    proposed = client.post("/api/chat", json={"messages": [user("delete web-1")]}).json()
    [pending] = proposed["data"]["tool_calls"]
    conversation = {"conversation_id": proposed["data"]["conversation_id"]}

    response = client.post(
        "/api/chat",
        json={"messages": [user("", tool_calls=[reject(pending, "web-1 serves traffic")], **conversation)]},
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["content"] == "Understood, I left web-1 alone."
    assert body["data"]["executed_tool_calls"] == []
    [rejected] = body["data"]["rejected_tool_calls"]
    assert rejected == {**rejected, "id": pending["id"], "rejection_reason": "web-1 serves traffic"}
    results = [m for m in runtime.requests[-1].messages if isinstance(m, ToolResult)]
    assert results[-1].is_error
    assert "web-1 serves traffic" in results[-1].content
    assert cluster.deleted == []


def test_several_pending_calls_can_be_decided_one_at_a_time_out_of_order(start_server, cluster):
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("delete_pod", name="web-1"), tool_call("delete_pod", name="web-2")),
            "Deleted web-2 and kept web-1.",
        ]
    )
    client = start_server(ops_agent(cluster, runtime))
    proposed = client.post("/api/chat", json={"messages": [user("delete both web pods")]}).json()
    first, second = proposed["data"]["tool_calls"]
    conversation = {"conversation_id": proposed["data"]["conversation_id"]}

    partial = client.post(
        "/api/chat", json={"messages": [user("", tool_calls=[approve(second)], **conversation)]}
    ).json()

    assert [c["id"] for c in partial["data"]["executed_tool_calls"]] == [second["id"]]
    assert [c["id"] for c in partial["data"]["tool_calls"]] == [first["id"]], "web-1 still waits"
    assert cluster.deleted == [("default", "web-2")]
    assert len(runtime.requests) == 1, "the model is not asked again while a call waits"

    final = client.post(
        "/api/chat", json={"messages": [user("", tool_calls=[reject(first, "keep it")], **conversation)]}
    ).json()

    assert final["content"] == "Deleted web-2 and kept web-1."
    assert final["data"]["tool_calls"] == []
    assert cluster.deleted == [("default", "web-2")]


def test_session_state_round_trips_through_data_session(start_server):
    @tool(requires_approval=False)
    def remember_namespace(namespace: str, session: Session) -> str:
        """Remember the namespace the user works in."""
        session.set("namespace", namespace)
        return f"remembered {namespace}"

    @tool(requires_approval=False)
    def current_namespace(session: Session) -> str:
        """The namespace the user works in."""
        return str(session.get("namespace", "none"))

    runtime = FakeRuntime(
        [tool_call("remember_namespace", namespace="prod"), "Noted.", tool_call("current_namespace"), "prod"]
    )
    # Stateless between turns on purpose: a fresh agent per request, as a HelpDesk deployment would be.
    client = start_server(Agent(tools=[remember_namespace, current_namespace], runtime=runtime))

    first = client.post("/api/chat", json={"messages": [user("I work in prod")]}).json()
    assert first["data"]["session"] == {"namespace": "prod"}

    second = client.post(
        "/api/chat",
        json={"messages": [user("which namespace?", session={"namespace": "prod"})]},
    ).json()
    [executed] = second["data"]["executed_tool_calls"]
    assert executed["output"] == "prod"
    assert second["data"]["session"] == {"namespace": "prod"}


def test_a_custom_agent_function_is_served_with_the_same_protocol(start_server):
    def triage(messages: list[dict[str, Any]], context: AgentContext) -> AgentResult:
        """Counts the turns it has seen."""
        seen = int(context.session.get("turns", 0)) + 1
        context.session.set("turns", seen)
        tenant = context.platform_context.get("tenant_name", "?")
        return AgentResult(text=f"turn {seen} for {tenant}: {messages[-1]['content']}")

    client = start_server(triage)
    body = {
        "messages": [{**user("hello", session={"turns": 2}), "platform_context": {"tenant_name": "prod"}}]
    }

    response = client.post("/api/chat", json=body)

    assert response.status_code == 200, response.text
    assert response.json()["content"] == "turn 3 for prod: hello"
    assert response.json()["data"]["session"] == {"turns": 3}
    streamed = [line for line in client.post("/api/chat-stream", json=body).text.splitlines() if line]
    assert '"type":"run_started"' in streamed[0]
    assert '"type":"text_delta"' in streamed[1]
    assert '"type":"done"' in streamed[-1]


def test_health_and_openapi_are_served(start_server, cluster):
    client = start_server(ops_agent(cluster, FakeRuntime()))

    health = client.get("/health")
    schema = client.get("/openapi.json").json()

    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    assert {"/api/chat", "/api/chat-stream", "/health"} <= set(schema["paths"])


def test_every_response_carries_a_request_id_that_is_also_logged(start_server, cluster, caplog):
    client = start_server(ops_agent(cluster, FakeRuntime(["hi"])))
    caplog.set_level(logging.INFO, logger="dcaf_like.server")

    minted = client.post("/api/chat", json={"messages": [user("hello")]})
    echoed = client.post("/api/chat", json={"messages": []}, headers={"X-Request-ID": "helpdesk-42"})

    request_id = minted.headers["x-request-id"]
    assert len(request_id) == 32
    assert minted.json()["meta"]["request_id"] == request_id
    assert echoed.headers["x-request-id"] == "helpdesk-42"
    assert echoed.json()["error"]["request_id"] == "helpdesk-42"
    logged = {getattr(r, "request_id", None) for r in caplog.records}
    assert {request_id, "helpdesk-42"} <= logged


def test_a_request_id_that_is_not_a_sane_token_is_replaced(start_server, cluster):
    client = start_server(ops_agent(cluster, FakeRuntime()))

    response = client.get("/health", headers={"X-Request-ID": "x" * 500})

    assert response.headers["x-request-id"] != "x" * 500


def test_the_usage_of_a_turn_that_summarized_counts_the_summary_call(start_server):
    summaries: list[ModelRequest] = []

    def answering(request: ModelRequest) -> ModelResponse:
        if request.system == SUMMARY_SYSTEM:
            summaries.append(request)
            return ModelResponse(text="earlier: the prod pods were checked", usage=Usage(300, 40))
        return ModelResponse(
            text="web-2 is in CrashLoopBackOff (OOMKilled); the rest run. " * 3, usage=Usage(10, 5)
        )

    runtime = FakeRuntime([answering] * 30, context_window=1500)
    client = start_server(Agent(runtime=runtime, context=ContextWindow(summarize=True)))
    usages = []
    conversation: dict[str, str] = {}
    while not summaries and len(usages) < 30:
        question = user(f"question {len(usages)}: which pods crash in namespace prod? " * 3, **conversation)
        body = client.post("/api/chat", json={"messages": [question]}).json()
        conversation = {"conversation_id": body["data"]["conversation_id"]}
        usages.append(body["meta"]["usage"])

    *before, summarized = usages
    assert before
    assert all(usage == {"input_tokens": 10, "output_tokens": 5} for usage in before)
    assert summarized == {"input_tokens": 10 + 300, "output_tokens": 5 + 40}


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
def test_platform_context_secrets_never_come_back(start_server, cluster, path):
    client = start_server(ops_agent(cluster, FakeRuntime(["ok"])))
    message = {**user("hello"), "platform_context": {"tenant_name": "prod", "duplo_token": "s3cr3t-token"}}

    response = client.post(path, json={"messages": [message]})

    assert response.status_code == 200
    assert "s3cr3t-token" not in response.text


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
@pytest.mark.parametrize(
    ("field", "reported"),
    [
        ("executed_cmds", {"command": "kubectl delete pod web-2", "output": 'pod "web-2" deleted'}),
        ("executed_tool_calls", {"id": "tc_1", "name": "delete_pod", "input": {}, "output": "done"}),
    ],
)
def test_a_turn_reporting_what_ran_is_refused_naming_the_list(start_server, cluster, path, field, reported):
    runtime = FakeRuntime(["ok"])
    client = start_server(ops_agent(cluster, runtime))

    response = client.post(path, json={"messages": [user("web-2 is gone", **{field: [reported]})]})

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_request", f"messages[0].data.{field}")
    assert "only it reports it" in error["message"]
    assert runtime.remaining == 1, "the model was not called"
    assert client.get("/api/conversations").json()["conversations"] == []


def test_empty_reports_and_the_servers_own_echoed_back_in_history_are_taken(start_server, cluster):
    runtime = FakeRuntime([tool_call("list_pods"), "web-1 and web-2.", "Nothing else."])
    client = start_server(ops_agent(cluster, runtime))
    first = user("list the pods", executed_cmds=[], executed_tool_calls=[])
    answer = client.post("/api/chat", json={"messages": [first]}).json()
    assert answer["data"]["executed_tool_calls"], "list_pods ran"

    later = client.post("/api/chat", json={"messages": [first, answer, user("anything else?")]})

    assert later.status_code == 200, later.text
    assert later.json()["content"] == "Nothing else."
