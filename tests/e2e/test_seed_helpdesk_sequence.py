"""Seed 003's HelpDesk example request sequence, copied byte for byte from the seed ("HelpDesk Protocol
Integration": "Incoming Request (from HelpDesk)" and "Outgoing Response (to HelpDesk)"), played over
real HTTP as the HelpDesk plays it: the user's message alone, then the whole history resent with the
call approved. The platform context is on the first message only, as the seed writes it."""

from __future__ import annotations

import json
import re
from typing import Any

from dcaf_like import Agent, ToolContext, tool
from dcaf_like.testing import FakeRuntime, tool_call, tool_calls

# Seed 003, lines 409-457: the request, as the seed prints it (a comment and an elision in it).
SEED_REQUEST = r"""{
  "messages": [
    {
      "role": "user",
      "content": "Delete the pod my-pod in production",
      "data": {
        "cmds": [],
        "executed_cmds": [],
        "tool_calls": [],
        "executed_tool_calls": []
      },
      "platform_context": {
        "tenant_name": "production",
        "k8s_namespace": "default",
        "duplo_token": "...",
        "aws_credentials": {...}
      }
    },
    {
      "role": "assistant",
      "content": "I'll delete that pod. This requires your approval.",
      "data": {
        "tool_calls": [
          {
            "id": "tc_123",
            "name": "delete_pod",
            "input": {"name": "my-pod", "namespace": "default"},
            "execute": false,
            "tool_description": "Delete a Kubernetes pod"
          }
        ]
      }
    },
    {
      "role": "user",
      "content": "",
      "data": {
        "tool_calls": [
          {
            "id": "tc_123",
            "name": "delete_pod",
            "input": {"name": "my-pod", "namespace": "default"},
            "execute": true  // ◄── User approved!
          }
        ]
      }
    }
  ]
}
"""

# Seed 003, lines 463-479: the response the seed expects.
SEED_RESPONSE = r"""{
  "role": "assistant",
  "content": "The pod my-pod has been deleted.",
  "data": {
    "tool_calls": [],
    "executed_tool_calls": [
      {
        "id": "tc_123",
        "name": "delete_pod",
        "input": {"name": "my-pod", "namespace": "default"},
        "output": "pod \"my-pod\" deleted"
      }
    ],
    "cmds": [],
    "executed_cmds": []
  }
}
"""

AWS_CREDENTIALS = {
    "aws_access_key_id": "AKIAEXAMPLE0000000000",
    "aws_secret_access_key": "sEcReT/example/key0",
}


def as_sent(seed: str, call_id: str) -> dict[str, Any]:
    """The seed's JSON as a client sends it, with only what the seed leaves out filled in: JSON has no
    comments (``// ◄── User approved!`` goes), the elided ``aws_credentials`` (``{...}``) are
    given, and ``tc_123``, an id this server mints, is the id it gave the call."""
    text = re.sub(r"\s*//[^\n]*", "", seed)
    text = text.replace("{...}", json.dumps(AWS_CREDENTIALS)).replace('"tc_123"', json.dumps(call_id))
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def test_the_seeds_example_sequence_proposes_waits_runs_in_the_tenants_context_and_answers(start_server):
    ran_in: list[dict[str, Any]] = []

    @tool
    def delete_pod(name: str, context: ToolContext, namespace: str = "default") -> str:
        """Delete a Kubernetes pod"""
        ran_in.append(dict(context.platform_context))
        return f'pod "{name}" deleted'

    runtime = FakeRuntime(
        [
            tool_calls(
                tool_call("delete_pod", name="my-pod", namespace="default"),
                text="I'll delete that pod. This requires your approval.",
            ),
            "The pod my-pod has been deleted.",
        ]
    )
    client = start_server(Agent(tools=[delete_pod], runtime=runtime))
    seed = as_sent(SEED_REQUEST, "tc_123")
    first = seed["messages"][0]

    # 1-4: the user's message alone; the call waits, nothing runs.
    proposed = client.post("/api/chat", json={"messages": [first]})

    assert proposed.status_code == 200, proposed.text
    message = proposed.json()
    [pending] = message["data"]["tool_calls"]
    seed_assistant = as_sent(SEED_REQUEST, pending["id"])["messages"][1]
    assert message["content"] == seed_assistant["content"]
    [seed_call] = seed_assistant["data"]["tool_calls"]
    assert pending == {**pending, **seed_call}, "the seed's echoed call is the server's, abbreviated"
    assert ran_in == []

    # 5: the whole history resent, byte for byte the seed's, the call approved; the context is on the
    # first message only. The seed shows no conversation id: the client sends the one it was given.
    history = as_sent(SEED_REQUEST, pending["id"])
    history["conversation_id"] = message["data"]["conversation_id"]
    done = client.post("/api/chat", json=history)

    # 6-9: the tool ran once, in the tenant's context, credentials included; the model answered.
    assert done.status_code == 200, done.text
    assert ran_in == [first["platform_context"]]
    answer = done.json()
    expected = as_sent(SEED_RESPONSE, pending["id"])
    assert (answer["role"], answer["content"]) == (expected["role"], expected["content"])
    for field in ("tool_calls", "cmds", "executed_cmds"):
        assert answer["data"][field] == expected["data"][field] == []
    [executed] = answer["data"]["executed_tool_calls"]
    [seed_executed] = expected["data"]["executed_tool_calls"]
    assert executed == {**executed, **seed_executed}
    assert AWS_CREDENTIALS["aws_secret_access_key"] not in proposed.text + done.text
