"""MCP (Model Context Protocol): an MCP server's tools as an agent's tools, behind the approval gate.

>>> k8s = MCPToolset("k8s", command=["python", "k8s_server.py"], allow=["list_*"])
>>> agent = Agent(tools=[k8s], runtime=...)   # k8s starts on the first run; delete_pod needs approval

Needs the MCP SDK: ``pip install "dcaf-like[mcp]"``. See docs/mcp.md.
"""

from dcaf_like.mcp._connection import MCPServerUnavailable
from dcaf_like.mcp.toolset import MCPTool, MCPToolError, MCPToolset

__all__ = ["MCPServerUnavailable", "MCPTool", "MCPToolError", "MCPToolset"]
