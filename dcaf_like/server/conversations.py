"""The conversation routes: list an agent's conversations, read one whole, delete one.

They read the agent's store at request time (``agent.repository``), so a store swapped after the app
was built is the one they see. Credentials are never stored, so never shown. With API keys, a caller
sees only its own conversations (an ``admin`` key sees all): another's is not found.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from dcaf_like.application.cancel import CancelRun
from dcaf_like.application.conversations import DeleteConversation, ListConversations, ReadConversation
from dcaf_like.application.dto import ToolCallView
from dcaf_like.application.notifications import approvals_of
from dcaf_like.application.ports import ConversationStore
from dcaf_like.domain import Conversation, Role, ToolCall, ToolCallStatus
from dcaf_like.helpdesk.protocol import described
from dcaf_like.helpdesk.wire import (
    APPROVAL_REASON_DOC,
    CONVERSATION_ID_PATTERN,
    EDITED_DOC,
    INPUT_DOC,
    MAX_CONVERSATION_ID,
    PROPOSED_INPUT_DOC,
    REJECTION_REASON_DOC,
    AttachmentOut,
    ErrorBody,
)
from dcaf_like.server.auth import caller_of
from dcaf_like.server.failures import failure

PREVIEW_CHARS = 200
TITLE_CHARS = 60

logger = logging.getLogger("dcaf_like.server")

ConversationIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_CONVERSATION_ID,
        pattern=CONVERSATION_ID_PATTERN,
        description="At most 128 characters of A-Z a-z 0-9 . _ : -",
    ),
]


class ConversationSummary(BaseModel):
    id: str
    title: str  # the first user message, cut to TITLE_CHARS (the id when there is none)
    created_at: float
    updated_at: float
    messages: int
    pending_tool_calls: int
    last_message: str


class UnreadableConversation(BaseModel):
    id: str
    code: str
    message: str


class ConversationList(BaseModel):
    conversations: list[ConversationSummary]
    errors: list[UnreadableConversation] = Field(
        default_factory=list,
        description="Stored conversations that cannot be read back (damaged records): listed here, "
        "not in `conversations`; the log has the details.",
    )
    next_cursor: str | None = Field(
        None, description="Pass it as `cursor` for the next page; null: this was the last."
    )


class MessageOut(BaseModel):
    role: str
    content: str
    at: float
    tool_call_ids: list[str]
    runtime: str | None = Field(
        None, description="The model runtime that wrote an assistant message (the one that answered)."
    )
    attachments: list[AttachmentOut] = Field(default_factory=list, description="Its images and files.")


class ProgressOut(BaseModel):
    """A running tool's latest report of how far it got (``context.progress``)."""

    message: str
    fraction: float | None = Field(default=None, description="0 to 1; null: the tool does not know.")


class ToolCallRecord(BaseModel):
    """A call with its decision and outcome, in the names of every form of a call (ADR 20)."""

    id: str
    name: str
    input: dict[str, Any] = Field(description=INPUT_DOC)
    proposed_input: dict[str, Any] = Field(description=PROPOSED_INPUT_DOC)
    edited: bool = Field(description=EDITED_DOC)
    status: str
    description: str
    requires_approval: bool
    editable: bool
    approval_reason: str | None = Field(description=APPROVAL_REASON_DOC)
    risk: str | None = Field(
        default=None, description="What its tool declares a call may do: read, reversible, irreversible, ..."
    )
    preview: str | None = Field(default=None, description="What its tool's preview says it would do.")
    preview_kind: str | None = Field(default=None, description="How to read the preview: diff, json or text.")
    preview_error: str | None = Field(default=None, description="Why the call has no preview.")
    preview_digest: str | None = Field(default=None, description="What an approval echoes to bind to it.")
    rejection_reason: str | None = Field(description=REJECTION_REASON_DOC)
    reason: str | None = Field(deprecated="use approval_reason; goes in the next release")
    output: str | None = Field(description="The result's text.")
    error: str | None
    attachments: list[AttachmentOut] = Field(
        default_factory=list, description="The images and files the tool returned, without their bytes."
    )
    decided_by: str | None
    decided_by_kind: str | None
    proposed_at: float
    decided_at: float | None
    finished_at: float | None
    expires_at: float | None
    #: While an approved call runs: until when its worker holds it unless renewed (docs/runs.md).
    lease_expires_at: float | None = None
    #: How it ended (docs/protocol.md, "A call's outcome"); None while it waits or runs.
    outcome: str | None = None
    #: Seconds its tool ran (None: it did not run, or ran before durations were kept).
    execution_time: float | None = None
    progress: ProgressOut | None = Field(
        default=None,
        description="While it runs on a job engine's worker: its tool's latest progress report "
        "(docs/runs.md, 'Tools on a job engine'); null: none, or the call is not running.",
    )
    approvals: dict[str, Any] | None = Field(
        default=None,
        description="Under a rule asking more than one approver (docs/approvals.md, 'Approvals by teams'): "
        "the rule, the approvals given, what it still needs, and when its approvers were reminded and it "
        "was escalated; null under today's rule of one approver.",
    )
    approved_by_grant: str | None = Field(
        default=None, description="The standing grant that approved it, 'grant g_... from bob'; null: none."
    )


