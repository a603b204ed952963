"""A page of the conversation list on a real Redis holding 600 conversations: one pipelined read, so a
page of 500 never asks the client's pool for more connections than it has (it answered 503
"Too many connections" past 100 stored conversations, issue 26)."""

from __future__ import annotations

import pytest
from _server import serving

from dcaf_like import Agent, RedisConversationRepository, create_app
from dcaf_like.domain import Conversation
from dcaf_like.testing import FakeRuntime

redis = pytest.importorskip("redis", reason="the redis extra is not installed")

STORED = 600


@pytest.fixture
def stored(redis_url: str, redis_prefix: str) -> list[str]:
    """600 conversations under this test's prefix, oldest first."""
    store = RedisConversationRepository(redis_url, prefix=redis_prefix, namespace="ops")
    ids = []
    for n in range(STORED):
        conversation = Conversation.start(at=1_000_000.0 + n)
        conversation.add_user_message(f"question {n}", at=1_000_000.0 + n)
        store.clock = lambda n=n: 1_000_000.0 + n  # type: ignore[misc]
        store.save(conversation, 0)
        ids.append(conversation.id)
    store.close()
    return ids


def test_listing_500_of_600_over_http_answers_every_one_newest_first(
    stored: list[str], redis_url: str, redis_prefix: str
) -> None:
    # The default asyncio pool opens at most 100 connections: a read per id at once needed 500.
    store = RedisConversationRepository(redis_url, prefix=redis_prefix, namespace="ops")
    agent = Agent(tools=[], runtime=FakeRuntime([]), name="ops", repository=store)

    with serving(create_app(agent)) as client:
        page = client.get("/api/conversations", params={"limit": 500})
        small = client.get("/api/conversations", params={"limit": 3})

    assert page.status_code == 200, page.text
    listed = [c["id"] for c in page.json()["conversations"]]
    assert listed == stored[::-1][:500]
    assert page.json()["conversations"][0]["last_message"] == f"question {STORED - 1}"
    assert [c["id"] for c in small.json()["conversations"]] == listed[:3]
    store.close()


async def test_a_page_read_directly_uses_one_connection_and_keeps_the_order(
    stored: list[str], redis_url: str, redis_prefix: str
) -> None:
    one_connection = redis.asyncio.Redis.from_url(redis_url, max_connections=1)
    store = RedisConversationRepository(
        redis_url, prefix=redis_prefix, namespace="ops", async_client=one_connection
    )
    store.delete(stored[10])
    ids = store.list_ids(500)
    asked = [*ids[:5], stored[10], *ids[5:]]

    page = store.get_many(asked)
    async_page = await store.aget_many(asked)

    assert len(ids) == 500
    assert [c.id if c else None for c in page] == [*ids[:5], None, *ids[5:]]
    assert [c.id if c else None for c in async_page] == [*ids[:5], None, *ids[5:]]
    assert page[0] is not None
    assert page[0].messages[0].text == f"question {STORED - 1}"
    await one_connection.aclose()
    store.close()
