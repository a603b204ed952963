"""The A2A task use case (application/tasks.py): the same rules as every entrance, and one retry policy
for its changes."""

from __future__ import annotations

import asyncio

import pytest

from dcaf_like import ConcurrencyConflict, InMemoryConversationRepository
from dcaf_like.application.tasks import (
    CANCELED,
    TaskLifecycle,
    TaskNotFound,
    TaskState,
    TaskWorking,
    changed,
)
from dcaf_like.domain import Conversation, Identity, ToolInput
from dcaf_like.testing import ManualClock

BOB = Identity("bob", frozenset({"chat", "approve", "read"}))
ALICE = Identity("alice", frozenset({"chat", "approve", "read"}))


class LosingRaces(InMemoryConversationRepository):
    """A store whose next `losses` saves lose a race to another writer."""

    def __init__(self, losses: int) -> None:
        super().__init__()
        self.losses = losses

    async def asave(self, conversation, expected_version):
        if self.losses:
            self.losses -= 1
            raise ConcurrencyConflict(conversation.id, expected_version, expected_version + 1)
        return await super().asave(conversation, expected_version)


def waiting_task(store, clock, approval_ttl=None) -> tuple[TaskLifecycle, str]:
    """Bob's task in conv_t, waiting for a decision on delete_pod."""
    tasks = TaskLifecycle(store, clock)
    task_id = asyncio.run(tasks.open("conv_t", "delete web-2", (), identity=BOB))
    conversation = store.get("conv_t")
    expected = conversation.version
    conversation.add_assistant_message("I will delete it.", at=clock())
    conversation.request_tool_call(
        "delete_pod",
        ToolInput.of({"name": "web-2"}),
        requires_approval=True,
        approval_ttl=approval_ttl,
        at=clock(),
    )
    store.save(conversation, expected)
    return tasks, task_id


def test_a_change_that_loses_a_race_is_made_again_on_what_the_winner_saved():
    store = LosingRaces(losses=2)
    store.save(Conversation.start("conv_r", at=0.0), 0)
    seen = []

    def rename(conversation):
        seen.append(conversation.version)
        conversation.add_user_message("hello", at=1.0)
        return conversation

    saved = asyncio.run(changed(store, "conv_r", rename))

    assert len(seen) == 3
    assert [m.text for m in saved.messages] == ["hello"]
    assert [m.text for m in store.get("conv_r").messages] == ["hello"]


def test_a_change_that_keeps_losing_is_refused_as_a_conflict_and_writes_nothing():
    store = LosingRaces(losses=3)
    store.save(Conversation.start("conv_r", at=0.0), 0)

    def add(conversation):
        conversation.add_user_message("hello", at=1.0)
        return conversation

    with pytest.raises(ConcurrencyConflict):
        asyncio.run(changed(store, "conv_r", add))
    assert store.get("conv_r").messages == []


def test_a_new_message_in_a_context_whose_call_expired_rejects_it_by_the_agents_clock():
    clock = ManualClock()
    store = InMemoryConversationRepository()
    tasks, _ = waiting_task(store, clock, approval_ttl=60)
    clock.advance(61)

    asyncio.run(tasks.open("conv_t", "and now?", (), identity=BOB))

    [call] = store.get("conv_t").tool_calls.values()
    assert (call.status.value, call.decided_by, call.decided_at) == ("rejected", "system", clock.now)


def test_a_waiting_task_is_canceled_by_its_owner_only():
    clock = ManualClock()
    store = InMemoryConversationRepository()
    tasks, task_id = waiting_task(store, clock)

    with pytest.raises(TaskNotFound):
        asyncio.run(tasks.cancel_waiting(task_id, identity=ALICE))
    view = asyncio.run(tasks.cancel_waiting(task_id, identity=BOB))

    assert (view.state, view.note) == (TaskState.CANCELED, CANCELED)
    [call] = store.get("conv_t").tool_calls.values()
    assert (call.status.value, call.decided_by) == ("rejected", "bob")


def test_a_working_task_is_not_canceled_here_but_handed_to_the_cancel_use_case():
    store = InMemoryConversationRepository()
    tasks = TaskLifecycle(store, ManualClock())
    task_id = asyncio.run(tasks.open("conv_w", "summarize the incident", (), identity=BOB))

    with pytest.raises(TaskWorking):
        asyncio.run(tasks.cancel_waiting(task_id, identity=BOB))
    assert asyncio.run(tasks.get(task_id, identity=BOB)).state is TaskState.WORKING
