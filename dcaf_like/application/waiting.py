"""The calls waiting for a decision, as every store indexes them for the inbox (docs/approvals.md,
"One inbox").

A store keeps, for each conversation that has calls waiting for approval, one entry per call: what the
inbox shows and what it filters by (who owns the conversation, who asked, the call's rule and the
approvals counted so far). A save that changes a call rewrites its conversation's entries
(:func:`waiting_entries`); a conversation with none waiting has no entry, so reading the index costs
what the waiting calls hold, not what the conversations do.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dcaf_like.domain import Conversation, ToolCallStatus
from dcaf_like.domain.approvers import Approval, Approvers, Stage, escalation_from, escalation_to_dict


@dataclass(frozen=True, slots=True)
class WaitingEntry:
    """One call waiting for approval: where it is, what it would run (`input`, secret arguments
    masked), why it waits, who owns its conversation and who asked for it, its rule (`approvers`) and
    the approvals counted so far. `context` is its conversation's platform context without credentials
    (a decision sends it back: an approval binds to the context the call was proposed in)."""

    conversation_id: str
    call_id: str
    name: str
    input: dict[str, Any]
    proposed_at: float
    description: str = ""
    editable: bool = False
    approval_reason: str | None = None
    expires_at: float | None = None
    owner: str | None = None
    requested_by: str | None = None
    approvers: Approvers = field(default_factory=Approvers)
    approvals: tuple[Approval, ...] = ()
    context: dict[str, Any] = field(default_factory=dict)
    #: When its reminder and its escalation were sent (docs/approvals.md, "Escalation"; None: not yet).
    reminded_at: float | None = None
    escalated_at: float | None = None

    def notice_due(self, now: float) -> str | None:
        """The notice its rule's escalation owes at `now` and nobody claimed yet (as
        :meth:`ToolCall.notice_due <dcaf_like.domain.tool_call.ToolCall.notice_due>` says)."""
        escalation = self.approvers.escalation
        if escalation is None or (self.expires_at is not None and now >= self.expires_at):
            return None
        return escalation.due(
            self.proposed_at,
            now,
            reminded=self.reminded_at is not None,
            escalated=self.escalated_at is not None,
        )

    @property
    def key(self) -> tuple[float, str, str]:
        """Its place in the inbox: newest first, then by conversation and call."""
        return (self.proposed_at, self.conversation_id, self.call_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "call_id": self.call_id,
            "name": self.name,
            "input": self.input,
            "proposed_at": self.proposed_at,
            "description": self.description,
            "editable": self.editable,
            "approval_reason": self.approval_reason,
            "expires_at": self.expires_at,
            "owner": self.owner,
            "requested_by": self.requested_by,
            "stages": [[s.count, sorted(s.groups)] for s in self.approvers.stages],
            "requester_may_approve": self.approvers.requester_may_approve,
            "approvals": [[a.by, a.at, a.stage, a.fingerprint] for a in self.approvals],
            "context": self.context,
            **({"escalation": escalation_to_dict(e)} if (e := self.approvers.escalation) else {}),
            **({"reminded_at": self.reminded_at} if self.reminded_at is not None else {}),
            **({"escalated_at": self.escalated_at} if self.escalated_at is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WaitingEntry:
        return cls(
            conversation_id=data["conversation_id"],
            call_id=data["call_id"],
            name=data["name"],
            input=data["input"],
            proposed_at=data["proposed_at"],
            description=data["description"],
            editable=data["editable"],
            approval_reason=data["approval_reason"],
            expires_at=data["expires_at"],
            owner=data["owner"],
            requested_by=data["requested_by"],
            approvers=Approvers(
                tuple(Stage(count, frozenset(groups)) for count, groups in data["stages"]),
                data["requester_may_approve"],
                escalation_from(data.get("escalation")),  # absent before escalation
            ),
            approvals=tuple(Approval(*a) for a in data["approvals"]),
            context=data["context"],
            reminded_at=data.get("reminded_at"),
            escalated_at=data.get("escalated_at"),
        )


def waiting_entries(conversation: Conversation) -> list[WaitingEntry]:
    """The calls of `conversation` waiting for a person's approval, as the index keeps them. The
    conversation must hold every call not settled yet (a whole one, or a windowed read's)."""
    context = conversation.platform_context.public() if conversation.platform_context else {}
    return [
        WaitingEntry(
            conversation_id=conversation.id,
            call_id=call.id.value,
            name=call.name,
            input=call.shown(call.effective_input),
            proposed_at=call.proposed_at,
            description=call.description,
            editable=call.editable,
            approval_reason=call.approval_reason,
            expires_at=call.expires_at,
            owner=conversation.owner,
            requested_by=call.requested_by,
            approvers=call.approvers,
            approvals=call.counted_approvals,
            context=context,
            reminded_at=call.reminded_at,
            escalated_at=call.escalated_at,
        )
        for call in conversation.tool_calls.values()
        if call.status is ToolCallStatus.PENDING and call.requires_approval
    ]


def encode_entries(entries: Sequence[WaitingEntry]) -> str:
    """A conversation's entries as one JSON text ("" for none: the store drops its entry)."""
    if not entries:
        return ""
    return json.dumps([e.to_dict() for e in entries], separators=(",", ":"), sort_keys=True)


def decode_entries(text: str | bytes) -> list[WaitingEntry]:
    return [WaitingEntry.from_dict(item) for item in json.loads(text)] if text else []


def index_changes(conversation: Conversation, whole: bool, calls_written: bool) -> str | None:
    """What a save writes to the index for `conversation`: None when it writes no call (its waiting
    calls are as the index has them), else the encoded entries ("" when none waits any more)."""
    if not whole and not calls_written:
        return None
    return encode_entries(waiting_entries(conversation))
