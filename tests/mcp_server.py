"""A small Kubernetes-like MCP server, built with the MCP SDK, for the MCP tests.

    python tests/mcp_server.py --record CALLS.jsonl [--name k8s] [--media]     # over stdio

Every tool call it receives is appended to the record file (one JSON object a line), so a test can see
what the server was asked to do and when. `build_server(record)` gives the same server to serve over
streamable HTTP. With `--media` (``media=True``) it also has a tool that returns an image and one that
returns a file (an embedded resource).
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import BlobResourceContents, EmbeddedResource, ImageContent, TextContent

#: What cpu_graph draws and logs_archive packs (the bytes a test expects the model to be shown).
GRAPH = b"\x89PNG\r\n\x1a\n cpu of web-2"
ARCHIVE = b"\x1f\x8b web-2 logs"


def build_server(record: Path, name: str = "k8s", *, media: bool = False) -> MCPServer:
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

    if not media:
        return server

    @server.tool()
    def cpu_graph(name: str, size: int = 0) -> list[ImageContent | TextContent]:
        """A graph of a pod's CPU (`size`: pad the image to that many bytes)."""
        note("cpu_graph", {"name": name})
        pixels = GRAPH + b"\0" * max(0, size - len(GRAPH))
        return [
            TextContent(type="text", text=f"CPU of {name} over the last hour"),
            ImageContent(type="image", data=base64.b64encode(pixels).decode(), mime_type="image/png"),
        ]

    @server.tool()
    def logs_archive(name: str) -> list[EmbeddedResource]:
        """A pod's logs, gzipped."""
        note("logs_archive", {"name": name})
        blob = BlobResourceContents(
            uri=f"file:///logs/{name}.log.gz",
            mime_type="application/gzip",
            blob=base64.b64encode(ARCHIVE).decode(),
        )
        return [EmbeddedResource(type="resource", resource=blob)]

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
    parser.add_argument("--media", action="store_true")
    options = parser.parse_args()
    build_server(options.record, options.name, media=options.media).run()
