"""How long a store keeps a conversation: the one rule every store applies.

A conversation is kept `retention` seconds after its last save; one still waiting for a decision is
kept at least until the approval window of its last pending call closes, so a store never forgets a
call that can still be approved (nor a question that can still be answered: the window of its last
open question counts alike). A pending call proposed without a window (``approval_ttl=None``), or a
question asked without one, waits as long as the retention.
"""

from __future__ import annotations

from dcaf_like.domain import Conversation, ToolCallStatus

DAY = 24 * 60 * 60

#: What ``serve`` and ``dcaf-like serve`` keep when neither the store URL (``ttl=``) nor
#: ``--retention-days`` says otherwise.
DEFAULT_RETENTION_DAYS = 30


def waiting_until(conversation: Conversation) -> float | None:
    """When the window of the conversation's last pending call or open question closes; None when
    none has a window."""
    closes = [
        call.expires_at
        for call in conversation.tool_calls.values()
        if call.status is ToolCallStatus.PENDING and call.expires_at is not None
    ]
    if conversation.questions:
        closes += [q.expires_at for q in conversation.open_questions if q.expires_at is not None]
    return max(closes, default=None)


def last_activity(conversation: Conversation) -> float:
    """The time of the conversation's latest message, proposal, decision or outcome."""
    times = [conversation.created_at, *(m.at for m in conversation.messages)]
    for call in conversation.tool_calls.values():
        times += [t for t in (call.proposed_at, call.decided_at, call.finished_at) if t is not None]
    return max(times)


def kept_until(saved_at: float, retention: float, waiting: float | None) -> float:
    """Until when a conversation last saved at `saved_at` (waiting until `waiting`) is kept."""
    return saved_at + retention if waiting is None else max(saved_at + retention, waiting)


def expired(conversation: Conversation, retention: float, now: float) -> bool:
    """Whether a store may forget `conversation` at `now` (judged from its own times: for stores that
    keep no time of their own)."""
    return kept_until(last_activity(conversation), retention, waiting_until(conversation)) < now
