"""Telling approvers that calls wait for them: the port, and what a notice carries.

A notifier is told once per call that starts waiting, after the turn that proposed it was saved, and
once per reminder and escalation its rule owes (:mod:`~dcaf_like.application.escalations`). It
must not block the turn: deliveries happen elsewhere (a queue and a thread of the notifier's own), and a
delivery that fails is the notifier's to retry and report, never the turn's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from dcaf_like.application.dto import ToolCallView


@dataclass(frozen=True, slots=True)
class WaitingCall:
    """A call waiting for a decision, as an approver is told of it (secret arguments masked), in the
    names of every form of a call (ADR 20): `input`, the arguments it would run with (its proposal),
    and `approval_reason`, why it waits."""

    id: str
    name: str
    input: dict[str, Any]
    approval_reason: str | None
    description: str = ""
    #: For a call under a team rule (docs/approvals.md, "Approvals by teams"): its rule in words, the
    #: approvals given so far and what each stage still needs, stages from 1 (None: today's rule).
    approvals: dict[str, Any] | None = None
    #: What its tool declares it may do (``"irreversible"``, ...; None: undeclared).
    risk: str | None = None
    #: What its tool's preview says it would do (ADR 38), how to read it, and why it has none.
    preview: str | None = None
    preview_kind: str | None = None
    preview_error: str | None = None


def approvals_of(call: ToolCallView) -> dict[str, Any] | None:
    """``{rule, given: [{by, at, stage}], needed: [{stage, count, groups}]}`` of a call under a team
    rule, as every surface shows it (stages from 1), with ``reminded_at`` once its approvers were
    reminded and ``escalated_at`` and ``escalated_to`` once it was escalated (docs/approvals.md,
    "Escalation"); None for a call under today's rule."""
    if call.approvers is None:
        return None
    shown: dict[str, Any] = {
        "rule": call.approvers.describe(),
        "given": [{"by": a.by, "at": a.at, "stage": a.stage + 1} for a in call.approvals],
        "needed": [
            {"stage": n.stage + 1, "count": n.count, "groups": sorted(n.groups)} for n in call.still_needed
        ],
    }
    if call.reminded_at is not None:
        shown["reminded_at"] = call.reminded_at
    escalation = call.approvers.escalation
    if call.escalated_at is not None and escalation is not None:
        shown["escalated_at"] = call.escalated_at
        shown["escalated_to"] = sorted(escalation.escalate_to)
    return shown


@dataclass(frozen=True, slots=True)
class ApprovalNotice:
    """Calls of one conversation that started waiting in one turn (`event` ``"approval_required"``),
    or a call still waiting whose rule's escalation is due (docs/approvals.md, "Escalation"):
    ``"reminder"`` for the approvers it waits for, ``"escalation"`` for the groups it now also
    waits for. `groups` names whom the notice is for (empty: whoever may approve)."""

    agent: str
    conversation_id: str
    calls: tuple[WaitingCall, ...]
    user: str | None = None
    event: str = "approval_required"
    groups: tuple[str, ...] = ()


class ApprovalNotifier(ABC):
    """Told when calls start waiting for a decision."""

    @abstractmethod
    def approval_required(self, notice: ApprovalNotice) -> None:
        """Accept `notice` for delivery and return at once."""

    def close(self) -> None:  # noqa: B027 - optional
        """Deliver what is queued (within the notifier's own limits) and stop."""


def waiting_call(call: ToolCallView) -> WaitingCall:
    """What an approver is told of `call`, a call that started waiting."""
    return WaitingCall(
        call.id,
        call.name,
        dict(call.input),
        call.approval_reason,
        call.description,
        approvals=approvals_of(call),
        risk=call.risk,
        preview=call.preview,
        preview_kind=call.preview_kind,
        preview_error=call.preview_error,
    )
