"""Reminders and escalations of calls waiting for approval (docs/approvals.md, "Escalation";
ADR "escalation-notices-are-claimed-by-a-save").

A call whose rule has an escalation owes its approvers a reminder after a time and its escalation
group a notice after a longer one. :class:`SweepEscalations` finds what is due by reading the store's
index of waiting calls (so a sweep costs what the waiting calls hold, not what the conversations do),
and for each notice due claims it in the store before it tells the notifier: it records the notice on
the call and saves the conversation with its compare-and-set. Of several workers sweeping one store,
one save wins and sends it; the others lose the race (or find it claimed) and send nothing. A notice
is sent at most once, and once as long as the notifier delivers it.

What the escalation changes besides is not the sweep's: the group escalated to may approve from the
moment the rule says (:meth:`~dcaf_like.domain.approvers.Escalation.escalated`), swept or not, and
the window's end is judged when a decision arrives, as it always was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from dcaf_like.application.dto import ToolCallView
from dcaf_like.application.errors import ConcurrencyConflict
from dcaf_like.application.notifications import ApprovalNotice, ApprovalNotifier, waiting_call
from dcaf_like.application.ports import ConversationStore, WaitingIndex, require
from dcaf_like.application.waiting import WaitingEntry
from dcaf_like.domain import DomainError

logger = logging.getLogger("dcaf_like.notify")


@dataclass(slots=True)
class SweepEscalations:
    """One sweep sends the reminders and escalations due now, each claimed in the store first. It
    counts what it sent (`sent`) and the sweeps it finished (`sweeps`)."""

    repository: ConversationStore
    notifier: ApprovalNotifier
    agent: str
    clock: Callable[[], float]
    sent: int = 0
    sweeps: int = 0

    async def __call__(self) -> int:
        """Send what is due; how many notices this sweep sent. A store without the index of waiting
        calls raises MissingCapability."""
        store = require(self.repository, WaitingIndex)
        now = self.clock()
        due = [(entry, notice) for entry in await store.alist_waiting() if (notice := entry.notice_due(now))]
        sent = 0
        for entry, notice in due:
            sent += await self._claim_and_send(entry, notice, now)
        self.sent += sent
        self.sweeps += 1
        return sent

    async def _claim_and_send(self, entry: WaitingEntry, notice: str, now: float) -> int:
        conversation = await self.repository.aget(entry.conversation_id)
        if conversation is None:
            return 0
        expected = conversation.version
        try:
            call = conversation.claim_notice(entry.call_id, notice, at=now)
        except DomainError:  # decided, or claimed, since the index was read
            return 0
        try:
            await self.repository.asave(conversation, expected)
        except ConcurrencyConflict:  # another worker (or a decision) saved first: theirs to send
            return 0
        rule = call.approvers
        if notice == "escalation" and rule.escalation is not None:
            groups = rule.escalation.escalate_to
        else:
            groups = frozenset().union(
                *(n.groups for n in call.approvers.still_needed(call.approvals, call.approved_fingerprint))
            )
            groups |= call.escalated(now)
        message = ApprovalNotice(
            self.agent,
            conversation.id,
            (waiting_call(ToolCallView.of(call)),),
            user=call.requested_by,
            event=notice,
            groups=tuple(sorted(groups)),
        )
        try:
            self.notifier.approval_required(message)
        except Exception:
            logger.exception(
                "the approval notifier failed for the %s of a call in %s", notice, conversation.id
            )
            return 0
        return 1
