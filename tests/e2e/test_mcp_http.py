"""An agent with MCP tools, served over HTTP: the gate holds, a dead server is a 503 naming it, and the
server's shutdown stops the MCP server's process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _server import serving

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from dcaf_like import Agent, create_app
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls
from dcaf_like.toolsets.mcp import MCPToolset

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from mcp_server import recorded  # noqa: E402


def _children_running(marker: str) -> list[str]:
    """Command lines of live (not zombie) processes naming `marker`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(cmdline)
    return found


def test_an_mcp_tool_waits_for_approval_over_http_and_the_mcp_server_stops_with_ours(tmp_path):
    calls = tmp_path / "calls.jsonl"
    k8s = MCPToolset("k8s", command=[sys.executable, str(TESTS / "mcp_server.py"), "--record", str(calls)])
    model = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-2")), reply("Deleted web-2.")])

    with serving(create_app(Agent(tools=[k8s], runtime=model)), client_timeout=30) as client:
        turn = {"messages": [{"role": "user", "content": "delete web-2"}]}
        message = client.post("/api/chat", json=turn).json()
        [pending] = message["data"]["tool_calls"]
        assert recorded(calls) == []
        assert _children_running(str(calls))  # started by the first request
        data = {
            "conversation_id": message["data"]["conversation_id"],
            "tool_calls": [{**pending, "execute": True}],
        }
        answer = client.post("/api/chat", json={"messages": [{"role": "user", "content": "", "data": data}]})

        assert answer.status_code == 200, answer.text
        assert answer.json()["content"] == "Deleted web-2."
        assert recorded(calls) == [
            {"tool": "delete_pod", "arguments": {"name": "web-2", "namespace": "default"}}
        ]
    assert _children_running(str(calls)) == []  # the server's shutdown closed the MCP session


def test_an_mcp_server_that_cannot_start_is_a_503_naming_it(start_server, tmp_path):
    broken = MCPToolset("k8s", command=[sys.executable, str(tmp_path / "missing.py")])
    model = FakeRuntime(["never said"])
    client = start_server(Agent(tools=[broken], runtime=model))
    turn = {"messages": [{"role": "user", "content": "list pods"}]}

    plain = client.post("/api/chat", json=turn)
    streamed = client.post("/api/chat-stream", json=turn)

    for response in (plain, streamed):
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "toolset_unavailable"
        assert "MCP server 'k8s'" in error["message"]
    assert model.requests == []
