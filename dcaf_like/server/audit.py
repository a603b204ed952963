"""The audit trail over HTTP: ``GET /api/audit``, for keys with the ``admin`` scope.

Every decision about a tool call (who, what kind of decider, when, which call and fingerprint, through
which entrance, the outcome), and every reply to a question a call asked (answered, declined, expired,
or refused: never the answer itself), is kept by the store apart from the conversation: it outlives a deleted
conversation, and expires only by the store's own ``audit_ttl``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from dcaf_like.application.ports import ConversationRepository
from dcaf_like.helpdesk.wire import ErrorBody
from dcaf_like.server.auth import caller_of
from dcaf_like.server.failures import failure


class DecisionRecordOut(BaseModel):
    id: str
    at: float
    conversation_id: str
    call_id: str
    tool_name: str
    fingerprint: str
    outcome: str
    decided_by: str
    decider: str
    entrance: str
    reason: str
    #: The question a reply was to (answered, declined, expired); empty for a decision about a call.
    question_id: str = ""


class AuditTrail(BaseModel):
    records: list[DecisionRecordOut]


def audit_routes(
    repository: Callable[[], ConversationRepository],
) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get(
        "/api/audit",
        response_model=AuditTrail,
        responses={
            403: {"model": ErrorBody, "description": "The API key lacks the `admin` scope."},
            503: {"model": ErrorBody, "description": "The conversation store is unavailable."},
        },
    )
    async def audit(
        http: Request,
        conversation_id: str | None = Query(None, max_length=256, description="Only this conversation's."),
        limit: int = Query(100, ge=1, le=1000, description="At most this many, newest first."),
    ) -> Any:
        """The audit trail: every decision about a tool call and reply to a question, newest first,
        kept after its conversation is deleted. Operators only (the ``admin`` scope)."""
        try:
            caller_of(http).require("admin", "read the audit trail")
            records = await repository().adecision_records(conversation_id, limit)
        except Exception as exc:
            return failure(exc, conversation_id)
        return {"records": [record.to_dict() for record in records]}

    return router
