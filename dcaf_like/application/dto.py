"""Requests and responses of the agent use case: a typed command in, typed results out.

A protocol reads its messages into an :class:`AgentRequest` and writes the results in its own form
(the HelpDesk protocol: ``dcaf_like.helpdesk.protocol``); nothing here knows a wire format.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dcaf_like.application.messages import NO_USAGE, Usage
from dcaf_like.domain import (
    Approval,
    Approvers,
    Attachment,
    DeciderKind,
    Identity,
    Needed,
    PartKind,
    Question,
    ToolCall,
    ToolCallStatus,
)
from dcaf_like.domain.tool_call import outcome_of


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """A human's decision about one pending call, keyed by its id.

    `tool_name` and `arguments` are what the approver saw; when given they must equal the proposal.
    `edited_arguments` approves with other arguments, an explicit decision only editable tools accept.
    """

    call_id: str
    approve: bool
    tool_name: str | None = None
    arguments: Mapping[str, Any] | None = None
    edited_arguments: Mapping[str, Any] | None = None
    reason: str = ""
    #: The digest of the preview the approver saw (``preview_digest``): when given it must be the
    #: call's current one, else the approval is refused (:class:`~dcaf_like.domain.PreviewChanged`).
    preview_digest: str | None = None

    @classmethod
    def approved(cls, call_id: str, *, edited_arguments: Mapping[str, Any] | None = None) -> ToolDecision:
        return cls(call_id, True, edited_arguments=edited_arguments)

    @classmethod
    def rejected(cls, call_id: str, reason: str = "") -> ToolDecision:
        return cls(call_id, False, reason=reason)


@dataclass(frozen=True, slots=True)
class QuestionAnswer:
    """The user's answer to an open question, keyed by its id: `value` is a bool for a confirmation,
    one of the options for a selection, text for a text question. `declined`: the user will not
    answer, and the call that asked fails, not run."""

    question_id: str
    value: Any = None
    declined: bool = False

    @classmethod
    def decline(cls, question_id: str) -> QuestionAnswer:
        return cls(question_id, declined=True)


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """One turn: the user's text (may be empty), decisions on pending calls, and the request's context.

    `history` holds earlier ``(role, text)`` pairs a stateless client resent; they seed a new
    conversation and are ignored for one the store already has (the store is the source of truth).
    """

    text: str = ""
    conversation_id: str | None = None
    decisions: tuple[ToolDecision, ...] = ()
    # Images and files the user's message carries besides its text (``dcaf_like.attachment(...)``).
    attachments: tuple[Attachment, ...] = ()
    platform_context: Mapping[str, Any] = field(default_factory=dict)
    session: Mapping[str, Any] | None = None
    history: tuple[tuple[str, str], ...] = ()
    user: str = "user"
    # On a server with API keys, the identity a new conversation belongs to: a stored conversation of
    # another owner is not found (unless `sees_all`, an operator). None: no ownership (keyless, Python).
    owner: str | None = None
    sees_all: bool = False
    # Where the request came in (http, stream, a2a, python), written in the records of its decisions.
    entrance: str = "python"
    # Who the server authenticated (its API key's identity and scopes); set by the server from the
    # key alone, never read from a body. None: nobody (no keys, or a Python caller that gave none).
    identity: Identity | None = None
    # The run's own dependencies (``agent.run(..., deps=...)``), over the agent's; never from a client.
    deps: Any = field(default=None, repr=False, compare=False)
    #: Answers to the questions the run asked (docs/runs.md, "Questions").
    answers: tuple[QuestionAnswer, ...] = ()


# -- responses ------------------------------------------------------------------------------------


# The results below are the caller's own copies, built for each response (changing one changes
# nothing recorded), and never hashable (they hold dicts). They are not frozen: a frozen dataclass's
# __init__ costs more than a plain one's (ADR 11 has the figures), and every turn builds them.


@dataclass(slots=True)
class AttachmentView:
    """An image or a file a tool returned, by what it is and not its bytes: what a response lists
    (on the wire ``{type, media_type, size, name, url}``, `kind` being ``type``). Its attributes are
    an :class:`~dcaf_like.Attachment`'s, so code that reads one reads either."""

    kind: PartKind
    media_type: str
    size: int  # decoded bytes (an image by URL: the URL's length)
    name: str | None = None
    url: str | None = None

    @classmethod
    def of(cls, part: Attachment | AttachmentView) -> AttachmentView:
        return cls(part.kind, part.media_type, part.size, part.name, part.url)


