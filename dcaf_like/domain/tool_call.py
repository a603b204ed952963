"""The ToolCall entity, its state machine, and the value objects that pin what was proposed."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dcaf_like.domain._canonical_json import canonical_json
from dcaf_like.domain.approvers import ONE_APPROVER, Approval, Approvers, NotAnApprover
from dcaf_like.domain.attachment import Attachment
from dcaf_like.domain.context import REDACTED, PlatformContext
from dcaf_like.domain.errors import (
    ApprovalExpired,
    ContextChanged,
    DomainError,
    EditNotAllowed,
    IllegalTransition,
    PolicyDenied,
    PreviewChanged,
    ToolCallAlreadyDecided,
)
from dcaf_like.domain.identity import NOBODY, Trusted
from dcaf_like.domain.merge_patch import merge_patch
from dcaf_like.domain.policy import ApprovalPolicy, PolicyDecision, Verdict


class InvalidToolInput(DomainError):
    """Tool arguments that are not a JSON object."""


@dataclass(frozen=True, slots=True)
class ToolCallId:
    """The server-minted identity of one proposed call: unguessable, so it cannot be forged."""

    value: str

    def __post_init__(self) -> None:
        if not self.value or len(self.value) > 128 or not self.value.isprintable():
            raise DomainError(f"invalid tool call id {self.value!r}")

    @classmethod
    def new(cls) -> ToolCallId:
        return cls("tc_" + secrets.token_hex(12))

    def __str__(self) -> str:
        return self.value


class ToolInput:
    """Immutable tool arguments, kept as canonical JSON so two equal inputs compare and hash equal.

    Read-only as :class:`fractions.Fraction` is: its value is a property over a private slot. The
    parsed form is kept too, once read (or known from :meth:`of`); each use gets a copy of it."""

    __slots__ = ("_nested", "_parsed", "_text")

    def __init__(self, canonical_json: str) -> None:
        self._text = canonical_json
        self._parsed: dict[str, Any] | None = None
        self._nested = False  # whether any value of the parsed form is a list or an object

    @classmethod
    def of(cls, arguments: Any) -> ToolInput:
        if not isinstance(arguments, dict):
            raise InvalidToolInput(f"tool arguments must be a JSON object, got {type(arguments).__name__}")
        try:
            normalized = _normalize(arguments)
            made = cls(canonical_json(normalized))
        except (TypeError, ValueError) as exc:
            raise InvalidToolInput(f"tool arguments are not JSON: {exc}") from exc
        if all(type(key) is str and type(value) in _SCALARS for key, value in normalized.items()):
            # Flat, text keys: the normalized copy (ours alone) is exactly what parsing the text gives.
            made._parsed = normalized
        return made

    @property
    def canonical_json(self) -> str:
        return self._text

    def as_dict(self) -> dict[str, Any]:
        """A fresh copy: changing it never changes the recorded input."""
        if self._parsed is None:
            self._parsed = json.loads(self._text)
            self._nested = any(isinstance(value, dict | list) for value in self._parsed.values())
        if self._nested:
            return {key: _copy(value) for key, value in self._parsed.items()}
        return dict(self._parsed)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ToolInput):
            return self._text == other._text
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._text)

    def __repr__(self) -> str:
        return f"ToolInput({self._text})"


# Values that read back from JSON as the same type and value (a float is normalized first).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _normalize(value: Any) -> Any:
    """Integral floats become ints, so ``1.0`` and ``1`` (which a JavaScript client cannot tell apart)
    compare equal after a round trip through a browser."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    return value


def _copy(value: Any) -> Any:
    """A copy of a parsed JSON value that shares no list or dict with it."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


#: How a preview reads: a unified diff, a JSON document, or plain text.
PREVIEW_KINDS = ("diff", "json", "text")


def preview_kind(text: str) -> str:
    """``diff`` for a unified diff (its ``---``/``+++`` or ``@@`` lines), ``json`` for a JSON object
    or array, else ``text``."""
    lines = text.splitlines()
    if any(line.startswith("@@") for line in lines) or (
        any(line.startswith("--- ") for line in lines) and any(line.startswith("+++ ") for line in lines)
    ):
        return "diff"
    if text.lstrip()[:1] in ("{", "["):
        try:
            json.loads(text)
        except ValueError:
            return "text"
        return "json"
    return "text"


def fingerprint(tool_name: str, tool_input: ToolInput) -> str:
    """What an approval binds to: the tool name and the canonical JSON of its arguments."""
    return hashlib.sha256(f"{tool_name}\x00{tool_input.canonical_json}".encode()).hexdigest()


class CallOutcome(StrEnum):
    """How a finished call ended, in seed 001's ``ToolStatus`` terms (docs/protocol.md, "A call's
    outcome"): what a client tells apart without reading the error's text."""

    SUCCESS = "success"  # it ran and returned
    ERROR = "error"  # it ran and raised, or its worker stopped it (interrupted), or a question declined
    TIMEOUT = "timeout"  # its own or the turn's time limit ran out, while it ran or before it started
    UNAUTHORIZED = "unauthorized"  # refused: by a person, the policy, or a ``before_tool`` hook
    NOT_FOUND = "not_found"  # its tool is not (or no longer) one of the agent's
    CANCELLED = "cancelled"  # the run was cancelled before it ran


