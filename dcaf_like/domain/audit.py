"""The audit trail: one record per decision about a tool call, kept apart from the conversation.

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
    REJECTED = "rejected"
    REFUSED = "refused"  # the decision was not applied: forged, altered, late, already decided, ...


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """Who decided what about which call, when, and through which entrance."""

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
    id: str = field(default_factory=lambda: secrets.token_hex(8))

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
            id=data["id"],
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> DecisionRecord:
        return cls.from_dict(json.loads(text))
