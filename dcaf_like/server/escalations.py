"""The server's sweep of reminders and escalations (docs/approvals.md, "Escalation"): started with
the app's lifespan, a sweep every `every` seconds (``DCAF_ESCALATION_SWEEP``, 30 unless set), stopped
at shutdown. Every worker sweeps; the store's compare-and-set has each notice sent once
(:mod:`dcaf_like.application.escalations`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from dcaf_like.application.escalations import SweepEscalations

logger = logging.getLogger("dcaf_like.notify")

#: Seconds between two sweeps unless ``DCAF_ESCALATION_SWEEP`` or ``create_app(escalation_sweep=)``
#: says otherwise: a reminder is sent at most this late.
EVERY = 30.0


@runtime_checkable
class Escalates(Protocol):
    def escalation_sweep(self) -> SweepEscalations | None: ...


def sweep_period(every: float | None) -> float:
    """`every`, else ``DCAF_ESCALATION_SWEEP``, else :data:`EVERY`; refused unless above 0."""
    value = every if every is not None else float(os.environ.get("DCAF_ESCALATION_SWEEP") or EVERY)
    if not value > 0:
        raise ValueError(f"the escalation sweep's period is a number of seconds above 0, not {value!r}")
    return value


@contextlib.asynccontextmanager
async def sweeping(agent: object, every: float) -> AsyncIterator[SweepEscalations | None]:
    """Sweep `agent`'s escalations every `every` seconds while the block runs (nothing for an agent
    whose rules escalate nothing, or that notifies nobody)."""
    sweep = agent.escalation_sweep() if isinstance(agent, Escalates) else None
    if sweep is None:
        yield None
        return
    task = asyncio.get_running_loop().create_task(_every(sweep, every), name="dcaf-like-escalations")
    try:
        yield sweep
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _every(sweep: SweepEscalations, every: float) -> None:
    while True:
        try:
            await sweep()
        except Exception:  # a store that failed this time may answer next time
            logger.exception("the escalation sweep of %s failed", sweep.agent)
        await asyncio.sleep(every)
