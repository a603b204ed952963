"""The Redis store's hot path: a turn on an existing conversation costs two round trips (read, save)."""

from __future__ import annotations

from typing import Any

import pytest

from dcaf_like import Agent, RedisConversationRepository, ToolDecision
from dcaf_like.testing import FakeRuntime, tool_call

redis = pytest.importorskip("redis", reason="the redis extra is not installed")


class CountingRedis(redis.Redis):  # type: ignore[misc,name-defined]
    commands: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands.append(str(args[0]))
        return super().execute_command(*args, **options)


class CountingAsyncRedis(redis.asyncio.Redis):  # type: ignore[misc,name-defined]
    commands: list[str]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands.append(str(args[0]))
        return await super().execute_command(*args, **options)


def test_a_sync_turn_reads_once_and_saves_its_message_then_its_outcome(redis_url, redis_prefix, cluster):
    client = CountingRedis.from_url(redis_url)
    client.commands = []
    store = RedisConversationRepository(redis_url, prefix=redis_prefix, client=client)
    agent = Agent(tools=cluster.tools(), runtime=FakeRuntime(["one", "two"]), repository=store)
    first = agent.run("hello")
    client.commands.clear()

    agent.run("again", conversation_id=first.conversation_id)

    # the read script; the save of the user's message as the turn starts (docs/runs.md, "A crash keeps
    # the user's message"); the save at its end
    assert client.commands == ["EVALSHA", "EVALSHA", "EVALSHA"]
    client.close()


async def test_an_async_turn_reads_once_saves_its_message_then_its_outcome_and_an_approval_adds_its_claim(
    redis_url, redis_prefix, cluster
):
    client = CountingAsyncRedis.from_url(redis_url)
    client.commands = []
    store = RedisConversationRepository(redis_url, prefix=redis_prefix, async_client=client)
    runtime = FakeRuntime(["one", tool_call("delete_pod", name="web-2"), "deleted"])
    agent = Agent(tools=cluster.tools(), runtime=runtime, repository=store)
    first = await agent.arun("hello")
    client.commands.clear()

    proposed = await agent.arun("delete web-2", conversation_id=first.conversation_id)
    turn = list(client.commands)
    client.commands.clear()
    await agent.adecide(first.conversation_id, [ToolDecision.approved(proposed.pending_tool_calls[0].id)])

    assert turn == ["EVALSHA", "EVALSHA", "EVALSHA"]  # read, the message saved at the start, the save
    # read, the audit chain's head (ADR 34: once per repository, then known from its own writes),
    # claim the approval (with its lease and the decision's record), ask whether the run was cancelled
    # before calling the model again (docs/runs.md: every step but the first), save the outcome
    assert client.commands == ["EVALSHA", "HMGET", "EVALSHA", "GET", "EVALSHA"]
    assert cluster.deleted == [("default", "web-2")]
    await client.aclose()
    store.close()


async def test_an_async_call_to_a_redis_that_never_answers_gives_up_after_the_socket_timeout():
    """The asyncio client has no socket timeout of redis-py's (a task per write): each call is bounded
    by the store instead, and running out of time is a StoreUnavailable naming the store."""
    import asyncio

    from dcaf_like.application.errors import StoreUnavailable

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # takes every command, answers none
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = RedisConversationRepository(f"redis://127.0.0.1:{port}/0", socket_timeout=0.2)
    try:
        with pytest.raises(
            StoreUnavailable, match=rf"redis store at 127.0.0.1:{port}/0: no answer within 0.2 s"
        ):
            await store.aget("conv-1")
    finally:
        await store.aclose()
        server.close()


def test_a_script_running_a_loop_per_call_leaves_no_connection_open_when_each_loop_ends(
    redis_url, redis_prefix
):
    import asyncio

    store = RedisConversationRepository(redis_url, prefix=redis_prefix)
    clients: list[Any] = []
    make = store._redis_async.Redis.from_url

    def recorded(*args: Any, **kwargs: Any) -> Any:
        clients.append(make(*args, **kwargs))
        return clients[-1]

    store._redis_async = type(
        "RedisAsyncio", (), {"Redis": type("Redis", (), {"from_url": staticmethod(recorded)})}
    )

    for n in range(3):  # asyncio.run(agent.arun(...)) per request, never closing the store
        assert asyncio.run(store.aget(f"conv_{n}")) is None
        assert len(clients) == n + 1
        connections = clients[-1].connection_pool._available_connections  # what the call used
        assert connections
        assert not any(c.is_connected for c in connections)  # closed as its loop ended
    store.close()
