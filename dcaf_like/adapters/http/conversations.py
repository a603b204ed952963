"""The conversation routes: list an agent's conversations, read one whole, delete one.

They read the agent's store at request time (``agent.repository``), so a store swapped after the app
was built is the one they see. Credentials are never stored, so never shown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel

from dcaf_like.application.dto import ToolCallView
from dcaf_like.application.errors import ConversationNotFound
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.domain import Conversation, ToolCallStatus

PREVIEW_CHARS = 200


class ConversationSummary(BaseModel):
    id: str
    created_at: float
    updated_at: float
    messages: int
    pending_tool_calls: int
    last_message: str


class ConversationList(BaseModel):
    conversations: list[ConversationSummary]


class MessageOut(BaseModel):
    role: str
    content: str
    at: float
    tool_call_ids: list[str]


class ToolCallRecord(BaseModel):
    id: str
    name: str
    input: dict[str, Any]
    status: str
    description: str
    requires_approval: bool
    editable: bool
    reason: str | None
    edited_input: dict[str, Any] | None
    output: str | None
    error: str | None
    rejection_reason: str | None
    decided_by: str | None
    decided_by_kind: str | None
    proposed_at: float
    decided_at: float | None
    finished_at: float | None
    expires_at: float | None


class ConversationOut(BaseModel):
    id: str
    version: int
    created_at: float
    updated_at: float
    messages: list[MessageOut]
    tool_calls: list[ToolCallRecord]
    session: dict[str, Any]


def conversation_routes(
    repository: Callable[[], ConversationRepository],
    failure: Callable[[Exception, str | None], Response],
    error_body: type[BaseModel],
) -> APIRouter:
    router = APIRouter(prefix="/api/conversations", tags=["conversations"])
    errors: dict[int | str, dict[str, Any]] = {
        404: {"model": error_body, "description": "No such conversation for this agent."},
        503: {"model": error_body, "description": "The conversation store is unavailable."},
    }

    @router.get("", response_model=ConversationList, responses={503: errors[503]})
    async def list_conversations(
        limit: int = Query(50, ge=1, le=500, description="At most this many, most recent first."),
    ) -> Any:
        """This agent's stored conversations, most recently updated first."""
        store = repository()
        try:
            ids = await asyncio.to_thread(store.list_ids, limit)
            found = await asyncio.gather(*(store.aget(i) for i in ids))
        except Exception as exc:
            return failure(exc, None)
        return {"conversations": [_summary(c) for c in found if c is not None]}

    @router.get(
        "/{conversation_id}", response_model=ConversationOut, responses={404: errors[404], 503: errors[503]}
    )
    async def read_conversation(conversation_id: str) -> Any:
        """One conversation whole: messages, every tool call with its decision and outcome, session."""
        try:
            conversation = await repository().aget(conversation_id)
            if conversation is None:
                raise ConversationNotFound(conversation_id)
        except Exception as exc:
            return failure(exc, conversation_id)
        return _whole(conversation)

    @router.delete(
        "/{conversation_id}",
        status_code=204,
        response_class=Response,
        responses={404: errors[404], 503: errors[503]},
    )
    async def delete_conversation(conversation_id: str) -> Response:
        """Forget a conversation. Its pending calls can no longer be approved."""
        try:
            if not await asyncio.to_thread(repository().delete, conversation_id):
                raise ConversationNotFound(conversation_id)
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
        "created_at": conversation.created_at,
        "updated_at": _updated_at(conversation),
        "messages": len(conversation.messages),
        "pending_tool_calls": len(conversation.pending_tool_calls),
        "last_message": last[:PREVIEW_CHARS],
    }


def _whole(conversation: Conversation) -> dict[str, Any]:
    calls = []
    for call in conversation.tool_calls.values():
        view = ToolCallView.of(call)
        calls.append(
            {
                "id": view.id,
                "name": view.name,
                "input": view.input,
                "status": view.status,
                "description": view.description,
                "requires_approval": view.requires_approval,
                "editable": view.editable,
                "reason": view.reason,
                "edited_input": view.edited_input,
                "output": view.output,
                "error": view.error,
                "rejection_reason": view.rejection_reason,
                "decided_by": call.decided_by,
                "decided_by_kind": None if call.decided_by_kind is None else call.decided_by_kind.value,
                "proposed_at": call.proposed_at,
                "decided_at": call.decided_at,
                "finished_at": call.finished_at,
                "expires_at": call.expires_at if call.status is ToolCallStatus.PENDING else None,
            }
        )
    return {
        "id": conversation.id,
        "version": conversation.version,
        "created_at": conversation.created_at,
        "updated_at": _updated_at(conversation),
        "messages": [
            {"role": m.role.value, "content": m.text, "at": m.at, "tool_call_ids": list(m.tool_call_ids)}
            for m in conversation.messages
        ],
        "tool_calls": calls,
        "session": dict(conversation.session),
    }
