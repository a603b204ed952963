"""An agent whose Kubernetes tools come from an MCP server, started as a subprocess over stdio.

    python examples/mcp_agent.py            # asks you to approve delete_pod on the terminal
    python examples/mcp_agent.py --yes      # approves for you (used by the tests)

The server is examples/mcp_k8s_server.py. The agent allow-lists ``list_pods``; every other tool of the
server, ``delete_pod`` here, waits for your approval.
A scripted model plays the model's part; pass any runtime to ``build_agent`` in real use.
Needs the MCP SDK: ``pip install "dcaf-like[mcp]"``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dcaf_like import Agent, AgentRuntime
from dcaf_like.toolsets.mcp import MCPToolset


def build_agent(runtime: AgentRuntime) -> Agent:
    server = Path(__file__).with_name("mcp_k8s_server.py")
    k8s = MCPToolset("k8s", command=[sys.executable, str(server)], allow=["list_*"])
    return Agent(tools=[k8s], system="You operate Kubernetes.", runtime=runtime)


def scripted_model() -> AgentRuntime:
    from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

    return FakeRuntime(
        [
            tool_calls("list_pods", text="Let me look at the pods."),
            tool_calls(
                tool_call("delete_pod", name="web-2"), text="web-2 is crash-looping; I will delete it."
            ),
            reply("Done."),
            tool_calls("list_pods"),
            reply("Those are the pods now."),
        ]
    )


def main(argv: list[str]) -> int:
    agent = build_agent(scripted_model())
    try:  # the MCP server starts with the first run, and serves every later one
        response = agent.run("web-2 keeps crashing, please fix it")
        for call in response.executed_tool_calls:
            print(f"  ran {call.name}{call.input} -> {call.output}")
        for call in response.pending_tool_calls:
            print(f"  wants to run {call.name}{call.input}: {call.description}")
            answer = "y" if "--yes" in argv else input("  approve? [y/N] ").strip().lower()
            if answer == "y":
                response = agent.approve(response.conversation_id, call.id)
            else:
                response = agent.reject(response.conversation_id, call.id, "the operator said no")
            for done in response.executed_tool_calls:
                print(f"  ran {done.name}{done.input} -> {done.output or done.error}")
        print(f"agent: {response.text}")
        after = agent.run("list the pods again")
        print(f"pods now: {after.executed_tool_calls[0].output}")
    finally:
        agent.close()  # the MCP server's process exits
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
