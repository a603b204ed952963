"""An agent's tools as an MCP server (streamable HTTP), mounted at ``/mcp`` by
``create_app(agent, mcp=True)`` / ``serve(agent, mcp=True)``.

The approval gate holds: a tool that needs a human's approval is neither listed nor callable. An MCP
call carries no approval a server could check (MCP's elicitation would let the *calling* client answer
its own question), so a gated call is refused with an error result that says to ask the agent over the
HelpDesk API, where approvals are bound to the proposal and checked on the server. Tools that run
without approval run, after their arguments are validated and the agent's policy (rules on arguments
included) allows the call; a denied call is refused the same way.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from dcaf_like.application.errors import InvalidToolArguments
from dcaf_like.application.ports import ExecutableTool, ToolContext, ToolOutput, ToolProvider
from dcaf_like.domain import PartKind, PlatformContext, Session, Trusted, Verdict
from dcaf_like.extras import missing
from dcaf_like.server.auth import caller_of

logger = logging.getLogger("dcaf_like.toolsets.mcp")

GATED = (
    "{name} needs a human's approval, which an MCP call cannot carry; it was not run. Ask the agent "
    "over its HelpDesk API (POST /api/chat): it proposes the call there, and runs it once approved."
)


class MCPEndpoint:
    """The MCP server of one agent: :attr:`asgi` serves requests while :meth:`running` is entered."""

    def __init__(self, agent: object) -> None:
        try:
            from mcp.server import Server
            from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
        except ImportError as exc:
            raise missing("serving MCP needs the MCP SDK", "mcp", exc) from exc
        if not isinstance(agent, ToolProvider):
            raise TypeError(f"only an Agent's tools can be served over MCP, not a {type(agent).__name__}'s")
        self.agent: ToolProvider = agent
        server = Server(
            agent.name,
            description=agent.description or None,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        # Stateless: every request stands alone, so any worker can answer it. Host and Origin (DNS
        # rebinding, which the MCP specification asks servers to refuse) are checked for /mcp by the
        # app's perimeter like every route, so the SDK's own TransportSecuritySettings stay off: one
        # list of allowed hosts and origins, and one JSON error for a refusal.
        self._manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True)
        self.asgi = StreamableHTTPASGIApp(self._manager)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self._manager.run():
            yield

    async def _open_tools(self) -> dict[str, ExecutableTool]:
        """The agent's tools that may run without approval (its toolsets loaded first)."""
        return {t.name: t for t in await self.agent.atools() if not t.requires_approval}

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        from mcp_types import ListToolsResult, Tool

        listed = [
            Tool(name=t.name, description=t.description, input_schema=dict(t.spec().input_schema))
            for t in (await self._open_tools()).values()
        ]
        return ListToolsResult(tools=listed)

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        name: str = params.name
        every = {t.name: t for t in await self.agent.atools()}
        tool = every.get(name)
        if tool is None:
            return _result(f"unknown tool {name!r}", error=True)
        if tool.requires_approval:
            return _result(GATED.format(name=name), error=True)
        try:
            arguments = tool.validate(params.arguments or {})
        except InvalidToolArguments as exc:
            return _result(str(exc), error=True)
        context = PlatformContext({})
        # Who is asking is the API key the server checked on this HTTP request (None without keys),
        # as on every other entrance; never something in the MCP message.
        request = getattr(ctx, "request", None)
        identity = caller_of(request).identity if request is not None else None
        trusted = Trusted(identity, self.agent.deps)
        risk = getattr(tool, "risk", None)  # optional on a tool, as its timeout: an MCP tool declares none
        decision = self.agent.approval_policy.decide(
            name, arguments, tool_requires_approval=False, context=context, trusted=trusted, risk=risk
        )
        if decision.verdict is Verdict.DENY:
            return _result(f"{name} was not run: denied by policy: {decision.reason}", error=True)
        if decision.verdict is not Verdict.ALLOW:
            return _result(GATED.format(name=name), error=True)
        call_id = f"mcp_{uuid.uuid4().hex[:24]}"
        logger.info("MCP call %s ran %s", call_id, name, extra={"call_id": call_id, "tool": name})
        try:
            tool_context = ToolContext(call_id, call_id, context, Session(), identity, trusted.deps)
            output = await tool.ainvoke(arguments, tool_context)
        except Exception as exc:
            return _result(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, error=True)
        return _result(output, error=False)


def _result(output: str | ToolOutput, *, error: bool) -> Any:
    """A tool's output as MCP content: its text, then its images (``ImageContent``) and files (an
    ``EmbeddedResource`` blob); an image by URL is named in the text, as a link, never fetched."""
    from mcp_types import BlobResourceContents, CallToolResult, EmbeddedResource, ImageContent, TextContent

    if isinstance(output, str):
        return CallToolResult(content=[TextContent(type="text", text=output)], is_error=error)
    content: list[Any] = [TextContent(type="text", text=output.text)] if output.text else []
    for part in output.attachments:
        if part.data is None:
            content.append(TextContent(type="text", text=f"[image at {part.url}]"))
        elif part.kind is PartKind.IMAGE:
            content.append(ImageContent(type="image", data=part.data, mime_type=part.media_type))
        else:
            uri = f"attachment:{quote(part.name or 'file')}"
            blob = BlobResourceContents(uri=uri, mime_type=part.media_type, blob=part.data)
            content.append(EmbeddedResource(type="resource", resource=blob))
    return CallToolResult(content=content, is_error=error)
