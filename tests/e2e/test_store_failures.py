"""A store that is down or fails mid-turn: a clear 503, nothing half-written, nothing run twice."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from _helpdesk import approve, user
from _proxy import CuttableProxy

from dcaf_like import Agent, ModelResponse, RedisConversationRepository
from dcaf_like.stores._codec import conversation_to_dict
from dcaf_like.testing import FakeRuntime, tool_call


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def proxy(redis_url: str) -> Iterator[CuttableProxy]:
    target = urlsplit(redis_url)
    proxy = CuttableProxy(target.hostname or "127.0.0.1", target.port or 6379)
    yield proxy
    proxy.close()


@pytest.fixture
def proxied_store(proxy: CuttableProxy, redis_url: str, redis_prefix: str) -> RedisConversationRepository:
    db = urlsplit(redis_url).path or "/0"
    return RedisConversationRepository(
        f"redis://127.0.0.1:{proxy.port}{db}", prefix=redis_prefix, socket_timeout=2
    )


@pytest.mark.parametrize("route", ["/api/chat", "/api/chat-stream"])
def test_an_unreachable_redis_is_a_503_that_names_it_and_not_its_password(start_server, cluster, route):
    port = closed_port()
    agent = Agent(
        tools=cluster.tools(),
        runtime=FakeRuntime(["never reached"]),
        repository=f"redis://:hunter2@127.0.0.1:{port}/0",
    )
    client = start_server(agent)

    # A known conversation is read first: the turn fails before anything runs or streams.
    response = client.post(route, json={"messages": [user("hello", conversation_id="conv-1")]})

    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "store_unavailable"
    assert f"redis store at 127.0.0.1:{port}/0" in error["message"]
    assert "hunter2" not in response.text


def test_an_unwritable_sqlite_path_is_a_503_that_names_the_file(start_server, cluster, tmp_path: Path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the store's directory should be")
    agent = Agent(
        tools=cluster.tools(),
        runtime=FakeRuntime(["never reached"]),
        repository=f"sqlite:///{blocker / 'conversations.db'}",
    )

    response = start_server(agent).post("/api/chat", json={"messages": [user("hello")]})

    assert response.status_code == 503
    assert str(blocker) in response.json()["error"]["message"]


def test_redis_failing_mid_turn_keeps_the_users_message_and_nothing_of_the_lost_answer(
    start_server, cluster, proxy: CuttableProxy, proxied_store: RedisConversationRepository
):
    def answer_then_lose_the_store(_request) -> ModelResponse:
        proxy.cut()
        return ModelResponse(text="this answer is never stored")

    runtime = FakeRuntime(["Hello.", answer_then_lose_the_store, "Back again."])
    agent = Agent(tools=cluster.tools(), runtime=runtime, repository=proxied_store)
    client = start_server(agent)
    first = client.post("/api/chat", json={"messages": [user("hi")]}).json()
    conversation_id = first["data"]["conversation_id"]
    before = conversation_to_dict(agent.repository.get(conversation_id))  # type: ignore[arg-type]

    failed = client.post("/api/chat", json={"messages": [user("more", conversation_id=conversation_id)]})
    proxy.restore()

    assert failed.status_code == 503
    assert failed.json()["error"]["code"] == "store_unavailable"
    after = agent.repository.get(conversation_id)
    assert after is not None
    # The user's message was saved as the turn started (docs/runs.md, "A crash keeps the user's
    # message"); the answer the model gave after the store went away is not there, nor anything else.
    kept = conversation_to_dict(after)
    assert [(m["role"], m["text"]) for m in kept["messages"]] == [
        *((m["role"], m["text"]) for m in before["messages"]),
        ("user", "more"),
    ]
    assert kept["tool_calls"] == before["tool_calls"]
    retried = client.post("/api/chat", json={"messages": [user("more", conversation_id=conversation_id)]})
    assert retried.status_code == 200
    assert retried.json()["content"] == "Back again."


def test_a_store_lost_while_an_approved_tool_runs_never_runs_it_again(
    start_server, proxy: CuttableProxy, proxied_store: RedisConversationRepository
):
    from dcaf_like import tool

    runs: list[str] = []

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        runs.append(name)
        proxy.cut()  # the store goes away while the tool runs
        return f"deleted {name}"

    runtime = FakeRuntime([tool_call("delete_pod", name="web-1"), "Deleted."])
    agent = Agent(tools=[delete_pod], runtime=runtime, repository=proxied_store)
    client = start_server(agent)
    proposed = client.post("/api/chat", json={"messages": [user("delete web-1")]}).json()
    conversation_id = proposed["data"]["conversation_id"]
    (pending,) = proposed["data"]["tool_calls"]
    decision = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}

    lost = client.post("/api/chat", json=decision)
    proxy.restore()
    again = client.post("/api/chat", json=decision)

    assert lost.status_code == 503
    assert runs == ["web-1"]
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "tool_call_already_decided"
    assert runs == ["web-1"]
    stored = agent.repository.get(conversation_id)
    assert stored is not None
    assert stored.tool_calls[pending["id"]].status.value == "approved"
