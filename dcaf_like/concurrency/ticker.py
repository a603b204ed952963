"""The one timer of an event loop's periodic jobs: a job that ends before its period costs a set's add
and discard, not a timer of its own."""

from __future__ import annotations

import asyncio
import weakref
from typing import ClassVar, Protocol


class Timed(Protocol):
    def due(self) -> None:
        """Act if it is time, by the job's own clock (its agent's)."""


class Ticker:
    """The one timer of an event loop's periodic jobs (cancel polls, lease renewals): it ticks every
    half of the shortest period of those registered while any is, asks each one to act if it is time
    by its own clock, and stops when none is left. A job that ends before its period costs a set's add
    and discard, not a timer."""

    _of_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Ticker]] = (
        weakref.WeakKeyDictionary()
    )

    # It holds no reference to its loop, not even through its timer (a weak one), so a closed loop
    # (the dictionary's key) can be collected: the loop holds the timer, the timer the ticker.
    def __init__(self) -> None:
        self._jobs: set[Timed] = set()
        self._period = float("inf")
        self._timer: weakref.ref[asyncio.TimerHandle] | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> Ticker:
        ticker = cls._of_loop.get(loop)
        if ticker is None:
            ticker = cls._of_loop[loop] = cls()
        return ticker

    def add(self, job: Timed, every: float) -> None:
        self._jobs.add(job)
        if every / 2 < self._period:  # a shorter period than the timer's: start again
            self._period = every / 2
            timer = self._timer() if self._timer is not None else None
            if timer is not None:
                timer.cancel()
            self._timer = None
        if self._timer is None:
            self._arm()

    def discard(self, job: Timed) -> None:
        self._jobs.discard(job)

    def _arm(self) -> None:
        self._timer = weakref.ref(asyncio.get_running_loop().call_later(self._period, self._tick))

    def _tick(self) -> None:
        self._timer = None
        if not self._jobs:
            self._period = float("inf")
            return
        for job in list(self._jobs):
            job.due()
        self._arm()
