"""A synchronous approver (a CLI prompt), asked during a run instead of suspending it: what it is
shown (:class:`PendingApproval`) and what it answers (:class:`ApprovalAnswer`)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from dcaf_like.domain import ToolCall


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """What a synchronous approver is shown about one call: `arguments` as proposed (secret ones
    masked) and `approval_reason`, why it waits (ADR 20); what its tool declares it may do (`risk`)
    and what its preview says it would do (`preview`, read as `preview_kind`; `preview_error` when the
    preview failed): the approval binds to that preview (docs/approvals.md, "What the approver sees")."""

    call_id: str
    tool_name: str
    description: str
    arguments: Mapping[str, Any]
    approval_reason: str
    editable: bool
    risk: str | None = None
    preview: str | None = None
    preview_kind: str | None = None
    preview_error: str | None = None
    preview_digest: str | None = None

    @classmethod
    def of(cls, call: ToolCall) -> PendingApproval:
        """What the approver is shown of `call`, waiting for its decision."""
        arguments = call.shown(call.proposed_input)
        return cls(
            call.id.value,
            call.name,
            call.description,
            arguments,
            call.approval_reason or "",
            call.editable,
            call.risk,
            call.preview,
            call.preview_kind,
            call.preview_error,
            call.preview_digest,
        )

    @property
    def reason(self) -> str:
        """Deprecated: :attr:`approval_reason`."""
        warnings.warn(
            "PendingApproval.reason is deprecated and goes in the next release; use "
            "PendingApproval.approval_reason",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.approval_reason


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    approved: bool
    reason: str = ""
    edited_arguments: Mapping[str, Any] | None = None


class ApprovalCallback(Protocol):
    """A synchronous approver (a CLI prompt): asked during the run instead of suspending it.
    May be a plain function or a coroutine function."""

    def __call__(self, pending: PendingApproval) -> Any: ...
