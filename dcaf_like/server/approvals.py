"""``GET /api/approvals``: one inbox, every call waiting for the caller's decision across conversations
(docs/approvals.md, "One inbox"). The route parses and answers; the use case
(:class:`~dcaf_like.application.inbox.ListWaitingApprovals`) checks the scope and who may decide.

A call is decided where every decision is: a request carrying decisions only, for the item's
``conversation_id``, sending back its ``platform_context``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from dcaf_like.application.inbox import MAX_PAGE, InboxItem, ListWaitingApprovals
from dcaf_like.application.ports import ConversationStore
from dcaf_like.helpdesk.wire import ErrorBody
from dcaf_like.server.auth import caller_of
from dcaf_like.server.failures import failure


class GivenOut(BaseModel):
    by: str
    at: float
    stage: int = Field(description="The stage it counted for, from 1.")


class EligibleOut(BaseModel):
    stage: int = Field(description="From 1.")
    count: int = Field(description="How many more approvals the stage needs.")
    groups: list[str] = Field(description="Members of any of these count (none: anyone who may approve).")
    members: list[str] = Field(
        description="The people those groups list who would still count (the requester the rule keeps "
        "out and those counted already left out); a key with an approve:<group> scope counts too."
    )


class WaitingOut(BaseModel):
    conversation_id: str
    id: str = Field(description="The call's id.")
    name: str
    input: dict[str, Any] = Field(description="The arguments it would run with, secret ones masked.")
    description: str
    editable: bool
    approval_reason: str | None
    proposed_at: float
    expires_at: float | None
    requested_by: str | None
    platform_context: dict[str, Any] = Field(
        description="Where it runs (credentials never shown): send it back with the decision."
    )
    rule: str = Field(description="Who must approve it, in words.")
    stage: int = Field(description="The stage due, from 1.")
    given: list[GivenOut] = Field(description="The approvals counted so far.")
    eligible: list[EligibleOut] = Field(description="What each stage still lacks, and who may give it.")


class InboxOut(BaseModel):
    approvals: list[WaitingOut]
    next_cursor: str | None = Field(description="Pass it as `cursor` for the next page; null: the last.")


def approval_routes(
    repository: Callable[[], ConversationStore],
    groups: Mapping[str, frozenset[str]],
    clock: Callable[[], float],
) -> APIRouter:
    router = APIRouter(prefix="/api/approvals", tags=["approvals"])
    responses: dict[int | str, dict[str, Any]] = {
        403: {"model": ErrorBody, "description": "The key lacks the approve scope."},
        422: {"model": ErrorBody, "description": "A cursor this inbox did not give."},
        501: {"model": ErrorBody, "description": "The store keeps no index of waiting calls."},
        503: {"model": ErrorBody, "description": "The conversation store is unavailable."},
    }

    @router.get("", response_model=InboxOut, responses=responses)
    async def list_waiting(
        http: Request,
        cursor: str | None = Query(None, max_length=1024, description="From the previous page."),
        limit: int = Query(50, ge=1, le=MAX_PAGE, description="At most this many, newest first."),
    ) -> Any:
        """Every call waiting for the caller's decision, across conversations, newest first: those of
        its conversations under today's rule, and those whose team rule would count it now (its
        groups, not the requester the rule keeps out, not counted already). Needs ``approve``."""
        try:
            inbox = ListWaitingApprovals(repository(), groups, clock)
            caller = caller_of(http)
            page = await inbox(identity=caller.identity, owner=caller.owner, cursor=cursor, limit=limit)
        except Exception as exc:
            return failure(exc, None)
        return {"approvals": [waiting_record(item) for item in page.items], "next_cursor": page.next_cursor}

    return router


def waiting_record(item: InboxItem) -> dict[str, Any]:
    """An inbox item as ``GET /api/approvals`` answers (and ``dcaf-like approvals`` reads)."""
    call = item.call
    return {
        "conversation_id": call.conversation_id,
        "id": call.call_id,
        "name": call.name,
        "input": call.input,
        "description": call.description,
        "editable": call.editable,
        "approval_reason": call.approval_reason,
        "proposed_at": call.proposed_at,
        "expires_at": call.expires_at,
        "requested_by": call.requested_by,
        "platform_context": call.context,
        "rule": item.rule,
        "stage": item.stage + 1,
        "given": [{"by": a.by, "at": a.at, "stage": a.stage + 1} for a in call.approvals],
        "eligible": [
            {"stage": e.stage + 1, "count": e.count, "groups": sorted(e.groups), "members": sorted(e.members)}
            for e in item.eligible
        ],
    }
