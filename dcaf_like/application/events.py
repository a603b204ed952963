"""What a streaming run yields, in the order things happen. Every event has a ``type`` string."""

from __future__ import annotations

from dataclasses import dataclass, field

from dcaf_like.application.dto import AgentResponse, QuestionView, ToolCallView
from dcaf_like.application.messages import ReasoningDelta, TextDelta


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The first event of a run whose turn began: the conversation it runs in (a new one's id too)."""

    conversation_id: str
    type: str = field(default="run_started", init=False)


@dataclass(frozen=True, slots=True)
class ToolCallProposed:
    """The model proposed a call; `call.status` says whether it waits, runs, or was refused."""

    call: ToolCallView
    type: str = field(default="tool_call_proposed", init=False)


@dataclass(frozen=True, slots=True)
class ApprovalRequired:
    """The run suspends here: these calls wait for a human decision."""

    calls: tuple[ToolCallView, ...]
    type: str = field(default="approval_required", init=False)


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call_id: str
    name: str
    type: str = field(default="tool_started", init=False)


@dataclass(frozen=True, slots=True)
class ToolQueued:
    """An approved call went to the agent's job engine: it runs in the background, and the turn does
    not wait for it (``stop_reason: "running_in_background"``; docs/runs.md, "Tools on a job engine")."""

    call: ToolCallView
    type: str = field(default="tool_queued", init=False)


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """A running tool said how far it got (``context.progress``); `fraction` is 0..1 when it knows."""

    call_id: str
    name: str
    message: str
    fraction: float | None = None
    type: str = field(default="tool_progress", init=False)


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A call ran: `call.status` is ``executed`` with `call.output`, or ``failed`` with `call.error`."""

    call: ToolCallView
    type: str = field(default="tool_finished", init=False)


@dataclass(frozen=True, slots=True)
class ToolRejected:
    """A call was refused, by a human or by the policy; `call.rejection_reason` says why."""

    call: ToolCallView
    type: str = field(default="tool_rejected", init=False)


@dataclass(frozen=True, slots=True)
class QuestionAsked:
    """A tool (or the model, through ``ask_user``) asked the user: the run suspends, once its running
    calls are done, until the question is answered (``stop_reason: "awaiting_input"``)."""

    question: QuestionView
    type: str = field(default="question_asked", init=False)


@dataclass(frozen=True, slots=True)
class UserMessageRead:
    """A user's message that was queued (sent while the run ran, or while calls waited) was added to
    the conversation: the model reads it at this step (docs/runs.md, "A message into a running run")."""

    text: str
    at: float
    type: str = field(default="user_message", init=False)


@dataclass(frozen=True, slots=True)
class Done:
    response: AgentResponse
    type: str = field(default="done", init=False)


@dataclass(frozen=True, slots=True)
class RunFailed:
    """The run stopped on an error; what had happened before it is saved."""

    error: str
    kind: str
    conversation_id: str
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    type: str = field(default="error", init=False)


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """The run saw a cancel (docs/runs.md, "Cancel"): it stops at once, or, for a plain ``def`` tool
    that does not look, once the tool ends. Sent once per turn, before the settled calls and ``Done``."""

    conversation_id: str
    type: str = field(default="cancel_requested", init=False)


StreamEvent = (
    RunStarted
    | TextDelta
    | ReasoningDelta
    | ToolCallProposed
    | ApprovalRequired
    | ToolStarted
    | ToolQueued
    | ToolProgress
    | ToolFinished
    | ToolRejected
    | QuestionAsked
    | UserMessageRead
    | CancelRequested
    | Done
    | RunFailed
)
