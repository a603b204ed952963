"""A store declares what it does besides keeping conversations (application/ports/store.py): a store of
one's own that implements only the core (``get`` and ``save``) serves turns and approvals, and an
action that needs a capability it lacks is refused with MissingCapability naming it (docs/stores.md,
"Writing a store")."""

from __future__ import annotations

import asyncio

import pytest

from dcaf_like import Agent, ConcurrencyConflict, ConversationRepository, MissingCapability, tool
from dcaf_like.application.cancel import CancelRun
from dcaf_like.application.conversations import DeleteConversation, ListConversations
from dcaf_like.application.ports import (
    AuditTrail,
    CancelFlags,
    ConversationStore,
    Listing,
    Retention,
    require,
)
from dcaf_like.domain import Conversation
from dcaf_like.stores._codec import decode, encode
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


class CoreStore(ConversationStore):
    """A third party's store that keeps conversations and nothing else: one document each."""

    def __init__(self) -> None:
        self.documents: dict[str, tuple[int, str]] = {}

    def get(self, conversation_id: str) -> Conversation | None:
        found = self.documents.get(conversation_id)
        if found is None:
            return None
        conversation = decode(found[1], conversation_id)
        conversation.mark_saved()
        return conversation

    def save(self, conversation: Conversation, expected_version: int) -> None:
        actual = self.documents.get(conversation.id, (0, ""))[0]
        if actual != expected_version:
            raise ConcurrencyConflict(conversation.id, expected_version, actual)
        self.documents[conversation.id] = (conversation.version, encode(conversation))
        conversation.unsaved_decisions.clear()
        conversation.mark_saved()


@tool(requires_approval=True)
def delete_pod(name: str) -> str:
    """Delete a pod."""
    return f"{name} deleted"


def agent_on(store: ConversationStore, *script: object) -> Agent:
    return Agent(tools=[delete_pod], runtime=FakeRuntime(list(script)), repository=store)


def test_a_store_with_only_get_and_save_serves_turns_and_approvals():
    store = CoreStore()
    agent = agent_on(store, tool_calls(tool_call("delete_pod", name="web-1")), reply("Deleted web-1."))

    first = agent.run("delete web-1")
    [call] = first.pending_tool_calls
    done = agent.approve(first.conversation_id, call.id, user="olga")

    assert done.text == "Deleted web-1."
    stored = store.get(first.conversation_id)
    assert stored is not None
    assert stored.tool_call(call.id).status.value == "executed"


def test_a_core_store_lacks_every_capability_and_the_built_in_stores_have_them_all():
    from dcaf_like import InMemoryConversationRepository

    for capability in (AuditTrail, CancelFlags, Listing, Retention):
        assert not isinstance(CoreStore(), capability)
        assert isinstance(InMemoryConversationRepository(), capability)
    assert issubclass(ConversationRepository, ConversationStore)


def test_require_names_the_store_and_the_capability_it_lacks():
    with pytest.raises(MissingCapability) as refused:
        require(CoreStore(), CancelFlags)

    assert (refused.value.store, refused.value.capability) == (
        "CoreStore",
        "keep cancel requests (CancelFlags)",
    )
    assert "implement request_cancel and cancel_requested" in str(refused.value)


def test_cancelling_a_run_on_a_store_without_cancel_flags_is_refused_by_name():
    store = CoreStore()
    agent = agent_on(store, reply("hello"))
    conversation_id = agent.run("hi").conversation_id

    with pytest.raises(MissingCapability, match=r"CoreStore cannot keep cancel requests \(CancelFlags\)"):
        agent.cancel(conversation_id)
    with pytest.raises(MissingCapability, match="CancelFlags"):
        asyncio.run(CancelRun(store, clock=lambda: 1.0)(conversation_id, identity=None, entrance="http"))


def test_listing_and_deleting_on_a_store_without_listing_are_refused_by_name():
    store = CoreStore()
    agent = agent_on(store, reply("hello"))
    conversation_id = agent.run("hi").conversation_id

    with pytest.raises(MissingCapability, match=r"list or delete conversations \(Listing\)"):
        agent.conversation_ids()
    with pytest.raises(MissingCapability, match="Listing"):
        agent.delete_conversation(conversation_id)
    with pytest.raises(MissingCapability, match="Listing"):
        asyncio.run(ListConversations(store)(identity=None, limit=10))
    with pytest.raises(MissingCapability, match="Listing"):
        asyncio.run(
            DeleteConversation(store, clock=lambda: 1.0)(conversation_id, identity=None, entrance="http")
        )
    assert store.get(conversation_id) is not None  # nothing was forgotten


def test_a_turn_on_a_store_without_cancel_flags_is_never_cancelled_and_pings_by_reading():
    store = CoreStore()
    agent = agent_on(store, reply("one"), reply("two"))

    first = agent.run("hi")
    second = agent.run("again", conversation_id=first.conversation_id)

    assert (first.text, second.text) == ("one", "two")
    store.ping()  # the default readiness probe reads a conversation that does not exist
    asyncio.run(store.aping())