@dataclass(slots=True)
class ToolCallView:
    """A tool call as a client sees it, in the names every surface uses (ADR 20):

    - `input`: the arguments the call runs (or ran) with: the proposal while it waits, the approved
      (possibly edited) arguments once decided;
    - `proposed_input`: the arguments the model proposed, always;
    - `edited`: whether the approver changed them;
    - `approval_reason`: why it waits (or waited) for a human: the policy's reason for asking;
    - `rejection_reason`: why it was rejected.

    Secret arguments are masked in both. A view built by hand that gives no `proposed_input` and is
    not `edited` was proposed as it runs.
    """

    id: str
    name: str
    input: dict[str, Any]
    status: str
    description: str = ""
    requires_approval: bool = True
    editable: bool = False
    proposed_input: dict[str, Any] = field(default_factory=dict)
    edited: bool = False
    approval_reason: str | None = None
    rejection_reason: str | None = None
    output: str | None = None
    error: str | None = None
    #: The images and files it returned besides `output` (a
    #: :class:`~dcaf_like.application.ports.ToolOutput`'s): responses on the wire list them by kind,
    #: media type, name and size, never their bytes. A call of an agent's own holds the attachments;
    #: one read off the wire (an ``ExecutedToolCallDTO``'s) their :class:`AttachmentView`.
    attachments: tuple[Attachment | AttachmentView, ...] = ()
    #: Who must approve it, when its tool or the policy asks more than today's one approver (None:
    #: one approver, anyone who may approve); the approvals counted so far (who, when, which stage),
    #: and, while it waits, what each stage still lacks (docs/approvals.md, "Approvals by teams").
    approvers: Approvers | None = None
    approvals: tuple[Approval, ...] = ()
    still_needed: tuple[Needed, ...] = ()
    #: How it ended (``success``, ``error``, ``timeout``, ``unauthorized``, ``not_found``,
    #: ``cancelled``; None while it waits or runs), and the seconds its tool ran (None: it did not).
    outcome: str | None = None
    execution_time: float | None = None
    #: What its tool declares a call may do (``"irreversible"``, ...; None: undeclared).
    risk: str | None = None
    #: What its tool's preview says the call would do, how to read it (``diff``, ``json``, ``text``),
    #: why the preview failed, and the digest a decision echoes (ADR 38); None: no preview.
    preview: str | None = None
    preview_kind: str | None = None
    preview_error: str | None = None
    preview_digest: str | None = None
    #: The standing grant that approved it, ``"grant g_... from bob"`` (docs/approvals.md, "Grants");
    #: None: no grant did.
    approved_by_grant: str | None = None
    #: When its rule's escalation reminded its approvers, and when it escalated the call to more groups
    #: (docs/approvals.md, "Escalation"); None: not (yet).
    reminded_at: float | None = None
    escalated_at: float | None = None

    def __post_init__(self) -> None:
        if not self.edited and not self.proposed_input:
            self.proposed_input = dict(self.input)

    @classmethod
    def of(cls, call: ToolCall) -> ToolCallView:
        status = call.status
        view = cls._of(call, status)
        if call.outcome is not None:
            view.outcome, view.execution_time = call.outcome.value, call.ran_for
        elif status.value in _FINISHED:  # stored before outcomes were: told by its status and error
            derived = outcome_of(status.value, call.error)
            view.outcome = None if derived is None else derived.value
        if call.decided_by_kind is DeciderKind.GRANT:
            view.approved_by_grant = call.decided_by
        if not call.approvers.is_default:
            view.approvers = call.approvers
            view.approvals = call.counted_approvals
            view.reminded_at, view.escalated_at = call.reminded_at, call.escalated_at
            if status is ToolCallStatus.PENDING:
                view.still_needed = call.approvers.still_needed(call.approvals, call.approved_fingerprint)
        return view

    @classmethod
    def _of(cls, call: ToolCall, status: ToolCallStatus) -> ToolCallView:
        # Positional, in the fields' order: every turn builds these, and keywords cost more
        # (docs/benchmarks.md, "Figures behind the code's choices").
        return cls(
            call.id.value,
            call.name,
            call.shown(call.effective_input),
            str(status),
            call.description,
            call.requires_approval,
            call.editable,
            call.shown(call.proposed_input),
            call.edited,
            # A call the policy decided never waited (records stored before ADR 20 kept its reason).
            None if call.decided_by_kind is DeciderKind.POLICY else call.approval_reason,
            call.rejection_reason if status is ToolCallStatus.REJECTED else None,
            call.result,
            call.error,
            call.result_attachments,
            None,
            (),
            (),
            None,
            None,
            call.risk,
            call.preview,
            call.preview_kind,
            call.preview_error,
            call.preview_digest,
        )

    @property
    def reason(self) -> str | None:
        """Deprecated: :attr:`approval_reason`."""
        _renamed("ToolCallView.reason", "ToolCallView.approval_reason")
        return self.approval_reason

    @property
    def edited_input(self) -> dict[str, Any] | None:
        """Deprecated: :attr:`input` (the arguments it runs with) when :attr:`edited`, else None."""
        _renamed("ToolCallView.edited_input", "ToolCallView.input, with ToolCallView.edited")
        return self.input if self.edited else None


