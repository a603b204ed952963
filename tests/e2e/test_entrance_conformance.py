"""One table of properties, run against every entrance that can take a message or a decision (issue 34,
ADR 30: entrances parse, use cases decide): HelpDesk chat and stream, A2A JSON-RPC and A2A REST, on a
live server with API keys.

For each entrance: a replayed approval is refused and the tool runs once; a non-finite number is
refused naming the field; an id no conversation can have is refused; a key without ``approve`` is
refused and the refusal audited; and after every refusal the conversation is as it was.
(tests/e2e/test_ownership_http.py holds the ownership row, over every route of the app.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user
from test_ownership_http import BOB, CAROL, KEYS, OPS, a2a_message, deleting, key

from dcaf_like import Agent, InMemoryConversationRepository
from dcaf_like.testing import FakeRuntime


@dataclass(frozen=True)
class Answer:
    """What an entrance answered, in one vocabulary: refused or not, and the words of the refusal."""

    refused: bool
    status: int
    text: str


@dataclass(frozen=True)
class Entrance:
    name: str
    #: Send `data` (HelpDesk ``data``: decisions, session, context) and `text` to a conversation.
    send: Callable[[httpx.Client, str, str | None, dict[str, Any], str], Answer]


def _helpdesk(route: str) -> Callable[[httpx.Client, str, str | None, dict[str, Any], str], Answer]:
    def send(
        server: httpx.Client, api_key: str, conversation_id: str | None, data: dict[str, Any], text: str
    ) -> Answer:
        ids = {"conversation_id": conversation_id} if conversation_id else {}
        fields = {k: v for k, v in data.items() if k != "platform_context"}
        message = user(text, **ids, **fields)
        if "platform_context" in data:  # a HelpDesk message carries it beside its data
            message["platform_context"] = data["platform_context"]
        body = json.dumps({"messages": [message]}, allow_nan=True)
        headers = {**key(api_key), "Content-Type": "application/json"}
        response = server.post(route, headers=headers, content=body)
        response.read()
        if route.endswith("stream") and response.status_code == 200:
            last = json.loads(response.text.strip().splitlines()[-1])
            refused = last["type"] == "error"
            return Answer(refused, last.get("status", 200), json.dumps(last))
        return Answer(response.status_code >= 400, response.status_code, response.text)

    return send


def _a2a_rpc(
    server: httpx.Client, api_key: str, conversation_id: str | None, data: dict[str, Any], text: str
) -> Answer:
    params = a2a_message(data, **({"context_id": conversation_id} if conversation_id else {}))
    if text:
        params["message"]["parts"].insert(0, {"kind": "text", "text": text})
    payload = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}
    body = json.dumps(payload, allow_nan=True)
    response = server.post("/a2a", headers={**key(api_key), "Content-Type": "application/json"}, content=body)
    answer = response.json()
    return Answer("error" in answer, response.status_code, json.dumps(answer))


def _a2a_rest(
    server: httpx.Client, api_key: str, conversation_id: str | None, data: dict[str, Any], text: str
) -> Answer:
    body: dict[str, Any] = {"data": data, **({"context_id": conversation_id} if conversation_id else {})}
    if text:
        body["message"] = text
    content = json.dumps(body, allow_nan=True)
    response = server.post(
        "/a2a/tasks/send", headers={**key(api_key), "Content-Type": "application/json"}, content=content
    )
    return Answer(response.status_code >= 400, response.status_code, response.text)


ENTRANCES = [
    Entrance("helpdesk chat", _helpdesk("/api/chat")),
    Entrance("helpdesk stream", _helpdesk("/api/chat-stream")),
    Entrance("a2a json-rpc", _a2a_rpc),
    Entrance("a2a rest", _a2a_rest),
]


@pytest.fixture
def agent(cluster: Any) -> Agent:
    return Agent(
        tools=cluster.tools(),
        runtime=FakeRuntime([deleting] * 50),
        repository=InMemoryConversationRepository(),
    )


@pytest.fixture
def server(start_server: Any, agent: Agent) -> httpx.Client:
    client: httpx.Client = start_server(agent, api_keys=KEYS, a2a=True)
    return client


def pending_of(server: httpx.Client, api_key: str = BOB) -> tuple[str, dict[str, Any]]:
    proposed = server.post("/api/chat", headers=key(api_key), json={"messages": [user("delete web-2")]})
    assert proposed.status_code == 200, proposed.text
    (pending,) = proposed.json()["data"]["tool_calls"]
    return proposed.json()["data"]["conversation_id"], pending


def stored(server: httpx.Client, conversation_id: str) -> dict[str, Any]:
    record: dict[str, Any] = server.get(f"/api/conversations/{conversation_id}", headers=key(OPS)).json()
    return record


@pytest.mark.parametrize("entrance", ENTRANCES, ids=lambda e: e.name)
def test_a_replayed_approval_is_refused_and_the_tool_runs_once(server, cluster, entrance):
    conversation_id, pending = pending_of(server)
    decision = {"tool_calls": [approve(pending)]}

    first = entrance.send(server, BOB, conversation_id, decision, "")
    before = stored(server, conversation_id)
    replay = entrance.send(server, BOB, conversation_id, decision, "")

    assert not first.refused, first.text
    assert replay.refused, replay.text
    assert cluster.deleted == [("default", "web-2")]
    assert stored(server, conversation_id)["version"] == before["version"]


@pytest.mark.parametrize("entrance", ENTRANCES, ids=lambda e: e.name)
@pytest.mark.parametrize("number", [float("nan"), float("inf")], ids=["NaN", "Infinity"])
def test_a_number_that_cannot_be_stored_is_refused_naming_its_field_and_changes_nothing(
    server, cluster, entrance, number
):
    conversation_id, pending = pending_of(server)
    before = stored(server, conversation_id)

    answer = entrance.send(
        server,
        BOB,
        conversation_id,
        {"tool_calls": [approve(pending)], "platform_context": {"limit": number}},
        "",
    )

    assert answer.refused, answer.text
    assert "platform_context.limit" in answer.text
    assert cluster.deleted == []
    assert stored(server, conversation_id) == before


@pytest.mark.parametrize("entrance", ENTRANCES, ids=lambda e: e.name)
@pytest.mark.parametrize("bad_id", ["x" * 3000, "conv with spaces", 'conv "quoted"'])
def test_an_id_no_conversation_can_have_is_refused_and_nothing_is_stored(server, agent, entrance, bad_id):
    answer = entrance.send(server, BOB, bad_id, {}, "hello")

    assert answer.refused, answer.text
    assert answer.status in (200, 404, 422), answer.text  # JSON-RPC answers its errors in a 200
    assert agent.repository.list_ids(10) == []


@pytest.mark.parametrize("entrance", ENTRANCES, ids=lambda e: e.name)
def test_a_key_without_approve_is_refused_audited_and_changes_nothing(server, cluster, entrance):
    conversation_id, pending = pending_of(server, CAROL)
    before = stored(server, conversation_id)

    answer = entrance.send(server, CAROL, conversation_id, {"tool_calls": [approve(pending)]}, "")

    assert answer.refused, answer.text
    assert "approve" in answer.text
    assert cluster.deleted == []
    assert stored(server, conversation_id) == before
    trail = server.get("/api/audit", headers=key(OPS), params={"conversation_id": conversation_id}).json()
    assert [(r["outcome"], r["call_id"], r["decided_by"]) for r in trail["records"]] == [
        ("refused", pending["id"], "carol")
    ]