class QuestionRecord(BaseModel):
    """A question a call asked the user: open, answered (with the answer), declined or expired."""

    id: str
    call_id: str
    kind: str
    prompt: str
    options: list[str]
    max_length: int
    status: str
    answer: str | bool | None
    asked_at: float
    answered_at: float | None
    answered_by: str | None
    #: When its window closes (None: no limit); past it the answer is refused.
    expires_at: float | None = None


class QueuedOut(BaseModel):
    """A user's message kept for the next model step (docs/runs.md, "A message into a running run")."""

    content: str
    at: float


class CancelOut(BaseModel):
    conversation_id: str
    cancel_requested: bool


class ConversationOut(BaseModel):
    id: str
    version: int
    created_at: float
    updated_at: float
    messages: list[MessageOut]
    tool_calls: list[ToolCallRecord]
    session: dict[str, Any]
    questions: list[QuestionRecord] = []
    queued: list[QueuedOut] = []


def conversation_routes(
    repository: Callable[[], ConversationStore], clock: Callable[[], float] = time.time
) -> APIRouter:
    router = APIRouter(prefix="/api/conversations", tags=["conversations"])
    errors: dict[int | str, dict[str, Any]] = {
        404: {"model": ErrorBody, "description": "No such conversation for this agent."},
        503: {"model": ErrorBody, "description": "The conversation store is unavailable."},
    }

    invalid = {"model": ErrorBody, "description": "A cursor this list did not give."}

    @router.get("", response_model=ConversationList, responses={422: invalid, 503: errors[503]})
    async def list_conversations(
        http: Request,
        limit: int = Query(50, ge=1, le=500, description="At most this many, most recent first."),
        cursor: str | None = Query(None, max_length=1024, description="From the previous page."),
    ) -> Any:
        """This agent's stored conversations (the caller's own, with API keys), most recently updated
        first, a page at a time: ``next_cursor`` names where the next page starts, and each page costs
        the same however many are stored. A caller who sees only its own conversations may get a page
        of fewer than ``limit`` with a cursor for more. One whose stored record cannot be read is named
        in ``errors`` (to callers who see every conversation: its owner cannot be read either) and the
        others are listed; a store that is down is a 503."""
        caller = caller_of(http)
        try:
            listed = await ListConversations(repository())(
                identity=caller.identity, limit=limit, cursor=cursor
            )
        except Exception as exc:
            return failure(exc, None)
        errors = [
            {
                "id": damaged.conversation_id,
                "code": "conversation_unreadable",
                "message": f"the stored record cannot be read ({damaged.reason.partition(':')[0]})",
            }
            for damaged in listed.unreadable
        ]
        summaries = [_summary(c) for c in listed.conversations]
        return {"conversations": summaries, "errors": errors, "next_cursor": listed.next_cursor}

    @router.get(
        "/{conversation_id}", response_model=ConversationOut, responses={404: errors[404], 503: errors[503]}
    )
    async def read_conversation(conversation_id: ConversationIdPath, http: Request) -> Any:
        """One conversation whole: messages, every tool call with its decision and outcome, session."""
        try:
            read = ReadConversation(repository())
            conversation = await read(conversation_id, identity=caller_of(http).identity)
        except Exception as exc:
            return failure(exc, conversation_id)
        return conversation_record(conversation)

    @router.post(
        "/{conversation_id}/cancel",
        status_code=202,
        response_model=CancelOut,
        responses={403: {"model": ErrorBody}, 404: errors[404], 503: errors[503]},
    )
    async def cancel_run(conversation_id: ConversationIdPath, http: Request) -> Any:
        """Stop the turn running on this conversation, on whichever worker runs it: at the model's
        answer, before its next tool, or while a tool runs (docs/runs.md, "Stopping a running tool"). Its
        response says
        ``stop_reason: "cancelled"``; the conversation stays usable. Nothing running: nothing changes.
        Needs the ``chat`` scope, and the conversation must be the caller's (another's is 404)."""
        try:
            cancel = CancelRun(repository(), clock)
            await cancel(conversation_id, identity=caller_of(http).identity, entrance="http")
        except Exception as exc:
            return failure(exc, conversation_id)
        return {"conversation_id": conversation_id, "cancel_requested": True}

    @router.delete(
        "/{conversation_id}",
        status_code=204,
        response_class=Response,
        responses={404: errors[404], 503: errors[503]},
    )
    async def delete_conversation(conversation_id: ConversationIdPath, http: Request) -> Response:
        """Forget a conversation. Its pending calls can no longer be approved; the audit trail keeps
        the decisions made in it."""
        try:
            delete = DeleteConversation(repository(), clock)
            await delete(conversation_id, identity=caller_of(http).identity, entrance="http")
        except Exception as exc:
            return failure(exc, conversation_id)
        return Response(status_code=204)

    return router