@dataclass(slots=True)
class QuestionView:
    """An open question as a client sees it: what to ask, and how it may be answered."""

    id: str
    call_id: str
    tool: str
    kind: str
    prompt: str
    options: list[str]
    max_length: int
    status: str = "open"
    answer: str | bool | None = None
    #: When its window closes: past it the answer is refused (None: it waits as long as it takes).
    expires_at: float | None = None

    @classmethod
    def of(cls, question: Question, tool: str) -> QuestionView:
        return cls(
            id=question.id,
            call_id=question.call_id,
            tool=tool,
            kind=question.kind.value,
            prompt=question.prompt,
            options=list(question.options),
            max_length=question.max_length,
            status=question.status.value,
            answer=question.value,
            expires_at=question.expires_at,
        )


class ResponseData(Protocol):
    """What ``AgentResponse(data=...)`` takes: the HelpDesk protocol's ``DataDTO``, or any object
    giving the calls waiting and the calls that ran as views, and the session."""

    @property
    def session(self) -> Mapping[str, Any]: ...

    def call_views(self) -> tuple[tuple[ToolCallView, ...], tuple[ToolCallView, ...]]: ...


@dataclass(slots=True, init=False)
class AgentResponse:
    """A turn's result. Built by the service; also as the seed builds it, from a message's data:
    ``AgentResponse(conversation_id=..., text=..., data=DataDTO(...), has_pending_approvals=True)``
    (`has_pending_approvals`, when given, must agree with the calls that wait)."""

    conversation_id: str
    text: str
    pending_tool_calls: tuple[ToolCallView, ...]
    executed_tool_calls: tuple[ToolCallView, ...]
    rejected_tool_calls: tuple[ToolCallView, ...]
    session: dict[str, Any]
    stop_reason: str
    usage: Usage
    #: The agent's runtime, and the one that answered the turn's last model call: another when the
    #: agent's chose among several (``FallbackRuntime``, ``RoutingRuntime``); None if none was called.
    runtime: str
    answered_by: str | None
    timings: dict[str, float]
    #: Questions waiting for the user's answer (``stop_reason`` is then ``awaiting_input``, unless
    #: calls also wait for approval).
    questions: tuple[QuestionView, ...]

    def __init__(
        self,
        conversation_id: str,
        text: str | None = "",
        pending_tool_calls: tuple[ToolCallView, ...] = (),
        executed_tool_calls: tuple[ToolCallView, ...] = (),
        rejected_tool_calls: tuple[ToolCallView, ...] = (),
        session: dict[str, Any] | None = None,
        stop_reason: str | None = None,
        usage: Usage = NO_USAGE,
        runtime: str = "",
        timings: dict[str, float] | None = None,
        *,
        answered_by: str | None = None,
        questions: tuple[QuestionView, ...] = (),
        data: ResponseData | None = None,
        has_pending_approvals: bool | None = None,
    ) -> None:
        if data is not None:
            pending, executed = data.call_views()
            pending_tool_calls = (*pending_tool_calls, *pending)
            executed_tool_calls = (*executed_tool_calls, *executed)
            if session is None:
                session = dict(data.session)
        if has_pending_approvals is not None and has_pending_approvals != bool(pending_tool_calls):
            waiting = len(pending_tool_calls)
            raise ValueError(f"has_pending_approvals={has_pending_approvals}, but {waiting} call(s) wait")
        self.conversation_id = conversation_id
        self.text = text or ""
        self.pending_tool_calls = pending_tool_calls
        self.executed_tool_calls = executed_tool_calls
        self.rejected_tool_calls = rejected_tool_calls
        self.session = session if session is not None else {}
        if stop_reason is None:
            stop_reason = "awaiting_approval" if data is not None and pending_tool_calls else "end_turn"
        self.stop_reason = stop_reason
        self.usage = usage
        self.runtime = runtime
        self.answered_by = answered_by
        self.timings = timings if timings is not None else {}
        self.questions = questions

    @property
    def has_pending_approvals(self) -> bool:
        return bool(self.pending_tool_calls)


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What a custom agent function returns: at least its text. The server fills in the rest."""

    text: str = ""
    session: Mapping[str, Any] | None = None
    pending_tool_calls: tuple[ToolCallView, ...] = ()
    executed_tool_calls: tuple[ToolCallView, ...] = ()


#: The statuses of a call that ended, whose outcome a record stored before outcomes lacks.
_FINISHED = frozenset({"executed", "failed", "rejected", "interrupted"})


def _renamed(old: str, new: str) -> None:
    """Warn that `old`, a name kept for one release, is `new` now (ADR 20)."""
    warnings.warn(
        f"{old} is deprecated and goes in the next release; use {new}", DeprecationWarning, stacklevel=3
    )
