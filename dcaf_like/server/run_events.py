"""``GET /api/conversations/{id}/events``: a streamed run's lines after a ``seq``, for a client whose
stream dropped (docs/protocol.md, "Resuming a stream"). The route parses; the use case
(:class:`~dcaf_like.application.run_events.ReadRunEvents`) checks and reads."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from dcaf_like.application.ports import ConversationStore
from dcaf_like.application.run_events import EventsExpired, ReadRunEvents, RunLines, RunLog
from dcaf_like.helpdesk.protocol import ndjson
from dcaf_like.helpdesk.wire import ErrorBody
from dcaf_like.server.auth import caller_of
from dcaf_like.server.conversations import ConversationIdPath
from dcaf_like.server.errors import http_error
from dcaf_like.server.failures import failure
from dcaf_like.server.middleware import current_request_id

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def run_event_routes(repository: Callable[[], ConversationStore], log: RunLog) -> APIRouter:
    router = APIRouter(prefix="/api/conversations", tags=["conversations"])

    @router.get(
        "/{conversation_id}/events",
        response_model=None,
        responses={
            200: {
                "description": "NDJSON: the run's lines above `after`, as the stream sent them.",
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            },
            404: {"model": ErrorBody, "description": "No such conversation, or no run of it kept here."},
            410: {"model": ErrorBody, "description": "The lines after `after` are no longer all kept."},
            503: {"model": ErrorBody, "description": "The conversation store is unavailable."},
        },
    )
    async def run_events(
        conversation_id: ConversationIdPath,
        http: Request,
        after: int = Query(-1, ge=-1, description="The last `seq` the client saw (-1: from the start)."),
        run: str | None = Query(
            None,
            max_length=128,
            description="The run the client read: its `run_started` line's `request_id`.",
        ),
    ) -> Response:
        """The lines of the conversation's latest streamed run whose ``seq`` is above `after`, then
        those it writes until its last (``done`` or ``error``): what a client whose stream dropped has
        not seen, each line once. Kept by the server that ran it (docs/protocol.md, "Resuming a
        stream"); another server answers 404 ``run_events_not_kept``."""
        try:
            read = ReadRunEvents(repository(), log)
            lines = await read(conversation_id, identity=caller_of(http).identity, after=after, run=run)
        except Exception as exc:
            return failure(exc, conversation_id)
        return StreamingResponse(
            _encoded(lines, conversation_id), media_type="application/x-ndjson", headers=STREAM_HEADERS
        )

    return router


def sent(lines: RunLines, after: int = -1) -> AsyncIterator[bytes]:
    """A run's lines above `after` as NDJSON, as they are written, until its last."""
    return _encoded(lines.follow(after), lines.conversation_id)


async def _encoded(lines: AsyncIterator[dict[str, Any]], conversation_id: str) -> AsyncIterator[bytes]:
    try:
        async for line in lines:
            yield ndjson(line)
    except EventsExpired as exc:  # this reader fell too far behind: the line is its own, not the run's
        error = http_error(exc, conversation_id)
        yield ndjson({"type": "error", "status": error.status, **error.body(current_request_id())})
