"""What every turn of one agent shares: its tools, policy, limits, clocks and model settings, made once
by :class:`~dcaf_like.application.service.AgentService` and read by each
:class:`~dcaf_like.application.turn.Turn` and by the request rules."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dcaf_like.application.context import ContextPolicy, TokenCounter, estimate_tokens
from dcaf_like.application.hooks import NO_HOOKS, Hooks
from dcaf_like.application.messages import NO_SETTINGS, ModelRequest, ModelSettings, ToolSpec
from dcaf_like.application.ports import ExecutableTool
from dcaf_like.domain import ApprovalPolicy


@dataclass(slots=True)  # never changed after it is made; not frozen, whose __init__ is slower
class TurnSettings:
    toolbox: Mapping[str, ExecutableTool]
    policy: ApprovalPolicy
    tool_specs: tuple[ToolSpec, ...]
    max_iterations: int = 10
    approval_ttl: float | None = None
    #: Seconds an open question takes an answer (None: no limit); the service resolves the agent's.
    question_ttl: float | None = None
    has_approver: bool = False
    runtime_name: str = ""
    agent_name: str = ""
    clock: Callable[[], float] = time.time
    #: What the turn's time limit is measured by (the agent clock's monotonic reading).
    monotonic: Callable[[], float] = time.monotonic
    #: Instructions that are the same every turn; None when they are resolved per turn.
    system: str | None = None
    #: Who runs this turn's tools (a lease names it), and for how long a lease holds unless renewed.
    worker: str = ""
    lease_ttl: float = 60.0
    #: Seconds a turn may take, model calls and tools together (None: no limit).
    turn_timeout: float | None = None
    #: What the model reads of the conversation (docs/runtimes.md, "Context windows"), the runtime's
    #: window (None: unknown, the whole transcript is sent) and its token counter.
    context: ContextPolicy | None = None
    context_window: int | None = None
    count_tokens: TokenCounter = estimate_tokens
    count_request_tokens: Callable[[ModelRequest], int | None] | None = None
    #: The kinds of parts the runtime reads (``AgentRuntime.accepts``): a tool's images of another
    #: kind are named to the model in a note, not shown.
    accepts: frozenset[str] = frozenset()
    #: The agent's hooks, by the point they are called at (docs/operations.md, "Hooks").
    hooks: Hooks = NO_HOOKS
    #: The agent's model settings, sent with each of its model requests.
    model_settings: ModelSettings = NO_SETTINGS
    #: The tools whose approved calls go to the agent's executor, and how long such a call waits in
    #: its queue for a worker (docs/runs.md, "Tools on a job engine").
    background: frozenset[str] = frozenset()
    queue_ttl: float = 3600.0
    #: How many calls of one answer that need no approval may run at a time (docs/runs.md, "Tools
    #: side by side"); 1: one after the other.
    parallel_tools: int = 1


def question_window(question_ttl: float | None, approval_ttl: float | None) -> float | None:
    """Seconds a question takes an answer: the agent's own window for questions, else its approval
    window; infinity (or neither given): no limit."""
    ttl = approval_ttl if question_ttl is None else question_ttl
    return None if ttl is None or math.isinf(ttl) else ttl
