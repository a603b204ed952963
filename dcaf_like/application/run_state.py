"""A turn under way, as its driver (:class:`~dcaf_like.application.service.AgentService`) and the
parts that perform its effects (model calls, tool runs) share it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from dcaf_like.application.events import CancelRequested
from dcaf_like.application.executors import ToolJob
from dcaf_like.application.tracing import Span
from dcaf_like.application.turn import Turn
from dcaf_like.domain import Conversation


@dataclass(slots=True)
class TurnRun:
    """A turn under way: its :class:`~dcaf_like.application.turn.Turn`, the conversation, the version
    its next save expects (a claim or a lease renewal moves it on), when it started (a cancel asked
    since then stops it), its span, and whether its driver blocks."""

    turn: Turn
    conversation: Conversation
    expected: int
    started: float
    span: Span
    blocking: bool
    #: The request approved calls: their claim is saved before the turn goes on.
    claim: bool = False
    #: Called when a cancel poll sees a cancel while a streamed tool runs (it acknowledges it).
    on_cancel_seen: Callable[[], None] | None = None
    #: The stream said it saw a cancel (once per turn).
    cancel_acknowledged: bool = False
    #: Jobs of calls the turn queued, handed to the agent's executor after its last save.
    jobs: list[ToolJob] = field(default_factory=list)
    #: Held by a lease renewal while tools run side by side (their renewals save one at a time).
    renewing: asyncio.Lock | None = None

    def cancel_seen(self) -> None:
        if self.on_cancel_seen is not None:
            self.on_cancel_seen()

    def acknowledge_cancel(self) -> CancelRequested | None:
        """The event that tells the stream a cancel was seen, the first time only."""
        if self.cancel_acknowledged:
            return None
        self.cancel_acknowledged = True
        return CancelRequested(self.conversation.id)
