"""The negative control of the audit: a HelpDesk-protocol server built as the seed's public design
describes it, with its gate trusting the client. It keeps no conversations; a user message makes its
scripted model propose ``audit_canary``, and a message that sends a call back with ``execute: true``
runs that call, with the name and input the client sent, as the seed's approval flow reads
("User clicks Approve: tool_calls[execute: true]; Execute tool"). Client ``cmds`` with
``execute: true`` run the same way. Every run appends a line to the ledger file.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

PROPOSED = {"target": "web-2", "count": 1, "labels": {"team": "audit"}}


def control_app(ledger: Path) -> Starlette:
    def run(name: str, arguments: Any) -> dict[str, Any]:
        with ledger.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"tool": name, "arguments": arguments}) + "\n")
        return {"output": f"{name} ran"}

    def answer(body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        last = body["messages"][-1]
        data = last.get("data") or {}
        executed = [
            {
                "id": c.get("id"),
                "name": c.get("name"),
                "input": c.get("input"),
                **run(str(c.get("name")), c.get("input")),
            }
            for c in data.get("tool_calls") or []
            if isinstance(c, dict) and c.get("execute")
        ]
        executed_cmds = [
            {"command": c.get("command"), **run("cmd", c.get("command"))}
            for c in data.get("cmds") or []
            if isinstance(c, dict) and c.get("execute")
        ]
        pending = []
        if not executed and not executed_cmds and last.get("content"):
            pending = [
                {
                    "id": "tc_" + secrets.token_hex(12),
                    "name": "audit_canary",
                    "input": PROPOSED,
                    "execute": False,
                    "tool_description": "A harmless audit tool.",
                }
            ]
        message = {
            "role": "assistant",
            "content": "Done." if executed else "This requires your approval.",
            "data": {
                "conversation_id": data.get("conversation_id") or "conv_" + secrets.token_hex(12),
                "tool_calls": pending,
                "executed_tool_calls": executed,
                "cmds": [],
                "executed_cmds": executed_cmds,
            },
        }
        return message, executed

    async def chat(request: Request) -> Response:
        message, _ = answer(await request.json())
        return JSONResponse(message)

    async def chat_stream(request: Request) -> Response:
        message, executed = answer(await request.json())

        def events() -> Any:
            if executed:
                yield json.dumps({"type": "executed_tool_calls", "executed_tool_calls": executed}) + "\n"
            if message["data"]["tool_calls"]:
                yield json.dumps({"type": "tool_calls", "tool_calls": message["data"]["tool_calls"]}) + "\n"
            yield json.dumps({"type": "text_delta", "text": message["content"]}) + "\n"
            yield json.dumps({"type": "done"}) + "\n"

        return StreamingResponse(events(), media_type="application/x-ndjson")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/api/chat", chat, methods=["POST"]),
            Route("/api/chat-stream", chat_stream, methods=["POST"]),
            Route("/health", health),
        ]
    )
