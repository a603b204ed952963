"""The agent's clock (``Agent(clock=...)``): the time of day, which approval and question windows,
leases and cancel requests are stamped with, and a monotonic reading, which the turn's time limit and
the store polls of a running turn are measured by.

A plain function is read as the time of day only; its monotonic reading is the machine's. A clock
with a ``monotonic()`` method (the test kit's ``ManualClock``) gives both, so a test that moves it
moves every limit of the agent at once instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable


def monotonic_of(clock: Callable[[], float]) -> Callable[[], float]:
    """`clock`'s monotonic reading: its ``monotonic`` method if it has one, else ``time.monotonic``."""
    reading = getattr(clock, "monotonic", None)
    return reading if callable(reading) else time.monotonic
