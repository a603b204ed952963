"""The seed's names and snippets, run as the seed writes them, then served over real HTTP: the
protocol's typed shapes (``DataDTO``, ``ToolCallDTO``, ...), ``AgentResponse(data=...)``,
``create_tool``, ``InstructionProvider``; and agent functions that stream."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import pytest
from _helpdesk import user
from pydantic import BaseModel, Field

from dcaf_like import (
    Agent,
    AgentResponse,
    AgentResult,
    CommandDTO,
    DataDTO,
    ExecutedCommandDTO,
    ExecutedToolCallDTO,
    InstructionProvider,
    RunContext,
    ToolCallDTO,
    create_tool,
    tool,
)
from dcaf_like.helpdesk.protocol import assistant_message
from dcaf_like.testing import FakeRuntime, tool_call


def stream(client: httpx.Client, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with client.stream("POST", "/api/chat-stream", json={"messages": messages}) as response:
        assert response.status_code == 200
        return [json.loads(line) for line in response.iter_lines() if line]


# -- item 2: the seed's names ---------------------------------------------------------------------


def seed_response() -> AgentResponse:
    """The seed's example, word for word (``dcaf.core`` is ``dcaf_like``)."""
    return AgentResponse(
        conversation_id="123",
        text="I need approval to delete the pod.",
        data=DataDTO(
            tool_calls=[
                ToolCallDTO(
                    id="tc_123",
                    name="delete_pod",
                    input={"name": "my-pod"},
                    execute=False,
                    tool_description="Delete a Kubernetes pod",
                )
            ]
        ),
        has_pending_approvals=True,
    )


def test_the_seeds_agent_response_example_builds_and_converts_to_a_helpdesk_message():
    """ADR 32: the seed's `response.to_helpdesk_message()` is `assistant_message(response)`."""
    response = seed_response()

    assert response.has_pending_approvals
    helpdesk_msg = assistant_message(response)

    assert helpdesk_msg["content"] == "I need approval to delete the pod."
    assert helpdesk_msg["data"]["tool_calls"] == [
        {
            "id": "tc_123",
            "name": "delete_pod",
            "input": {"name": "my-pod"},
            "proposed_input": {"name": "my-pod"},
            "edited": False,
            "approval_reason": None,
            "execute": False,
            "tool_description": "Delete a Kubernetes pod",
            "editable": False,
            "reason": None,
        }
    ]
    assert helpdesk_msg["meta"]["stop_reason"] == "awaiting_approval"


def test_has_pending_approvals_must_agree_with_the_calls_that_wait():
    with pytest.raises(ValueError, match="0 call"):
        AgentResponse(conversation_id="1", text="hi", data=DataDTO(), has_pending_approvals=True)


def test_a_function_answering_with_the_seeds_response_is_served_as_the_protocol_says(start_server):
    def my_agent(messages: list, context: dict) -> AgentResponse:
        return seed_response()

    client = start_server(my_agent)

    body = client.post("/api/chat", json={"messages": [user("delete my-pod")]}).json()

    assert body["content"] == "I need approval to delete the pod."
    [pending] = body["data"]["tool_calls"]
    assert pending["id"] == "tc_123"
    assert pending["tool_description"] == "Delete a Kubernetes pod"
    assert body["meta"]["stop_reason"] == "awaiting_approval"


def test_every_dto_has_the_wire_form_of_its_list_and_reads_it_back():
    data = DataDTO(
        cmds=[CommandDTO(command="kubectl get pods -n 'prod x'", id="tc_1")],
        executed_cmds=[ExecutedCommandDTO(command="kubectl version", output="v1.30\n", id="tc_2")],
        tool_calls=[ToolCallDTO(id="tc_3", name="delete_pod", input={"name": "web-2"})],
        executed_tool_calls=[
            ExecutedToolCallDTO(id="tc_4", name="list_pods", input={}, output="web-1 web-2")
        ],
        session={"namespace": "prod"},
    )

    wire = data.to_dict()

    assert wire["cmds"] == [
        {
            "command": "kubectl get pods -n 'prod x'",
            "argv": ["kubectl", "get", "pods", "-n", "prod x"],
            "execute": False,
            "id": "tc_1",
        }
    ]
    assert wire["executed_cmds"][0]["argv"] == ["kubectl", "version"]
    assert wire["executed_tool_calls"][0] == {  # the protocol's one shape (executed_call)
        "id": "tc_4",
        "name": "list_pods",
        "input": {},
        "proposed_input": {},
        "edited": False,
        "approval_reason": None,
        "output": "web-1 web-2",
        "status": "executed",
    }
    assert wire["tool_calls"][0]["proposed_input"] == {"name": "web-2"}  # as pending_call writes it
    assert DataDTO.from_dict(wire).to_dict() == wire
    assert data.has_pending_items


