"""The use cases that read, list and forget conversations (application/conversations.py): the same
rules whichever entrance calls them (docs/architecture.md, "Entrances parse, use cases decide")."""

from __future__ import annotations

import asyncio

import pytest

from dcaf_like import ConversationNotFound, InMemoryConversationRepository, InvalidRequest
from dcaf_like.application.conversations import DeleteConversation, ListConversations, ReadConversation
from dcaf_like.application.errors import MissingScope
from dcaf_like.domain import Conversation, Identity

ALICE = Identity("alice", frozenset({"chat", "read"}))
BOB = Identity("bob", frozenset({"chat", "read"}))
READER = Identity("dave", frozenset({"read"}))
OPS = Identity("ops", frozenset({"admin"}))


def store_with(*owners: str) -> InMemoryConversationRepository:
    store = InMemoryConversationRepository()
    for number, owner in enumerate(owners):
        conversation = Conversation.start(f"conv_{owner}_{number}", at=float(number), owner=owner)
        conversation.add_user_message("hello", at=float(number))
        store.save(conversation, 0)
    return store


def test_a_conversation_is_read_by_its_owner_and_an_admin_and_hidden_from_others():
    store = store_with("bob")
    read = ReadConversation(store)

    assert asyncio.run(read("conv_bob_0", identity=BOB)).owner == "bob"
    assert asyncio.run(read("conv_bob_0", identity=OPS)).owner == "bob"
    assert asyncio.run(read("conv_bob_0", identity=None)).owner == "bob"  # nobody authenticated: trusted
    with pytest.raises(ConversationNotFound):
        asyncio.run(read("conv_bob_0", identity=ALICE))
    with pytest.raises(InvalidRequest, match="conversation_id"):
        asyncio.run(read("conv with spaces", identity=BOB))


def test_a_list_holds_the_callers_own_conversations_only():
    store = store_with("alice", "bob", "alice", "bob")
    listing = ListConversations(store)

    mine = asyncio.run(listing(identity=ALICE, limit=10)).conversations
    everyone = asyncio.run(listing(identity=OPS, limit=10)).conversations

    assert sorted(c.id for c in mine) == ["conv_alice_0", "conv_alice_2"]
    assert len(everyone) == 4
    with pytest.raises(MissingScope, match="'read' scope"):
        asyncio.run(listing(identity=Identity("eve", frozenset({"chat"})), limit=10))


def test_a_delete_needs_chat_is_audited_when_refused_and_never_reaches_anothers_conversation():
    store = store_with("bob")
    delete = DeleteConversation(store, clock=lambda: 5.0)

    with pytest.raises(MissingScope, match="'chat' scope"):
        asyncio.run(delete("conv_bob_0", identity=READER, entrance="http"))
    with pytest.raises(ConversationNotFound):
        asyncio.run(delete("conv_bob_0", identity=ALICE, entrance="http"))
    assert store.get("conv_bob_0") is not None
    (refused,) = store.decision_records("conv_bob_0")
    assert (refused.decided_by, refused.at) == ("dave", 5.0)

    asyncio.run(delete("conv_bob_0", identity=BOB, entrance="http"))
    assert store.get("conv_bob_0") is None
    with pytest.raises(ConversationNotFound):
        asyncio.run(delete("conv_bob_0", identity=BOB, entrance="http"))