def outcome_of(status: str, error: str | None) -> CallOutcome | None:
    """The outcome of a call recorded before outcomes were (its status and error's text, as the
    server wrote them then); None while it waits or runs."""
    if status == "executed":
        return CallOutcome.SUCCESS
    if status == "rejected":
        return CallOutcome.UNAUTHORIZED
    if status not in ("failed", "interrupted"):
        return None
    text = error or ""
    if "is no longer available" in text or "unknown tool" in text:
        return CallOutcome.NOT_FOUND
    if "refused by the hook" in text:
        return CallOutcome.UNAUTHORIZED
    if "was cancelled before it" in text:
        return CallOutcome.CANCELLED
    if "time limit" in text or "timed out" in text:
        return CallOutcome.TIMEOUT
    return CallOutcome.ERROR


class ToolCallStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXECUTED = "executed"
    FAILED = "failed"
    #: Claimed to run, and its run ended without a result (a crashed or killed worker, a lease that
    #: ran out): it may or may not have run. Never run again; running it again is a new proposal.
    INTERRUPTED = "interrupted"
    #: Its tool asked the user a question before acting (a Question is open for it): it holds no lease
    #: and waits, as a pending call waits for approval. The answer claims it again to run anew.
    ASKING = "asking"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {ToolCallStatus.REJECTED, ToolCallStatus.EXECUTED, ToolCallStatus.FAILED, ToolCallStatus.INTERRUPTED}
)

# The whole state machine. PENDING -> FAILED is a call that could not run at all (unknown tool,
# arguments that fail the schema); it never reaches a tool. APPROVED -> INTERRUPTED is a call whose
# run's lease ran out with no result recorded: its outcome is unknown. APPROVED -> ASKING is a tool that
# asked the user before it acted; ASKING -> APPROVED is the answer, claiming it to run again with it;
# ASKING -> FAILED is a question the user declined. APPROVED -> PENDING is a call whose preview, run
# again just before it would run, said something else (the world changed since it was approved): it
# waits again, its new preview bound to the next approval (ADR 38).
_TRANSITIONS: frozenset[tuple[ToolCallStatus, ToolCallStatus]] = frozenset(
    {
        (ToolCallStatus.PENDING, ToolCallStatus.APPROVED),
        (ToolCallStatus.PENDING, ToolCallStatus.REJECTED),
        (ToolCallStatus.PENDING, ToolCallStatus.FAILED),
        (ToolCallStatus.APPROVED, ToolCallStatus.EXECUTED),
        (ToolCallStatus.APPROVED, ToolCallStatus.FAILED),
        (ToolCallStatus.APPROVED, ToolCallStatus.INTERRUPTED),
        (ToolCallStatus.APPROVED, ToolCallStatus.ASKING),
        (ToolCallStatus.APPROVED, ToolCallStatus.PENDING),
        (ToolCallStatus.ASKING, ToolCallStatus.APPROVED),
        (ToolCallStatus.ASKING, ToolCallStatus.FAILED),
    }
)


def can_transition(from_status: ToolCallStatus, to_status: ToolCallStatus) -> bool:
    return (from_status, to_status) in _TRANSITIONS


class DeciderKind(StrEnum):
    """What decided a call, recorded apart from the name it decided under: a name is whatever an API
    key's identity says (a key may be called "policy"), so it never tells a person from the server."""

    HUMAN = "human"  # a person, through a request (HTTP, A2A, ``agent.approve``)
    APPROVER = "approver"  # the agent's synchronous approver callback, during the run
    POLICY = "policy"  # the approval policy, when the call was proposed
    SYSTEM = "system"  # the server itself: an approval window that closed
    GRANT = "grant"  # a standing grant an approver gave ahead of time (docs/approvals.md, "Grants")


