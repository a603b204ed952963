"""``dcaf-like approvals --url URL`` on a real terminal (a pty; docs/approvals.md, "One inbox"): an
approver lists the calls waiting across conversations and decides them by number."""

from __future__ import annotations

import os
from typing import Any

from test_chat_terminal import COMMAND, ROOT, Terminal

from dcaf_like import Agent, ApprovalPolicy, InMemoryConversationRepository, approvers, require_approval, tool
from dcaf_like.application.messages import ModelRequest, ModelResponse, UserTurn
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

CAROL = "carol-key-0123456789abcdef0"
ALICE = "alice-key-0123456789abcdef0"
BOB = "bob-key-0123456789abcdef00000"
KEYS = {CAROL: "carol:chat+approve+read", ALICE: "alice:approve", BOB: "bob:approve"}


def test_one_inbox_on_the_terminal_lists_counts_and_runs_calls_of_two_conversations(start_server):
    deleted: list[str] = []

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        deleted.append(name)
        return f"deleted {name}"

    def deleting(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, UserTurn):
            return tool_calls(tool_call("delete_pod", name=last.text.split()[-1]))
        return reply("Done.")

    agent = Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([deleting] * 8),
        repository=InMemoryConversationRepository(),
        approval_policy=ApprovalPolicy([require_approval("two SREs", approvers=approvers(2, "sre"))]),
        groups={"sre": {"alice", "bob"}},
    )
    client = start_server(agent, api_keys=KEYS)
    for pod in ("web-1", "web-2"):
        asked: Any = client.post(
            "/api/chat",
            headers={"X-API-Key": CAROL},
            json={"messages": [{"role": "user", "content": f"delete {pod}"}]},
        )
        assert asked.status_code == 200, asked.text
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    url = str(client.base_url)

    alice = Terminal(COMMAND, "approvals", "--url", url, "--api-key", ALICE, env=env)
    shown = alice.expect("q: quit")
    assert '[1] delete_pod(name="web-2")' in shown
    assert '[2] delete_pod(name="web-1")' in shown
    assert "2 approvers from sre, not the requester: needs stage 1: 2 more from sre (alice, bob)" in shown
    alice.expect("> ")
    alice.type("a 1")
    alice.expect("Counted for delete_pod")
    alice.expect("approved by alice; 1 more needed")
    alice.type("l")
    shown = alice.expect("q: quit")
    assert "web-2" not in shown
    assert '[1] delete_pod(name="web-1")' in shown
    alice.type("q")
    assert alice.close() == 0

    bob = Terminal(COMMAND, "approvals", "--url", url, "--api-key", BOB, env=env)
    shown = bob.expect("q: quit")
    assert "approved by alice; needs stage 1: 1 more from sre (bob)" in shown
    bob.type("a 1")
    bob.expect("Ran delete_pod")
    bob.type("r 2 not this one")
    bob.expect("Rejected delete_pod")
    bob.type("l")
    bob.expect("Nothing waits for your decision.")
    bob.type("q")
    assert bob.close() == 0
    assert deleted == ["web-2"]
