"""A small Kubernetes-like MCP server, built with the MCP SDK, for the MCP tests.

    python tests/mcp_server.py --record CALLS.jsonl [--name k8s]     # over stdio

Every tool call it receives is appended to the record file (one JSON object a line), so a test can see
what the server was asked to do and when. `build_server(record)` gives the same server to serve over
streamable HTTP.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def build_server(record: Path, name: str = "k8s") -> MCPServer:
    server = MCPServer(name, log_level="WARNING")
    pods = {"default": {"web-1": "Running", "web-2": "CrashLoopBackOff"}, "prod": {"api-1": "Running"}}

    def note(tool: str, arguments: dict[str, str]) -> None:
        with record.open("a") as out:
            out.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")

    @server.tool()
    def list_pods(namespace: str = "default") -> str:
        """List the pods of a namespace with their status."""
        note("list_pods", {"namespace": namespace})
        return json.dumps(pods.get(namespace, {}))

    @server.tool()
    def delete_pod(name: str, namespace: str = "default") -> str:
        """Delete a pod."""
        note("delete_pod", {"name": name, "namespace": namespace})
        if pods.get(namespace, {}).pop(name, None) is None:
            raise ToolError(f"no pod {name} in namespace {namespace}")
        return f'pod "{name}" deleted'

    return server


def recorded(record: Path) -> list[dict[str, object]]:
    """The calls the server received, in order."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--name", default="k8s")
    options = parser.parse_args()
    build_server(options.record, options.name).run()
