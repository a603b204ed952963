"""How a turn starts an approved call, and records how its run ended.

These steps yield no effect, and are the same whether the calls run one after the other or side by
side (docs/runs.md, "Tools side by side"; ADR 42): the time limit a call runs under, the lease and the
context its tool is given, the outcome written on the conversation, and the session its changes leave.
The turn (:mod:`dcaf_like.application.turn`) decides when each step happens.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from dcaf_like.application.effects import CANCELLED, TURN_TIMEOUT, RunTool, ToolOutcome
from dcaf_like.application.ports import ExecutableTool, ToolContext, ToolOutput
from dcaf_like.application.questions import answers_to, open_question
from dcaf_like.application.turn_settings import TurnSettings
from dcaf_like.domain import CallOutcome, Conversation, Question, Session, ToolCall, Trusted
from dcaf_like.domain.session import patched


@dataclass(slots=True)
class Ready:
    """An approved call that passed its checks: its tool, and the time limit it runs under (see
    :func:`tool_limit`)."""

    call: ToolCall
    tool: ExecutableTool
    timeout: float | None
    limit: str
    the_turns: bool


@dataclass(slots=True)
class Started:
    """A call the turn started: the run its driver performs, the session its tool may change, whether
    its time limit is what was left of the turn's, and when it started (``perf_counter``)."""

    call: ToolCall
    effect: RunTool
    session: Session
    the_turns: bool
    at: float
    #: Side by side: the session as the batch began, so each call's changes are merged into what its
    #: siblings changed (None: one after the other, its session is the whole new session).
    base: dict[str, Any] | None = None


def tool_limit(
    tool: ExecutableTool | None, left: float | None, turn_timeout: float | None
) -> tuple[float | None, str, bool]:
    """How long a tool may run, whose limit that is (named in the error when it runs out), and
    whether it is what is `left` of the turn's (its own otherwise)."""
    own: float | None = getattr(tool, "timeout", None)  # optional: @tool(timeout=...)
    if left is not None and (own is None or left < own):
        return left, turn_limit(turn_timeout), True
    if own is not None:
        return own, f"the tool's time limit of {own:g} s", False
    return None, "", False


def turn_limit(turn_timeout: float | None) -> str:
    """The turn's time limit, as an error names it."""
    return f"the turn's time limit of {turn_timeout:g} s"


def start(
    conversation: Conversation,
    settings: TurnSettings,
    trusted: Trusted[Any],
    ready: Ready,
    *,
    side_by_side: bool,
) -> Started:
    """Lease the call to this worker: the run its driver is to perform, with the context its tool reads."""
    call_id = ready.call.id.value
    session = Session(conversation.session)
    conversation.lease_tool_call(call_id, settings.worker, until=settings.clock() + settings.lease_ttl)
    context = ToolContext(
        conversation.id,
        call_id,
        conversation.platform_context,
        session,
        trusted.identity,
        trusted.deps,
    )
    if conversation.questions:
        context = replace(context, answers=answers_to(conversation, call_id))
    arguments = ready.call.effective_input.as_dict()
    effect = RunTool(ready.tool, arguments, context, ready.timeout, ready.limit)
    base = dict(conversation.session) if side_by_side else None
    return Started(ready.call, effect, session, ready.the_turns, time.perf_counter(), base)


def record(
    conversation: Conversation,
    settings: TurnSettings,
    started: Started,
    outcome: ToolOutcome,
    *,
    ran_for: float,
) -> Question | None:
    """Write how a started call's run ended, and keep the session changes its tool made. Returns the
    question it asked, when it waits for the user's answer (None: it finished)."""
    call_id, now = started.call.id.value, settings.clock()
    asked = None
    if outcome.question is not None:
        asked = open_question(conversation, call_id, outcome.question, ttl=settings.question_ttl, at=now)
    elif isinstance(outcome.output, ToolOutput):
        output = outcome.output
        conversation.record_tool_result(
            call_id, output.text, attachments=output.attachments, at=now, ran_for=ran_for
        )
    elif outcome.error is None:
        conversation.record_tool_result(call_id, outcome.output or "", at=now, ran_for=ran_for)
    else:
        kind = CallOutcome.TIMEOUT if outcome.timed_out else CallOutcome.ERROR
        conversation.record_tool_failure(call_id, outcome.error, at=now, outcome=kind, ran_for=ran_for)
    if started.session.changed:
        conversation.replace_session(_merged(conversation.session, started))
    return asked


def not_run(conversation: Conversation, call_id: str, stopped: str, why: str) -> None:
    """Fail a call the turn stopped (`stopped`, a stop reason) before it ran, saying `why`."""
    outcome = _NOT_RUN.get(stopped, CallOutcome.ERROR)
    conversation.record_tool_failure(call_id, f"not run: {why}", outcome=outcome)


def _merged(session: Mapping[str, Any], started: Started) -> dict[str, Any]:
    """The session once a started call's changes are kept: its session whole, one after the other;
    side by side, the keys it set or deleted, over the session its siblings left."""
    changed = started.session.to_dict()
    if started.base is None:
        return changed
    return patched(session, started.base, changed)


#: How a call the turn stopped before it ran ended, by why the turn stopped.
_NOT_RUN = {CANCELLED: CallOutcome.CANCELLED, TURN_TIMEOUT: CallOutcome.TIMEOUT}
