"""What a turn asks its driver to do (effects), and what the driver sends back (outcomes).

The turn (:mod:`dcaf_like.application.turn`) yields these; the driver
(:mod:`dcaf_like.application.service`) performs them with its ports, and the tool runner
(:mod:`dcaf_like.application.tool_execution`) reads them without knowing the turn's rules. Effects and
outcomes live for one step of one turn and never leave the application layer. They are not frozen: a
frozen dataclass's __init__ is slower than a plain one's, and a turn makes several.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, cast

from dcaf_like.application.events import StreamEvent
from dcaf_like.application.executors import ToolJob
from dcaf_like.application.messages import ModelRequest
from dcaf_like.application.ports import ExecutableTool, PendingApproval, ToolContext, ToolOutput
from dcaf_like.application.questions import UserInputRequired
from dcaf_like.domain import Identity, PlatformContext
from dcaf_like.domain.identity import DepsT


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """What dynamic instructions see of a run. `session` and `platform_context` are the client's
    (never authority); `identity` (None without API keys) and `deps` are the server's.
    ``RunContext[MyDeps]`` types `deps`."""

    conversation_id: str
    platform_context: PlatformContext
    session: Mapping[str, Any]
    agent_name: str = ""
    identity: Identity | None = None
    deps: DepsT = field(default=cast(Any, None), repr=False, compare=False)


@dataclass(slots=True)
class ResolveInstructions:
    context: RunContext


@dataclass(slots=True)
class CallModel:
    request: ModelRequest
    #: Seconds left of the turn's time limit (None: no limit). When they run out the driver sends
    #: back :class:`Stopped` instead of a response.
    timeout: float | None = None


@dataclass(slots=True)
class RunTool:
    tool: ExecutableTool
    arguments: dict[str, Any]
    context: ToolContext
    #: Seconds this run may take (None: no limit), and the limit that is, named in the error when it
    #: runs out: the tool's own or what is left of the turn's.
    timeout: float | None = None
    limit: str = ""


@dataclass(slots=True)
class RunTools:
    """Run these tools side by side (``Agent(parallel_tools=True)``, docs/runs.md, "Tools side by
    side"), at most `most` at a time. The driver sends back their :class:`ToolOutcomes`, in the order
    of `runs` whatever order they end in; one that fails stops none of the others."""

    runs: list[RunTool]
    most: int


@dataclass(slots=True)
class Enqueue:
    """Hand the job of an approved call, queued in the conversation, to the agent's executor once the
    turn's conversation is saved (so the job finds the call queued, and the turn's own saves never
    race the job's). The driver answers None."""

    job: ToolJob


@dataclass(slots=True)
class Summarize:
    """Ask the agent's runtime for the summary of what no longer fits the context window: its
    response, or None when its call was stopped (cancel, time limit)."""

    request: ModelRequest


@dataclass(slots=True)
class AskApprover:
    pending: PendingApproval


@dataclass(slots=True)
class Emit:
    event: StreamEvent


@dataclass(slots=True)
class CheckCancel:
    """Was this turn asked to stop (``agent.cancel``, from any worker)? The driver answers a bool.
    Asked before every step but the first, so a turn that runs no tool never asks."""


@dataclass(slots=True)
class CallHooks:
    """Call the agent's hooks at `point` (a method of :class:`~dcaf_like.application.hooks.Hook`)
    with `arguments`. The driver answers a :class:`~dcaf_like.application.hooks.Refused` (a
    ``before_tool`` veto), the :class:`~dcaf_like.application.errors.HookFailed` of a hook that raised,
    or None. Yielded only when some hook has that method."""

    point: str
    arguments: tuple[Any, ...]


@dataclass(slots=True)
class ReadArrived:
    """The user's messages that arrived for this run while it ran (docs/runs.md, "A message into a
    running run"): the driver sends back their (text, time) pairs, oldest first, taken once."""


@dataclass(slots=True)
class ReadGrants:
    """The standing grants in force now (docs/approvals.md, "Grants"): asked once per turn, and only
    when a call waits for today's one approver; the driver sends back a tuple of them."""


Effect = (
    ResolveInstructions
    | CallModel
    | Summarize
    | RunTool
    | RunTools
    | Enqueue
    | AskApprover
    | Emit
    | CheckCancel
    | CallHooks
    | ReadArrived
    | ReadGrants
)


@dataclass(slots=True)
class ToolOutcome:
    output: str | ToolOutput | None = None
    error: str | None = None
    #: The run went past ``RunTool.timeout``: `error` says so.
    timed_out: bool = False
    #: The tool asked the user before acting (it raised UserInputRequired): no output, no error.
    question: UserInputRequired | None = None
    #: Side by side: the run was cancelled while the call waited for a slot, so its tool never started.
    not_started: bool = False
    #: Seconds the run took, when its driver measured it (a run side by side with others); else the
    #: turn measures the step.
    ran_for: float | None = None


@dataclass(slots=True)
class ToolOutcomes:
    """What a driver sends back for :class:`RunTools`: an outcome per run, in the order of its runs."""

    each: list[ToolOutcome]


@dataclass(slots=True)
class Stopped:
    """What a driver sends back for a model call the turn must not wait for any longer."""

    reason: str


TURN_TIMEOUT = "turn_timeout"
CANCELLED = "cancelled"
# Not a stop reason a response carries: the turn raises the hook's HookFailed once its calls are settled.
HOOK_FAILED = "hook_failed"
AWAITING_APPROVAL = "awaiting_approval"
#: The request decided calls someone else asked for: they ran; the model waits for their requester.
AWAITING_REQUESTER = "awaiting_requester"
AWAITING_INPUT = "awaiting_input"
#: Calls of the turn went to the agent's job engine: their results come later (docs/runs.md).
RUNNING_IN_BACKGROUND = "running_in_background"
#: The model failed and an ``on_error`` hook answered instead (docs/operations.md, "Hooks").
FALLBACK = "fallback"
#: The request's message was kept for the next model step (calls wait, or a turn runs): nothing ran.
QUEUED = "queued"


def timed_out(effect: RunTool, *, cancelled: bool) -> ToolOutcome:
    """The outcome of a run that went past its time limit: `cancelled` when the tool was stopped (an
    ``async def`` tool), else it may still be running in its thread and its result will not be used."""
    what = (
        "it was cancelled"
        if cancelled
        else "it could not be stopped and may still be running; its result will not be used"
    )
    after = seconds_text(effect.timeout or 0.0)
    return ToolOutcome(error=f"timed out after {after} s ({effect.limit}): {what}", timed_out=True)


def seconds_text(seconds: float) -> str:
    """`seconds` as a person reads a duration: ``3`` for what is left of a turn's limit (2.99961),
    ``12.5``, ``0.05``; a tenth of a second from one second on, two significant digits below."""
    if seconds < 1:
        return f"{seconds:.2g}"
    return f"{round(seconds, 1):.1f}".removesuffix(".0")