def test_a_function_answering_with_commands_shows_them_in_cmds(start_server):
    """A function's own commands are shown to the client; approving one runs nothing (only an Agent's
    command tool runs commands, once its gate checked the approval)."""

    def my_agent(messages: list, context: dict) -> AgentResponse:
        pending = CommandDTO(command="kubectl rollout restart deploy/web", id="tc_1")
        return AgentResponse(conversation_id="c1", text="Restart?", data=DataDTO(cmds=[pending]))

    client = start_server(my_agent)

    body = client.post("/api/chat", json={"messages": [user("restart web")]}).json()

    [command] = body["data"]["cmds"]
    assert command["argv"] == ["kubectl", "rollout", "restart", "deploy/web"]
    assert body["data"]["tool_calls"] == []


class DeletePodInput(BaseModel):  # the seed's "Option 3: Pydantic Model"
    name: str = Field(..., description="Pod name")
    namespace: str = Field(default="default")


def test_the_seeds_create_tool_snippet_gives_name_description_and_schema(capsys):
    @tool(description="Delete a pod", schema=DeletePodInput)
    def delete_pod(name: str, namespace: str = "default") -> str:
        return f"pod {name} deleted from {namespace}"

    tool_ = create_tool(delete_pod)
    print(tool_.name)  # "delete_pod"
    print(tool_.description)  # "Delete a pod"
    print(tool_.schema)  # Full schema dict including input_schema

    assert capsys.readouterr().out.splitlines()[:2] == ["delete_pod", "Delete a pod"]
    assert tool_.schema["input_schema"]["required"] == ["name"]
    with pytest.raises(TypeError, match="already a tool"):
        create_tool(delete_pod, requires_approval=False)


def test_a_tool_made_by_create_tool_is_gated_over_http(start_server):
    deleted: list[str] = []

    def delete_pod(name: str) -> str:
        """Delete a pod."""
        deleted.append(name)
        return f"pod {name} deleted"

    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), "Deleted."])
    client = start_server(Agent(tools=[create_tool(delete_pod, editable=True)], runtime=runtime))

    body = client.post("/api/chat", json={"messages": [user("delete web-2")]}).json()

    [pending] = body["data"]["tool_calls"]
    assert pending == {**pending, "name": "delete_pod", "editable": True, "tool_description": "Delete a pod."}
    assert deleted == []


def test_an_instruction_provider_writes_each_turns_system_prompt_over_http(start_server):
    def instructions(run: RunContext) -> str:
        return f"You operate the tenant {run.platform_context.get('tenant_name')}."

    provider: InstructionProvider = instructions
    runtime = FakeRuntime(["Hello."])
    client = start_server(Agent(system=provider, runtime=runtime))

    message = {**user("hi"), "platform_context": {"tenant_name": "prod"}}
    assert client.post("/api/chat", json={"messages": [message]}).status_code == 200

    assert runtime.requests[0].system == "You operate the tenant prod."


# -- item 4: agent functions that stream ----------------------------------------------------------


def test_an_async_generator_functions_deltas_reach_the_client_as_they_come(start_server):
    client_has_first = threading.Event()

    async def my_agent(messages: list, context: dict):
        yield "first "
        seen = await asyncio.to_thread(client_has_first.wait, 10)
        yield "then the rest" if seen else "(the first delta was held back)"

    client = start_server(my_agent)
    events = []
    with client.stream("POST", "/api/chat-stream", json={"messages": [user("hi")]}) as response:
        for line in response.iter_lines():
            if line:
                events.append(json.loads(line))
                if events[-1]["type"] == "text_delta":
                    client_has_first.set()

    assert [e["type"] for e in events] == ["run_started", "text_delta", "text_delta", "done"]
    assert [e["text"] for e in events[1:3]] == ["first ", "then the rest"]
    assert events[-1]["message"]["content"] == "first then the rest"


def test_a_generator_function_ends_with_its_result_and_reads_the_seeds_context_dict(start_server):
    def my_agent(messages: list, context: dict):
        yield f"Tenant {context['tenant_name']}, "
        yield f"namespace {context.get('k8s_namespace', 'default')}."
        context.session.set("seen", True)
        yield AgentResult(text=f"Tenant {context['tenant_name']} checked.")

    client = start_server(my_agent)
    message = {**user("check"), "platform_context": {"tenant_name": "prod", "k8s_namespace": "web"}}

    events = stream(client, [message])

    assert [e["text"] for e in events if e["type"] == "text_delta"] == ["Tenant prod, ", "namespace web."]
    done = events[-1]["message"]
    assert done["content"] == "Tenant prod checked."
    assert done["data"]["session"] == {"seen": True}

    answer = client.post("/api/chat", json={"messages": [message]}).json()
    assert answer["content"] == "Tenant prod checked."


def test_a_streaming_function_that_fails_ends_its_stream_with_an_error_event(start_server):
    async def my_agent(messages: list, context: dict):
        yield "Looking "
        raise RuntimeError("the cluster is unreachable")

    client = start_server(my_agent)

    events = stream(client, [user("look")])

    assert [e["type"] for e in events] == ["run_started", "text_delta", "error"]
    assert events[-1]["status"] == 500


def test_a_streaming_function_yielding_something_else_is_an_error(start_server):
    def my_agent(messages: list, context: dict):
        yield 42

    client = start_server(my_agent)

    events = stream(client, [user("look")])

    assert events[-1]["type"] == "error"
