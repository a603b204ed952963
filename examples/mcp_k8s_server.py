"""A small MCP server (built with the MCP SDK's MCPServer) holding an in-memory cluster's pods.

    python examples/mcp_k8s_server.py       # speaks MCP over stdin/stdout; examples/mcp_agent.py starts it

It knows nothing of dcaf_like: any MCP client can use it.
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("k8s", log_level="WARNING")
pods = {"web-1": "Running", "web-2": "CrashLoopBackOff"}


@server.tool()
def list_pods() -> str:
    """List the pods with their status."""
    return json.dumps(pods)


@server.tool()
def delete_pod(name: str, namespace: str = "default") -> str:
    """Delete a pod; its deployment starts a fresh one."""
    if pods.pop(name, None) is None:
        raise ToolError(f"no pod {name} in {namespace}")
    return f'pod "{name}" deleted'


if __name__ == "__main__":
    server.run()  # stdio
