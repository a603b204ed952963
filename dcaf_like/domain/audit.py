"""The audit trail: one record per decision about a tool call, and per reply to a question a call asked
(answered, declined, expired), kept apart from the conversation.

A conversation may be deleted or expire; the record of who let a dangerous call run (or stopped it)
is appended to a store of its own and never rewritten.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dcaf_like.domain.tool_call import DeciderKind


class DecisionOutcome(StrEnum):
    APPROVED = "approved"
    EDITED = "edited"  # approved with arguments a human changed
    # An approval counted towards a call that needs more than one (docs/approvals.md, "Approvals by
    # teams"): the call still waits. The record's reason says which stage, and whether it edited.
    COUNTED = "counted"
    REJECTED = "rejected"
    REFUSED = "refused"  # the decision was not applied: forged, altered, late, already decided, ...
    # A question a call asked (the record names it by `question_id`): never the answer itself.
    ANSWERED = "answered"
    DECLINED = "declined"  # the user would not answer: the call failed, not run
    EXPIRED = "expired"  # its window closed before an answer: the system closed it
    # An approved call not run because its preview, run again just before it would run, said
    # something else or failed (ADR 38): the approval no longer holds and the call waits again.
    STALE = "stale"
    # A notice a waiting call's escalation owed, claimed to be sent (docs/approvals.md, "Escalation"):
    # the reminder to its approvers, the escalation to the group named; the record's reason says which.
    REMINDED = "reminded"
    ESCALATED = "escalated"
    # A standing grant (docs/approvals.md, "Grants"), made or revoked: the record's reason names it
    # (``grant g_...: <its rule> until <when>``); it names no conversation and no call.
    GRANTED = "granted"
    REVOKED = "revoked"


#: The entrance of a decision made through the Python API (``Agent.run``, ``Agent.decide``), and of
#: one nobody's request carried: every other entrance (http, stream, a2a, job) names itself.
PYTHON = "python"


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """Who decided what about which call, when, and through which entrance. A reply to a question
    names the question (`question_id`; empty for a decision about a call)."""

    conversation_id: str
    call_id: str
    tool_name: str
    fingerprint: str  # of the call as proposed: the approval's binding (empty if no such call)
    outcome: DecisionOutcome
    decided_by: str
    decider: DeciderKind
    entrance: str  # http, stream, a2a, python
    at: float
    reason: str = ""
    question_id: str = ""
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    # Its link in the store's chain (dcaf_like.domain.trail), set by the store as it appends the record:
    # its place (1 on; 0 for a record not chained yet, or written before the chain) and the SHA-256 of
    # the record before it ("" for the first).
    seq: int = 0
    previous: str = ""

    @classmethod
    def refused(
        cls, conversation_id: str, reason: str, *, by: str, entrance: str, at: float, call_id: str = ""
    ) -> DecisionRecord:
        """The record of a request refused before its conversation was loaded (a missing scope): it
        names the call the request named, if any, and no tool (nothing the client claims is evidence)."""
        return cls(
            conversation_id=conversation_id,
            call_id=call_id,
            tool_name="",
            fingerprint="",
            outcome=DecisionOutcome.REFUSED,
            decided_by=by,
            decider=DeciderKind.HUMAN,
            entrance=entrance,
            at=at,
            reason=reason,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "conversation_id": self.conversation_id,
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "fingerprint": self.fingerprint,
            "outcome": self.outcome.value,
            "decided_by": self.decided_by,
            "decider": self.decider.value,
            "entrance": self.entrance,
            "reason": self.reason,
            "question_id": self.question_id,
            "seq": self.seq,
            "previous": self.previous,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecisionRecord:
        return cls(
            conversation_id=data["conversation_id"],
            call_id=data["call_id"],
            tool_name=data["tool_name"],
            fingerprint=data["fingerprint"],
            outcome=DecisionOutcome(data["outcome"]),
            decided_by=data["decided_by"],
            decider=DeciderKind(data["decider"]),
            entrance=data["entrance"],
            at=data["at"],
            reason=data.get("reason", ""),
            question_id=data.get("question_id", ""),  # absent in records written before questions
            id=data["id"],
            seq=data.get("seq", 0),  # absent in records written before the chain
            previous=data.get("previous", ""),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> DecisionRecord:
        return cls.from_dict(json.loads(text))
