"""An edit over HTTP is a merge patch onto the proposal: the approver's partial edit runs with every
argument it leaves out as the model proposed it, not as the tool's default."""

from __future__ import annotations

from typing import Any

from _helpdesk import approve, user

from dcaf_like import Agent, tool
from dcaf_like.testing import FakeRuntime, tool_call


def test_a_partial_edit_runs_in_the_proposed_namespace(start_server):
    ran: list[tuple[str, int, str]] = []

    @tool(requires_approval=True, editable=True)
    def scale(deployment: str, replicas: int, namespace: str = "default") -> str:
        """Scale a deployment."""
        ran.append((deployment, replicas, namespace))
        return f"{deployment} scaled to {replicas} in {namespace}"

    runtime = FakeRuntime([tool_call("scale", deployment="api", replicas=5, namespace="prod"), "Done."])
    client = start_server(Agent(tools=[scale], runtime=runtime))
    body = client.post("/api/chat", json={"messages": [user("scale api")]}).json()
    [pending] = body["data"]["tool_calls"]
    edit: dict[str, Any] = {"deployment": "api", "replicas": 3}
    message = user(
        "", tool_calls=[approve(pending, edited_input=edit)], conversation_id=body["data"]["conversation_id"]
    )

    response = client.post("/api/chat", json={"messages": [message]})

    assert response.status_code == 200, response.text
    assert ran == [("api", 3, "prod")]
    [executed] = response.json()["data"]["executed_tool_calls"]
    assert executed["input"] == {"deployment": "api", "replicas": 3, "namespace": "prod"}
    assert executed["proposed_input"] == {"deployment": "api", "replicas": 5, "namespace": "prod"}
