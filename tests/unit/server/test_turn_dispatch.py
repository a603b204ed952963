"""The turn routes' fast path (dcaf_like/server/_turn_dispatch.py, ADR 17): Starlette dispatching them
answers exactly what FastAPI's routes answer, which stay in the OpenAPI document."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dcaf_like import Agent, create_app, tool
from dcaf_like.server._turn_dispatch import TurnRoute
from dcaf_like.server.chat import TURN_PATHS
from dcaf_like.testing import FakeRuntime, tool_call, tool_calls


@tool
def delete_pod(name: str) -> str:
    """Delete a pod."""
    return f"{name} deleted"


def agent() -> Agent:
    script = [tool_calls(tool_call("delete_pod", name="web-1")), "deleted.", "hello.", "streamed."]
    return Agent(tools=[delete_pod], runtime=FakeRuntime(script))


def plain(app: Any) -> Any:
    """`app` without the fast path: FastAPI's own routes answer the turns."""
    app.router.routes[:] = [
        r for r in app.router.routes if not (type(r) is TurnRoute and r.path in TURN_PATHS)
    ]
    return app


_IDS = re.compile(r"conv_[0-9a-f]{24}|tc_[0-9a-f]{24}|\b[0-9a-f]{32}\b")


def scrubbed(value: Any) -> Any:
    """An answer without what differs between two runs: minted ids, timings, a stream line's time."""
    if isinstance(value, dict):
        return {k: scrubbed(v) for k, v in value.items() if k not in ("timings_ms", "ts", "execution_time")}
    if isinstance(value, list):
        return [scrubbed(v) for v in value]
    if isinstance(value, str):
        return _IDS.sub("<id>", value)
    return value


def answers(client: TestClient) -> list[tuple[int, str, Any]]:
    """A conversation's turns and refusals, as (status, content type, body) each."""
    seen: list[tuple[int, str, Any]] = []

    def keep(response: Any) -> Any:
        kind = response.headers.get("content-type", "")
        if "ndjson" in kind:
            body: Any = [json.loads(line) for line in response.text.splitlines()]
        elif "json" in kind:
            body = response.json()
        else:
            body = response.text
        seen.append((response.status_code, kind, scrubbed(body)))
        return body

    first = keep(client.post("/api/chat", json={"messages": [{"role": "user", "content": "delete web-1"}]}))
    conversation_id = first["data"]["conversation_id"]
    [pending] = first["data"]["tool_calls"]
    decision = {**pending, "execute": True}
    data = {"conversation_id": conversation_id, "tool_calls": [decision]}
    keep(client.post("/api/chat", json={"messages": [{"role": "user", "content": "", "data": data}]}))
    keep(client.post("/api/chat", json={"messages": [{"role": "user", "content": "", "data": data}]}))
    again = {"conversation_id": conversation_id}
    keep(client.post("/api/chat", json={"messages": [{"role": "user", "content": "hi", "data": again}]}))
    keep(
        client.post("/api/chat-stream", json={"messages": [{"role": "user", "content": "hi", "data": again}]})
    )
    keep(client.post("/api/chat", json={"messages": [{"role": "assistant", "content": "hi"}]}))
    keep(client.post("/api/chat", json={"messages": "not a list"}))
    keep(client.post("/api/chat", content=b"{not json", headers={"Content-Type": "application/json"}))
    keep(client.get("/api/chat"))
    keep(client.get("/api/chat-stream"))
    return seen


def test_the_fast_path_is_in_place_first():
    app = create_app(agent())

    first = app.router.routes[: len(TURN_PATHS)]

    assert {type(r) for r in first} == {TurnRoute}
    assert {r.path for r in first} == TURN_PATHS  # type: ignore[attr-defined]


def test_the_turn_routes_answer_what_fastapis_routes_answer():
    with TestClient(create_app(agent())) as fast, TestClient(plain(create_app(agent()))) as slow:
        got, expected = answers(fast), answers(slow)

    assert got == expected
    assert [status for status, _, _ in got] == [200, 200, 409, 200, 200, 400, 422, 422, 405, 405]


@pytest.mark.parametrize("path", sorted(TURN_PATHS))
def test_the_openapi_document_still_describes_the_turn_routes(path: str):
    with TestClient(create_app(agent())) as fast, TestClient(plain(create_app(agent()))) as slow:
        document, expected = fast.get("/openapi.json").json(), slow.get("/openapi.json").json()

    assert document == expected
    assert "post" in document["paths"][path]
