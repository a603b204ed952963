"""The audit trail over HTTP: ``GET /api/audit``, for keys with the ``admin`` scope.

Every decision about a tool call (who, what kind of decider, when, which call and fingerprint, through
which entrance, the outcome), and every reply to a question a call asked (answered, declined, expired,
or refused: never the answer itself), is kept by the store apart from the conversation: it outlives a deleted
conversation, and expires only by the store's own ``audit_ttl``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel

from dcaf_like.application import ports
from dcaf_like.application.errors import MissingCapability
from dcaf_like.application.ports import ConversationStore, require
from dcaf_like.application.trail import DigestWriter
from dcaf_like.concurrency.threads import in_thread
from dcaf_like.domain.trail import DigestKey, Trail, record_hash
from dcaf_like.helpdesk.wire import ErrorBody
from dcaf_like.server.auth import caller_of
from dcaf_like.server.failures import failure

logger = logging.getLogger("dcaf_like.audit")


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
    #: Its place in the store's chain (0: written before the chain) and the SHA-256 of the one before.
    seq: int = 0
    previous: str = ""


class AuditTrail(BaseModel):
    records: list[DecisionRecordOut]


def audit_routes(
    repository: Callable[[], ConversationStore],
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
            records = await require(repository(), ports.AuditTrail).adecision_records(conversation_id, limit)
        except Exception as exc:
            return failure(exc, conversation_id)
        return {"records": [record.to_dict() for record in records]}

    @router.get(
        "/api/audit/export",
        response_class=Response,
        responses={
            200: {"content": {"application/x-ndjson": {}}, "description": "The trail as JSON Lines."},
            403: {"model": ErrorBody, "description": "The API key lacks the `admin` scope."},
            503: {"model": ErrorBody, "description": "The conversation store is unavailable."},
        },
    )
    async def export(http: Request) -> Any:
        """The whole trail as JSON Lines, for a SIEM: each record in the order appended (``"type":
        "record"``, with its ``hash``), each signed digest after the record it signs (``"type":
        "digest"``), and last the chain's head (``"type": "head"``). Operators only (``admin``)."""
        try:
            caller_of(http).require("admin", "export the audit trail")
            trail = await in_thread(require(repository(), ports.AuditTrail).audit_trail)
        except Exception as exc:
            return failure(exc, None)
        return Response("".join(line + "\n" for line in json_lines(trail)), media_type="application/x-ndjson")

    return router


def json_lines(trail: Trail) -> Iterator[str]:
    """The lines of ``GET /api/audit/export``."""
    digests: dict[int, list[dict[str, Any]]] = {}
    for digest in trail.digests:
        digests.setdefault(digest.head_seq, []).append({"type": "digest", **digest.to_dict()})
    for record in trail.records:
        yield _line({"type": "record", **record.to_dict(), "hash": record_hash(record)})
        for line in digests.pop(record.seq, []) if record.seq else []:
            yield _line(line)
    for rest in digests.values():  # digests of records no longer there (expired)
        yield from map(_line, rest)
    if trail.head is not None:
        yield _line({"type": "head", "seq": trail.head.seq, "hash": trail.head.hash})


def _line(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


#: Seconds between two looks at whether a digest is due.
DIGEST_POLL = 5.0


@asynccontextmanager
async def signing(
    repository: Callable[[], ConversationStore | None],
    key: DigestKey | None,
    *,
    poll: float = DIGEST_POLL,
) -> AsyncIterator[None]:
    """While the block runs, sign the trail's head when a digest is due (every so many records or
    seconds); when it ends, once more if any record is unsigned. No key, or no store: nothing."""
    served = repository()
    if key is None or served is None:
        yield
        return
    store = require(served, ports.AuditTrail)
    if not store.keeps_digests:  # a key asks for signed digests: refused at start, not left unsigned
        raise MissingCapability(
            type(store).__name__,
            "keep signed audit digests",
            "serve without an audit key, or use a store that keeps them "
            "(docs/operations.md, 'Proving the trail')",
        )
    writer = DigestWriter(store, key)

    async def tick(force: bool) -> None:
        try:
            await in_thread(writer.tick, force=force)
        except Exception as exc:  # the store is down: the next look tries again
            logger.warning("audit digest not written: %s", type(exc).__name__)

    async def every() -> None:
        while True:
            await asyncio.sleep(poll)
            await tick(False)

    task = asyncio.create_task(every())
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await tick(True)
