"""The two ways a call is decided: when the model proposes it (the policy's first verdict: refuse it,
fail it, allow it, or leave it waiting for people) and when someone decides it (a request's decision,
the approver's answer). Plain functions over the conversation: no I/O, no driver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dcaf_like.application.dto import ToolDecision
from dcaf_like.application.errors import InvalidToolArguments, UnknownTool
from dcaf_like.application.messages import ModelToolCall
from dcaf_like.application.turn_settings import TurnSettings
from dcaf_like.domain import (
    NOBODY,
    CallOutcome,
    Conversation,
    DeciderKind,
    DomainError,
    EditNotAllowed,
    InvalidToolInput,
    ToolCall,
    ToolCallStatus,
    ToolInput,
    Trusted,
    Verdict,
)
from dcaf_like.domain.grant import Grant
from dcaf_like.domain.risk import is_irreversible

#: Who decided a call the policy allowed or denied, in its decision record.
POLICY = "policy"


def propose(
    conversation: Conversation,
    settings: TurnSettings,
    proposed: ModelToolCall,
    trusted: Trusted[Any],
    *,
    entrance: str,
) -> ToolCall:
    """Record the model's call and settle what can be settled now: refuse it, fail it, or allow it
    (the policy's decision recorded as made through `entrance`, the request's)."""
    now = settings.clock()
    tool = settings.toolbox.get(proposed.name)
    problem = proposed.invalid_arguments
    arguments: dict[str, Any] = dict(proposed.arguments)
    if tool is None:
        known = ", ".join(sorted(settings.toolbox)) or "none"
        problem = f"unknown tool {proposed.name!r}; the tools are: {known}"
    elif problem is None:
        try:
            arguments = tool.validate(proposed.arguments)
        except InvalidToolArguments as exc:
            problem = exc.detail
    try:
        tool_input = ToolInput.of(arguments)
    except InvalidToolInput as exc:
        tool_input, problem = ToolInput.of({}), str(exc)
    call = conversation.request_tool_call(
        proposed.name,
        tool_input,
        requires_approval=tool.requires_approval if tool else True,
        editable=tool.editable if tool else False,
        description=tool.description if tool else "",
        secret_arguments=tool.secret_arguments if tool else frozenset(),
        approval_ttl=settings.approval_ttl,
        requested_by=None if trusted.identity is None else trusted.identity.name,
        risk=getattr(tool, "risk", None),  # optional, as a tool's timeout: an MCP tool declares none
        at=now,
    )
    if problem is not None or tool is None:
        unknown = CallOutcome.NOT_FOUND if tool is None else CallOutcome.ERROR
        conversation.record_tool_failure(call.id.value, f"invalid call: {problem}", at=now, outcome=unknown)
        return call
    decision = settings.policy.decide(
        tool.name,
        arguments,
        tool_requires_approval=tool.requires_approval,
        context=conversation.platform_context,
        trusted=trusted,
        risk=call.risk,
    )
    if decision.verdict is Verdict.REQUIRE_APPROVAL:
        call.approval_reason = decision.reason
        call.approvers = decision.approvers
        if decision.approvers.escalation is not None and decision.approvers.escalation.keeps_waiting:
            call.expires_at = None  # its rule keeps it waiting past the approval window
    if decision.verdict is Verdict.ALLOW:
        conversation.approve_tool_call(
            call.id.value, by=POLICY, kind=DeciderKind.POLICY, at=now, entrance=entrance
        )
    elif decision.verdict is Verdict.DENY:
        conversation.reject_tool_call(
            call.id.value,
            f"denied by policy: {decision.reason}",
            by=POLICY,
            kind=DeciderKind.POLICY,
            at=now,
            entrance=entrance,
        )
    return call


def may_be_granted(call: ToolCall) -> bool:
    """Whether a standing grant could approve `call` (docs/approvals.md, "Grants"): it waits for
    today's one approver (the policy neither allowed nor denied it, no rule asks more), and it is not
    irreversible. The turn reads the grants in force only for such a call."""
    return (
        call.status is ToolCallStatus.PENDING and call.approvers.is_default and not is_irreversible(call.risk)
    )


def approve_by_grant(
    conversation: Conversation,
    settings: TurnSettings,
    call: ToolCall,
    grants: Sequence[Grant],
    trusted: Trusted[Any],
    *,
    entrance: str,
) -> Grant | None:
    """Approve `call`, just proposed, by the first of `grants` that covers it (:meth:`Grant.covers`),
    as any approval is applied: the policy asked again, the context the proposal's. The grant, or
    None (the call still waits for a person)."""
    if not may_be_granted(call):
        return None
    now = settings.clock()
    arguments = call.proposed_input.as_dict()
    for grant in grants:
        if grant.covers(
            call.name,
            arguments,
            conversation.platform_context,
            requested_by=call.requested_by,
            risk=call.risk,
            now=now,
        ):
            try:
                conversation.approve_tool_call(
                    call.id.value,
                    by=grant.approval,
                    kind=DeciderKind.GRANT,
                    policy=settings.policy,
                    trusted=trusted,
                    at=now,
                    note=f"approved by {grant.approval}: {grant.describe()}",
                    entrance=entrance,
                )
            except DomainError:  # refused as any approval may be (the policy asked again): a person decides
                return None
            return grant
    return None


def apply_decision(
    conversation: Conversation,
    settings: TurnSettings,
    decision: ToolDecision,
    *,
    by: str,
    kind: DeciderKind = DeciderKind.HUMAN,
    at: float,
    trusted: Trusted[Any] = NOBODY,
    entrance: str,
) -> ToolCallStatus:
    """Apply a decision about a pending call, whoever made it (a request's, the approver's): the call's
    status after it, APPROVED, REJECTED, or PENDING (an approval counted, the call needing more). It
    raises, changing nothing, on a decision it refuses: an edit of a call that is not editable, edited
    arguments the tool's schema refuses, or any refusal of :meth:`Conversation.approve_tool_call` (the
    policy is asked again about the call as it would run; its rule says who counts)."""
    call = conversation.tool_call(decision.call_id)
    call_id = call.id.value
    if not decision.approve:
        conversation.reject_tool_call(
            call_id,
            decision.reason,
            by=by,
            kind=kind,
            policy=settings.policy,
            trusted=trusted,
            at=at,
            entrance=entrance,
        )
        return call.status
    call.check_preview(decision.preview_digest)
    edited = None
    if decision.edited_arguments is not None:
        if not call.editable:
            raise EditNotAllowed(call_id, call.name)
        tool = settings.toolbox.get(call.name)
        if tool is None:
            raise UnknownTool(call.name, sorted(settings.toolbox))
        edited = ToolInput.of(tool.validate(call.patched(decision.edited_arguments)))
    echoed = None if decision.arguments is None else ToolInput.of(call.unmasked(decision.arguments))
    conversation.approve_tool_call(
        call_id,
        by=by,
        kind=kind,
        tool_name=decision.tool_name,
        tool_input=echoed,
        edited_input=edited,
        policy=settings.policy,
        trusted=trusted,
        at=at,
        entrance=entrance,
    )
    return call.status
