"""A store with a `ttl` forgets a finished conversation that long after its last save, and keeps one
waiting for approval until its approval window closes (issue 26): SQLite and DynamoDB judge it when
they read, Redis by the expiry it sets on the conversation."""

from __future__ import annotations

import uuid

import pytest

from dcaf_like import ConversationRepository, DynamoDBConversationRepository, SqliteConversationRepository
from dcaf_like.domain import Conversation, DeciderKind, ToolInput

DAY = 86_400.0
T0 = 1_700_000_000.0


def conversation(*, window: float | None = None) -> Conversation:
    c = Conversation.start(at=T0)
    c.add_user_message("delete web-1", at=T0)
    if window is not None:
        c.add_assistant_message("", at=T0)
        c.request_tool_call(
            "delete_pod", ToolInput.of({"name": "web-1"}), requires_approval=True, approval_ttl=window, at=T0
        )
    return c


@pytest.fixture(params=["sqlite", "dynamodb"])
def store_and_clock(request: pytest.FixtureRequest, tmp_path) -> tuple[ConversationRepository, list[float]]:
    clock = [T0]
    if request.param == "sqlite":
        return SqliteConversationRepository(tmp_path / "c.db", ttl=DAY, clock=lambda: clock[0]), clock
    endpoint = request.getfixturevalue("dynamodb_endpoint")
    store = DynamoDBConversationRepository(
        f"retention-{uuid.uuid4().hex[:8]}", region="eu-west-1", endpoint_url=endpoint, ttl=DAY,
        clock=lambda: clock[0],
    )  # fmt: skip
    store.create_table()
    return store, clock


def test_a_waiting_conversation_outlives_the_ttl_until_its_window_closes(store_and_clock) -> None:
    store, clock = store_and_clock
    finished, waiting = conversation(), conversation(window=3 * DAY)
    store.save(finished, 0)
    store.save(waiting, 0)

    clock[0] = T0 + 2 * DAY
    after_two_days = store.get(finished.id), store.get(waiting.id), store.list_ids()
    clock[0] = T0 + 3 * DAY + 1
    after_the_window = store.get(waiting.id)

    assert after_two_days[0] is None
    assert after_two_days[1] is not None
    assert after_two_days[2] == [waiting.id]
    assert after_the_window is None


def test_a_conversation_waiting_on_a_question_outlives_the_ttl_until_its_window_closes(
    store_and_clock,
) -> None:
    store, clock = store_and_clock
    asking = conversation()
    asking.add_assistant_message("", at=T0)
    call = asking.request_tool_call("scale", ToolInput.of({}), requires_approval=False, at=T0)
    asking.approve_tool_call(call.id.value, by="policy", kind=DeciderKind.POLICY, at=T0)
    asking.ask_question(call.id.value, "confirmation", "Scale web to zero?", ttl=3 * DAY, at=T0)
    store.save(asking, 0)

    clock[0] = T0 + 2 * DAY
    after_two_days = store.get(asking.id)
    clock[0] = T0 + 3 * DAY + 1
    after_the_window = store.get(asking.id)

    assert after_two_days is not None
    assert after_the_window is None


def test_redis_expires_a_waiting_conversation_with_its_window_not_the_ttl(redis_url, redis_prefix) -> None:
    from dcaf_like import RedisConversationRepository

    store = RedisConversationRepository(redis_url, prefix=redis_prefix, ttl=DAY)
    finished, waiting = conversation(), conversation(window=3 * DAY)
    store.clock = lambda: T0  # type: ignore[method-assign]
    store.save(finished, 0)
    store.save(waiting, 0)

    ttl_of = {c.id: store._sync.pttl(store._parts(c.id)[0]) / 1000 for c in (finished, waiting)}

    assert 0 < ttl_of[finished.id] <= DAY
    assert 2 * DAY < ttl_of[waiting.id] <= 3 * DAY
    records = [store._sync.pttl(key) / 1000 for key in store._parts(waiting.id)[1:]]
    assert all(2 * DAY < ttl <= 3 * DAY for ttl in records)  # its messages and calls expire with it
    store.close()