def _updated_at(conversation: Conversation) -> float:
    times = [conversation.created_at, *(m.at for m in conversation.messages)]
    for call in conversation.tool_calls.values():
        times += [t for t in (call.proposed_at, call.decided_at, call.finished_at) if t is not None]
    return max(times)


def _summary(conversation: Conversation) -> dict[str, Any]:
    last = conversation.messages[-1].text if conversation.messages else ""
    return {
        "id": conversation.id,
        "title": _title(conversation),
        "created_at": conversation.created_at,
        "updated_at": _updated_at(conversation),
        "messages": len(conversation.messages),
        "pending_tool_calls": len(conversation.pending_tool_calls),
        "last_message": last[:PREVIEW_CHARS],
    }


def _title(conversation: Conversation) -> str:
    first = next((m.text for m in conversation.messages if m.role is Role.USER and m.text.strip()), "")
    words = " ".join(first.split())
    if not words:
        return conversation.id
    return words if len(words) <= TITLE_CHARS else words[: TITLE_CHARS - 1].rstrip() + "\u2026"


def _progress_of(call: ToolCall) -> dict[str, Any] | None:
    if call.progress is None:  # only a running call holds a report
        return None
    return {"message": call.progress, "fraction": call.progress_fraction}


def conversation_record(conversation: Conversation) -> dict[str, Any]:
    """A conversation whole, as ``GET /api/conversations/{id}`` answers (and ``dcaf-like chat`` reads
    one in this process)."""
    calls = []
    for call in conversation.tool_calls.values():
        view = ToolCallView.of(call)
        calls.append(
            {
                "id": view.id,
                "name": view.name,
                "input": view.input,
                "proposed_input": view.proposed_input,
                "edited": view.edited,
                "status": view.status,
                "description": view.description,
                "requires_approval": view.requires_approval,
                "editable": view.editable,
                "approval_reason": view.approval_reason,
                "risk": view.risk,
                "preview": view.preview,
                "preview_kind": view.preview_kind,
                "preview_error": view.preview_error,
                "preview_digest": view.preview_digest,
                "rejection_reason": view.rejection_reason,
                "reason": view.approval_reason,  # deprecated: approval_reason
                "output": view.output,
                "error": view.error,
                "attachments": [described(a) for a in view.attachments],
                "decided_by": call.decided_by,
                "decided_by_kind": None if call.decided_by_kind is None else call.decided_by_kind.value,
                "proposed_at": call.proposed_at,
                "decided_at": call.decided_at,
                "finished_at": call.finished_at,
                "expires_at": call.expires_at if call.status is ToolCallStatus.PENDING else None,
                "lease_expires_at": call.lease_expires_at if call.status is ToolCallStatus.APPROVED else None,
                "outcome": view.outcome,
                "execution_time": view.execution_time,
                "progress": _progress_of(call),
                "approvals": approvals_of(view),
                "approved_by_grant": view.approved_by_grant,
            }
        )
    return {
        "id": conversation.id,
        "version": conversation.version,
        "created_at": conversation.created_at,
        "updated_at": _updated_at(conversation),
        "messages": [
            {
                "role": m.role.value,
                "content": m.text,
                "at": m.at,
                "tool_call_ids": list(m.tool_call_ids),
                "runtime": m.runtime,
                "attachments": [described(a) for a in m.attachments],
            }
            for m in conversation.messages
        ],
        "tool_calls": calls,
        "session": dict(conversation.session),
        "questions": [
            {
                "id": q.id,
                "call_id": q.call_id,
                "kind": q.kind.value,
                "prompt": q.prompt,
                "options": list(q.options),
                "max_length": q.max_length,
                "status": q.status.value,
                "answer": q.value,
                "asked_at": q.asked_at,
                "answered_at": q.answered_at,
                "answered_by": q.answered_by,
                "expires_at": q.expires_at,
            }
            for q in conversation.questions.values()
        ],
        "queued": [{"content": q.text, "at": q.at} for q in conversation.queued],
    }
