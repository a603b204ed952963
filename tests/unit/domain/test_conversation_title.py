"""A conversation's title: what people call it, to find it again in a list."""

import pytest

from dcaf_like.domain import Conversation, DomainError
from dcaf_like.domain.conversation import MAX_TITLE


def test_a_new_conversation_is_untitled_and_a_title_given_is_kept_without_its_outer_spaces():
    conversation = Conversation.start("c", at=1.0)
    assert conversation.title is None

    conversation.retitle("  Pods restarting in prod  ")

    assert conversation.title == "Pods restarting in prod"
    assert conversation.version == 1, "a title is a change a save must not lose to another writer"


def test_the_same_title_again_changes_nothing_and_none_makes_it_untitled():
    conversation = Conversation.start("c", at=1.0)
    conversation.retitle("Deploy")
    conversation.retitle("Deploy")
    assert conversation.version == 1

    conversation.retitle(None)

    assert (conversation.title, conversation.version) == (None, 2)


@pytest.mark.parametrize("title", ["", "   ", "two\nlines", "x" * (MAX_TITLE + 1)])
def test_an_empty_multi_line_or_too_long_title_is_refused_and_the_old_one_stays(title):
    conversation = Conversation.start("c", at=1.0)
    conversation.retitle("Deploy")

    with pytest.raises(DomainError, match="a title is one line"):
        conversation.retitle(title)

    assert (conversation.title, conversation.version) == ("Deploy", 1)