@dataclass(eq=False, slots=True)
class ToolCall:
    """One call the agent proposed. Its input is fixed at proposal; every change goes through `_move`."""

    id: ToolCallId
    name: str
    proposed_input: ToolInput
    requires_approval: bool = True
    editable: bool = False
    description: str = ""
    proposed_at: float = 0.0
    expires_at: float | None = None
    status: ToolCallStatus = ToolCallStatus.PENDING
    approved_input: ToolInput | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    # Why it was rejected: the approver's reason, or the policy's denial (``denied by policy: ...``).
    rejection_reason: str | None = None
    result: str | None = None
    error: str | None = None
    finished_at: float | None = None
    # Why it waits for a human: the policy's reason for asking, shown to the person deciding (None
    # when the policy did not ask: the call ran, or was denied, without waiting).
    approval_reason: str | None = None
    # Arguments whose values people, logs and responses never see (the tool gets them as proposed).
    secret_arguments: frozenset[str] = frozenset()
    # Who runs an approved call, and until when that claim holds unless renewed (a lease). A call
    # whose lease ran out with no result is settled as INTERRUPTED, never run again.
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    # PlatformContext.fingerprint of the context the call was proposed in (credentials left out): an
    # approval in another one is refused. None: bound to no context (a call built by hand).
    context_fingerprint: str | None = None
    # What decided (a person, the policy, ...), apart from `decided_by`, the name it decided under.
    decided_by_kind: DeciderKind | None = None
    # The images and files its result holds besides `result` (an MCP tool's image, say).
    result_attachments: tuple[Attachment, ...] = ()
    # The identity whose request led to the proposal (None: nobody was authenticated).
    requested_by: str | None = None
    # Who must approve it: today's one approver, unless its tool or the policy asks for more.
    approvers: Approvers = ONE_APPROVER
    # The approvals that count so far, of a call that needs more than one (each bound to the
    # fingerprint of what it approved: an edit leaves none that count).
    approvals: tuple[Approval, ...] = ()
    # How it ended (None while it waits or runs), and for how many seconds its tool ran (None: it
    # did not run, or ran before durations were kept).
    outcome: CallOutcome | None = None
    ran_for: float | None = None
    # What its tool declares a call may do (``read``, ``reversible``, ``irreversible`` or the operator's
    # own level, :mod:`dcaf_like.domain.risk`); None: its tool declares nothing.
    risk: str | None = None
    # What the call would do, as its tool's preview said when it was proposed (docs/approvals.md, "What
    # the approver sees"): its text, how to read it (PREVIEW_KINDS), or why the preview failed.
    preview: str | None = None
    preview_kind: str | None = None
    preview_error: str | None = None
    # Came back to wait after its preview went stale: a decision must echo the new preview's digest.
    preview_bound: bool = False
    # When its approvers were reminded, and when it was escalated, under its rule's escalation (the
    # claim of the one worker that sends each notice; None: not yet).
    reminded_at: float | None = None
    escalated_at: float | None = None
    # The latest progress report of its tool, kept while it runs on a job engine's worker so that
    # anyone who reads the conversation sees it: the tool's words, and how far it got (0 to 1; None:
    # unknown). Only an approved call holds one: it goes when the call settles.
    progress: str | None = None
    progress_fraction: float | None = None

    @property
    def preview_digest(self) -> str | None:
        """What a decision that echoes the preview it was shown binds to (ADR 38); None: no preview."""
        if self.preview_kind is None and self.preview_error is None:
            return None
        shown = f"{self.preview_kind or ''}\x00{self.preview or ''}\x00{self.preview_error or ''}"
        return hashlib.sha256(shown.encode()).hexdigest()

    def previewed(self, text: str) -> None:
        """Its tool's preview said `text` (a unified diff, JSON, or plain text, told apart here)."""
        if self.status is not ToolCallStatus.PENDING:
            raise IllegalTransition(self.id.value, self.status.value, "previewed")
        self.preview, self.preview_kind, self.preview_error = text, preview_kind(text), None

    def preview_failed(self, error: str) -> None:
        """Its tool's preview failed: the call still waits, and the approver sees why it has none."""
        if self.status is not ToolCallStatus.PENDING:
            raise IllegalTransition(self.id.value, self.status.value, "previewed")
        self.preview, self.preview_kind, self.preview_error = None, None, error or "the preview failed"

    def check_preview(self, digest: str | None) -> None:
        """Refuse a decision sent against another preview than the call's (None: none was echoed)."""
        if (digest is not None or self.preview_bound) and digest != self.preview_digest:
            current = {
                "preview": self.preview,
                "preview_kind": self.preview_kind,
                "preview_error": self.preview_error,
                "preview_digest": self.preview_digest,
            }
            raise PreviewChanged(self.id.value, current)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.name, self.proposed_input)

    @property
    def approved_fingerprint(self) -> str:
        """The fingerprint of the call as it stands: its name and the arguments it would run with."""
        return fingerprint(self.name, self.effective_input)

    @property
    def counted_approvals(self) -> tuple[Approval, ...]:
        """The approvals that count for the call as it stands."""
        return self.approvers.counted(self.approvals, self.approved_fingerprint)

    @property
    def edited(self) -> bool:
        return self.approved_input is not None and self.approved_input != self.proposed_input

    @property
    def effective_input(self) -> ToolInput:
        """The arguments the tool runs with: the edited ones if a human edited them, else the proposal."""
        return self.approved_input if self.approved_input is not None else self.proposed_input

    def shown(self, tool_input: ToolInput) -> dict[str, Any]:
        """Arguments as people and logs see them: the secret ones masked."""
        arguments = tool_input.as_dict()
        if not self.secret_arguments:
            return arguments
        for name in self.secret_arguments.intersection(arguments):
            arguments[name] = REDACTED
        return arguments

    def shown_json(self, tool_input: ToolInput) -> str:
        """:meth:`shown` as canonical JSON: what a note or a record about the arguments may say."""
        if not self.secret_arguments:
            return tool_input.canonical_json
        return ToolInput.of(self.shown(tool_input)).canonical_json

    def unmasked(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments a client echoed or edited having seen them masked: a secret it left masked is
        the proposed value again (it can replace a secret, never read one)."""
        if not self.secret_arguments:
            return dict(arguments)
        proposed = self.proposed_input.as_dict()
        masked = {key for key in self.secret_arguments & proposed.keys() if arguments.get(key) == REDACTED}
        return {key: proposed[key] if key in masked else value for key, value in arguments.items()}

    def patched(self, edit: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments an approver's edit asks for: the edit (secrets left masked unmasked) merged
        onto the proposal as a JSON merge patch, so an argument the edit leaves out keeps its proposed
        value and `null` removes one. The caller validates the result against the tool's schema."""
        return merge_patch(self.proposed_input.as_dict(), self.unmasked(edit))

    def is_expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def escalated(self, now: float) -> frozenset[str]:
        """The groups its rule's escalation lets approve any stage due at `now` (docs/approvals.md,
        "Escalation"): none before its time."""
        return self.approvers.escalated(self.proposed_at, now)

    def notice_due(self, now: float) -> str | None:
        """The notice its rule's escalation owes its approvers at `now` and nobody claimed yet
        (``"reminder"``, ``"escalation"``), or None; a call that stopped waiting owes none."""
        escalation = self.approvers.escalation
        if escalation is None or self.status is not ToolCallStatus.PENDING or self.is_expired(now):
            return None
        return escalation.due(
            self.proposed_at,
            now,
            reminded=self.reminded_at is not None,
            escalated=self.escalated_at is not None,
        )

    def claim_notice(self, notice: str, *, at: float) -> None:
        """Record that `notice` is sent at `at`: saved with the conversation's compare-and-set, so of
        the workers that claim it one succeeds, and it is sent once. Refused when it is not due."""
        if self.notice_due(at) != notice:
            raise DomainError(f"tool call {self.id.value} owes no {notice} at {at}")
        if notice == "escalation":
            self.escalated_at = at
        self.reminded_at = self.reminded_at if self.reminded_at is not None else at

    def is_abandoned(self, now: float, gone: Callable[[str], bool] | None = None) -> bool:
        """Approved, and nobody holds it any more: its lease ran out (or it never had one, as calls
        stored before leases existed), or its holder is known to be `gone`, with no result recorded."""
        if self.status is not ToolCallStatus.APPROVED:
            return False
        if self.lease_expires_at is None or now >= self.lease_expires_at:
            return True
        return gone is not None and self.lease_owner is not None and gone(self.lease_owner)

    def lease(self, owner: str, *, until: float) -> None:
        """Who runs this approved call, until when; called again to renew."""
        if self.status is not ToolCallStatus.APPROVED:
            raise IllegalTransition(self.id.value, self.status.value, "leased")
        self.lease_owner = owner
        self.lease_expires_at = until

    def report_progress(self, message: str, fraction: float | None = None) -> None:
        """Its tool, running, said how far it got: kept until the next report or the call settles."""
        if self.status is not ToolCallStatus.APPROVED:
            raise IllegalTransition(self.id.value, self.status.value, "reported progress")
        self.progress, self.progress_fraction = message, fraction

    def ask(self) -> None:
        """Its tool asked the user a question before it acted: the call waits, holding no lease."""
        self._move(ToolCallStatus.ASKING)
        self.lease_owner = None
        self.lease_expires_at = None

    def resume(self, owner: str, *, until: float) -> None:
        """Its question was answered: `owner` claims it to run again, with the answer, until `until`."""
        self._move(ToolCallStatus.APPROVED)
        self.lease(owner, until=until)

    def went_stale(self, preview: str | None, *, error: str | None = None, at: float) -> None:
        """Approved, and its preview run again just before it ran says `preview`, not what was
        approved: it is not run, and waits again for an approval of the new preview (its window, if
        it has one, starts again; an edit approved with it stays). A recheck that failed (`error`)
        proves nothing fresh: the call waits too."""
        self._move(ToolCallStatus.PENDING)
        if self.expires_at is not None:
            self.expires_at = at + (self.expires_at - self.proposed_at)
        self.decided_by = self.decided_by_kind = self.decided_at = None
        self.lease_owner = self.lease_expires_at = None
        self.approvals = ()
        self.preview_bound = True
        if preview is None:
            self.preview_failed(error or "")
        else:
            self.previewed(preview)

    def _move(self, to_status: ToolCallStatus) -> None:
        if not can_transition(self.status, to_status):
            raise IllegalTransition(self.id.value, self.status.value, to_status.value)
        self.status = to_status
        if to_status is not ToolCallStatus.APPROVED:  # a report says how far a running tool got
            self.progress = self.progress_fraction = None

    def approve(
        self,
        *,
        by: str,
        at: float,
        edited_input: ToolInput | None = None,
        kind: DeciderKind = DeciderKind.HUMAN,
        context: PlatformContext | None = None,
        policy: ApprovalPolicy | None = None,
        trusted: Trusted[Any] = NOBODY,
    ) -> bool:
        """Approve the call to run with `edited_input` (if given) or as it stands (the proposal, or the
        edit an earlier approval of it made), in `context`, for the run `trusted` describes (who
        approves it, the agent's dependencies). True: the call is approved; False: the approval was
        counted and the call waits for the others its :attr:`approvers` need.

        Refused, changing nothing: an edit of a call that is not editable; a call whose window closed;
        a `context` whose fingerprint is not the proposal's (:class:`ContextChanged`); with a
        `policy`, arguments and context it denies at this moment (:class:`PolicyDenied`); and an
        approver the call's rule does not count (:class:`NotAnApprover`, :class:`AlreadyApproved`)."""
        if edited_input is not None and edited_input != self.proposed_input and not self.editable:
            raise EditNotAllowed(self.id.value, self.name)
        if self.status is not ToolCallStatus.PENDING:  # a call waiting for an answer resumes by it only
            raise ToolCallAlreadyDecided(self.id.value, self.status.value, ToolCallStatus.APPROVED.value)
        if self.is_expired(at):
            raise ApprovalExpired(self.id.value)
        if context is not None:
            self._check_context(context)
        runs_with = self.effective_input if edited_input is None else edited_input
        required = self.approvers
        if policy is not None:
            decision = self._check_policy(policy, runs_with, context or PlatformContext(), trusted)
            if decision.verdict is Verdict.REQUIRE_APPROVAL:  # a rule in force now tightens the call's
                required = required.tightened(decision.approvers)
        if not required.is_default and kind is not DeciderKind.POLICY:
            return self._count(required, runs_with, by, at, kind, policy, trusted)
        self._approved(runs_with, by, kind, at)
        return True

    def _count(
        self,
        required: Approvers,
        runs_with: ToolInput,
        by: str,
        at: float,
        kind: DeciderKind,
        policy: ApprovalPolicy | None,
        trusted: Trusted[Any],
    ) -> bool:
        """Count an approval of a call that needs more than today's one: by the authenticated
        identity, for the stage due, bound to what it approved (an edit restarts the count)."""
        if kind is not DeciderKind.HUMAN:
            raise NotAnApprover(self.id.value, by, f"it needs {required.describe()}, who approve in person")
        who = trusted.identity.name if trusted.identity is not None else by
        member_of = policy.groups_of(trusted.identity) if policy is not None else frozenset()
        approved = fingerprint(self.name, runs_with)
        earlier = required.carried(self.approvals, self.approvers)  # a rule in force now may be tighter
        stage = required.admit(
            self.id.value,
            who,
            member_of,
            requester=self.requested_by,
            approvals=earlier,
            fingerprint=approved,
            escalated=required.escalated(self.proposed_at, at),
        )
        self.approvers = required
        self.approvals = (*required.counted(earlier, approved), Approval(who, at, stage, approved))
        if required.due(self.approvals, approved) is not None:
            self.approved_input = runs_with if runs_with != self.proposed_input else None
            return False
        self._approved(runs_with, who, kind, at)
        return True

    def _approved(self, runs_with: ToolInput, by: str, kind: DeciderKind, at: float) -> None:
        self._move(ToolCallStatus.APPROVED)
        self.approved_input = runs_with if runs_with != self.proposed_input else None
        self.decided_by = by
        self.decided_by_kind = kind
        self.decided_at = at

    def _check_context(self, context: PlatformContext) -> None:
        if self.context_fingerprint is not None and context.fingerprint != self.context_fingerprint:
            raise ContextChanged(self.id.value)

    def _check_policy(
        self, policy: ApprovalPolicy, tool_input: ToolInput, context: PlatformContext, trusted: Trusted[Any]
    ) -> PolicyDecision:
        decision = policy.decide(
            self.name,
            tool_input.as_dict(),
            tool_requires_approval=self.requires_approval,
            context=context,
            trusted=trusted,
            risk=self.risk,
        )
        if decision.verdict is Verdict.DENY:
            raise PolicyDenied(self.id.value, decision.reason)
        return decision

    def reject(
        self,
        reason: str,
        *,
        by: str,
        at: float,
        kind: DeciderKind = DeciderKind.HUMAN,
        policy: ApprovalPolicy | None = None,
        trusted: Trusted[Any] = NOBODY,
    ) -> None:
        """Reject the call, under any context. A call that needs more than today's one approver is
        rejected by anyone one of its stages counts, or by its requester (who withdraws it); anyone
        else is :class:`NotAnApprover`."""
        if self.status is not ToolCallStatus.PENDING:
            raise ToolCallAlreadyDecided(self.id.value, self.status.value, ToolCallStatus.REJECTED.value)
        if kind is DeciderKind.HUMAN and not self.approvers.is_default:
            who = trusted.identity.name if trusted.identity is not None else by
            member_of = policy.groups_of(trusted.identity) if policy is not None else frozenset()
            escalated = self.escalated(at)
            if not self.approvers.may_reject(
                who, member_of, requester=self.requested_by, escalated=escalated
            ):
                detail = f"it needs {self.approvers.describe()}, and only they or its requester may reject it"
                raise NotAnApprover(self.id.value, who, detail)
        self._move(ToolCallStatus.REJECTED)
        self.outcome = CallOutcome.UNAUTHORIZED
        self.rejection_reason = reason
        self.decided_by = by
        self.decided_by_kind = kind
        self.decided_at = at

    def record_result(
        self,
        result: str,
        *,
        at: float,
        attachments: tuple[Attachment, ...] = (),
        ran_for: float | None = None,
    ) -> None:
        self._move(ToolCallStatus.EXECUTED)
        self.result = result
        self.result_attachments = attachments
        self.finished_at = at
        self.outcome, self.ran_for = CallOutcome.SUCCESS, ran_for

    def record_failure(
        self,
        error: str,
        *,
        at: float,
        outcome: CallOutcome = CallOutcome.ERROR,
        ran_for: float | None = None,
    ) -> None:
        if outcome is CallOutcome.SUCCESS:
            raise DomainError("a failure's outcome cannot be success")
        self._move(ToolCallStatus.FAILED)
        self.error = error
        self.finished_at = at
        self.outcome, self.ran_for = outcome, ran_for

    def interrupt(self, reason: str, *, at: float) -> None:
        self._move(ToolCallStatus.INTERRUPTED)
        self.error = reason
        self.finished_at = at
        self.outcome = CallOutcome.ERROR
