"""A hook that refuses tools outside business hours: a change freeze nights and weekends.

    python examples/business_hours_hook.py    # a scripted turn, refused or run by the clock now

The refusal comes after the approval gate: even a call a human approved does not run at 3 a.m. on a
Sunday, and the model reads why. Read-only tools can be let through (`always`). The clock is a
parameter, so a test (or a drill) can pick the hour.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable, Collection
from datetime import datetime, time
from zoneinfo import ZoneInfo

from dcaf_like import Hook, HookContext, ToolCallInfo, Veto

WEEKDAYS = (0, 1, 2, 3, 4)  # Monday to Friday, as datetime.weekday() counts


class BusinessHours(Hook):
    """Vetoes every tool but those in `always` outside `days`, `opens` to `closes`, in `zone`."""

    name = "business_hours"

    def __init__(
        self,
        *,
        zone: str = "UTC",
        opens: time = time(9),
        closes: time = time(17),
        days: Collection[int] = WEEKDAYS,
        always: Collection[str] = (),
        clock: Callable[[ZoneInfo], datetime] = datetime.now,
    ) -> None:
        self.zone = ZoneInfo(zone)
        self.opens, self.closes, self.days = opens, closes, frozenset(days)
        self.always = frozenset(always)
        self.clock = clock

    def before_tool(self, context: HookContext, call: ToolCallInfo) -> Veto | None:
        if call.name in self.always:
            return None
        now = self.clock(self.zone)
        if now.weekday() in self.days and self.opens <= now.time() < self.closes:
            return None
        days = " ".join(calendar.day_abbr[d] for d in sorted(self.days))
        return Veto(
            f"outside business hours ({days} {self.opens:%H:%M}-{self.closes:%H:%M} {self.zone.key}); "
            f"it is {now:%a %H:%M} there"
        )


def main() -> None:
    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime, tool_call

    @tool(requires_approval=False)
    def restart_deployment(name: str) -> str:
        """Restart a deployment."""
        return f"deployment {name} restarted"

    model = FakeRuntime([tool_call("restart_deployment", name="web"), "Done (or not: see above)."])
    agent = Agent(tools=[restart_deployment], runtime=model, hooks=[BusinessHours(zone="Europe/Paris")])
    response = agent.run("restart web")
    [call] = response.executed_tool_calls
    print(f"{call.name}: {call.status}: {call.output or call.error}")


if __name__ == "__main__":
    main()
