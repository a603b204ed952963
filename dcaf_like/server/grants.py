"""``/api/grants``: standing grants, made, listed and revoked over HTTP (docs/approvals.md, "Grants").
The routes parse and answer; the use case (:class:`~dcaf_like.application.grants.Grants`) checks the
``approve`` scope, makes, keeps and audits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from dcaf_like.application.grants import Grants
from dcaf_like.application.ports import ConversationStore
from dcaf_like.domain.grant import ANY_REQUESTER, MAX_GRANT_SECONDS, Grant
from dcaf_like.helpdesk.wire import ErrorBody
from dcaf_like.server.auth import caller_of
from dcaf_like.server.failures import failure

Condition = str | int | float | bool | list[str | int | float | bool]


class GrantIn(BaseModel):
    """A grant asked for: which calls it approves, whose, for how long."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(max_length=128, description="The tool whose calls it approves.")
    requester: str = Field(
        max_length=128,
        description=f"Whose requests it covers (an API key's identity), or {ANY_REQUESTER!r}: anyone.",
    )
    duration: float = Field(
        description=f"Seconds it lasts, by the agent's clock: at most {MAX_GRANT_SECONDS:.0f}."
    )
    arguments: dict[str, Condition] = Field(
        default_factory=dict, description="Argument name: the value it must hold, or a list of values (any)."
    )
    context: dict[str, Condition] = Field(
        default_factory=dict, description="Platform context key: the value it must hold, or a list of values."
    )
    reason: str = Field("", max_length=500)


class GrantOut(BaseModel):
    id: str
    tool: str
    requester: str
    granted_by: str
    created_at: float
    expires_at: float
    arguments: dict[str, list[Any]]
    context: dict[str, list[Any]]
    reason: str
    revoked_at: float | None
    revoked_by: str | None
    rule: str = Field(description="The grant in words.")
    active: bool = Field(description="Whether it approves calls now (not expired, not revoked).")


class GrantsOut(BaseModel):
    grants: list[GrantOut]


def grant_routes(repository: Callable[[], ConversationStore], clock: Callable[[], float]) -> APIRouter:
    router = APIRouter(prefix="/api/grants", tags=["grants"])
    responses: dict[int | str, dict[str, Any]] = {
        403: {"model": ErrorBody, "description": "The key lacks the approve scope."},
        501: {"model": ErrorBody, "description": "The store keeps no grants."},
        503: {"model": ErrorBody, "description": "The conversation store is unavailable."},
    }

    @router.post(
        "",
        response_model=GrantOut,
        status_code=201,
        responses={
            **responses,
            400: {"model": ErrorBody, "description": "A body that is not JSON."},
            422: {"model": ErrorBody, "description": "A grant that cannot be made, the field named."},
        },
    )
    async def make(http: Request, asked: GrantIn) -> Any:
        """Approve ahead of time, for `duration` seconds, the calls of `tool` whose arguments and
        platform context hold the values given, requested by `requester`. Needs ``approve``. Never
        covers a call the policy denies, an irreversible one, or one whose rule asks more approvers."""
        caller = caller_of(http)
        try:
            grant = await asyncio.to_thread(
                Grants(repository(), clock).grant,
                identity=caller.identity,
                tool=asked.tool,
                requester=asked.requester,
                duration=asked.duration,
                arguments=asked.arguments,
                context=asked.context,
                reason=asked.reason,
                entrance="http",
                anonymous=caller.name,
            )
        except Exception as exc:
            return failure(exc, None)
        return grant_record(grant, clock())

    @router.get("", response_model=GrantsOut, responses=responses)
    async def listed(
        http: Request,
        all: bool = Query(False, description="Include the expired and revoked ones."),
    ) -> Any:
        """The grants in force, newest first (with ``all=true``, expired and revoked ones too). Needs
        ``approve``."""
        try:
            grants = await asyncio.to_thread(
                Grants(repository(), clock).list_grants, identity=caller_of(http).identity, everything=all
            )
        except Exception as exc:
            return failure(exc, None)
        now = clock()
        return {"grants": [grant_record(g, now) for g in grants]}

    @router.delete(
        "/{grant_id}",
        response_model=GrantOut,
        responses={**responses, 404: {"model": ErrorBody, "description": "No grant has this id."}},
    )
    async def revoke(http: Request, grant_id: str) -> Any:
        """Revoke a grant at once: no turn that begins after approves by it. Needs ``approve``."""
        caller = caller_of(http)
        try:
            grant = await asyncio.to_thread(
                Grants(repository(), clock).revoke,
                grant_id,
                identity=caller.identity,
                entrance="http",
                anonymous=caller.name,
            )
        except Exception as exc:
            return failure(exc, None)
        return grant_record(grant, clock())

    return router


def grant_record(grant: Grant, now: float) -> dict[str, Any]:
    """A grant as ``/api/grants`` answers."""
    return {**grant.to_dict(), "rule": grant.describe(), "active": grant.is_active(now)}
