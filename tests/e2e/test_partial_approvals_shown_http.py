"""A partial approval is shown everywhere a call is (docs/approvals.md, "Approvals by teams"): the
stream's events of a counted approval say who approved so far and what the call still needs."""

from __future__ import annotations

import json

from test_inbox_http import ALICE, ask, key, serve


def test_the_stream_of_a_counted_approval_shows_approvals_so_far_and_still_needed(start_server):
    server = serve(start_server, [])
    conversation_id = ask(server, "web-1")
    [item] = server.get("/api/approvals", headers=key(ALICE)).json()["approvals"]
    decided = {"id": item["id"], "name": item["name"], "input": item["input"], "execute": True}
    body = {
        "conversation_id": conversation_id,
        "platform_context": item["platform_context"],
        "messages": [{"role": "user", "content": "", "data": {"tool_calls": [decided]}}],
    }

    streamed = server.post("/api/chat-stream", headers=key(ALICE), json=body)

    assert streamed.status_code == 200, streamed.text
    events = [json.loads(line) for line in streamed.text.splitlines() if line.strip()]
    done = events[-1]
    assert done["type"] == "done", events
    [waiting] = done["message"]["data"]["tool_calls"]
    assert waiting["approvals"] == {
        "rule": "2 approvers from sre, not the requester",
        "given": [{"by": "alice", "at": waiting["approvals"]["given"][0]["at"], "stage": 1}],
        "needed": [{"stage": 1, "count": 1, "groups": ["sre"]}],
    }


def test_a2a_status_data_of_a_waiting_call_shows_its_rule_and_what_it_needs(start_server):
    """docs/approvals.md, "Approvals by teams": A2A's status data carries the call's approvals."""
    from dcaf_like import Agent, approvers, tool
    from dcaf_like.testing import FakeRuntime, tool_call

    @tool(approvers=approvers(2, "sre"))
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return name

    agent = Agent(tools=[delete_pod], runtime=FakeRuntime([tool_call("delete_pod", name="web-1")]))
    http = start_server(agent, a2a=True)

    waiting = http.post("/a2a/tasks/send", json={"message": "delete web-1"}).json()
    read = http.get(f"/a2a/tasks/{waiting['id']}").json()

    assert waiting["status"] == "input-required"
    for seen in (waiting, read):
        [pending] = seen["tool_calls"]
        assert pending["approvals"] == {
            "rule": "2 approvers from sre, not the requester",
            "given": [],
            "needed": [{"stage": 1, "count": 2, "groups": ["sre"]}],
        }
