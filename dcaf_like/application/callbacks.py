"""What the agent's own callbacks answer, checked: its approver's answer (and the decision it makes)
and its dynamic instructions. Each may be a plain function or a coroutine function."""

from __future__ import annotations

from typing import Any

from dcaf_like.application.dto import ToolDecision
from dcaf_like.application.ports import ApprovalAnswer, PendingApproval
from dcaf_like.concurrency.bridges import resolve, resolve_sync


async def resolved(value: Any, blocking: bool) -> Any:
    """A callback's answer, awaited first if it is awaitable (on an event loop of its own if blocking)."""
    return resolve_sync(value) if blocking else await resolve(value)


def approver_answer(value: Any) -> ApprovalAnswer:
    """An approver's answer: an :class:`ApprovalAnswer`, or a bool (False: declined by the approver)."""
    if isinstance(value, ApprovalAnswer):
        return value
    if isinstance(value, bool):
        return ApprovalAnswer(approved=value, reason="" if value else "declined by the approver")
    raise TypeError(f"an approver must return ApprovalAnswer or bool, not {type(value).__name__}")


def approver_decision(shown: PendingApproval, answer: ApprovalAnswer) -> ToolDecision:
    """The decision an approver's answer makes about the call it was `shown`: bound to the preview it
    was shown (an approval of a preview that changed since is refused)."""
    return ToolDecision(
        shown.call_id,
        answer.approved,
        edited_arguments=answer.edited_arguments,
        reason=answer.reason,
        preview_digest=shown.preview_digest,
    )


def checked_instructions(value: Any) -> str:
    """Dynamic instructions' answer: a string."""
    if not isinstance(value, str):
        raise TypeError(f"dynamic instructions must return a string, not {type(value).__name__}")
    return value
