"""The HelpDesk protocol described once: its request and response as pydantic validates them and
FastAPI documents them, the error body every route answers with, and the rule of conversation and task
ids. Loaded when first needed (``import dcaf_like`` loads no pydantic).

The models are strict: ``"execute": "yes"`` is a type error, not an approval. They validate shape
only, for every reader alike (an HTTP body, ``Agent.run(messages)``, an A2A data part); what the shape
means (the last message is the user's, which call, which decision) is the protocol's rules, applied to
the validated body by :func:`dcaf_like.helpdesk.protocol.request_of`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

_OPEN = ConfigDict(strict=True, extra="allow")

# A conversation id a client chooses is at most 128 characters of A-Z a-z 0-9 . _ : - (the server's
# own are ``conv_`` and 24 hex digits): safe in a URL path, a store's key, a log line and a page, and
# never holding the ``~`` that separates an A2A task's number from its conversation.
MAX_CONVERSATION_ID = 128
CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9._:-]*$"
TASK_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}~[0-9]{1,9}$"
ConversationId = Annotated[
    str, StringConstraints(max_length=MAX_CONVERSATION_ID, pattern=CONVERSATION_ID_PATTERN)
]
TaskId = Annotated[str, StringConstraints(max_length=MAX_CONVERSATION_ID + 10, pattern=TASK_ID_PATTERN)]
# fullmatch, not these patterns: in Python's re, "$" also matches before a final newline.
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9._:-]*")
_TASK_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}~[0-9]{1,9}")


def is_conversation_id(value: str) -> bool:
    """Whether `value` follows the rule of conversation ids (the empty string: none given)."""
    return len(value) <= MAX_CONVERSATION_ID and _CONVERSATION_ID.fullmatch(value) is not None


def is_task_id(value: str) -> bool:
    """Whether `value` has the form of an A2A task id: a conversation id, ``~``, a number."""
    return _TASK_ID.fullmatch(value) is not None


class ToolCallIn(BaseModel):
    """A tool call as the client echoes it back, with its decision."""

    model_config = _OPEN

    id: str = Field(min_length=1, description="The id the server gave the proposed call.")
    name: str | None = Field(None, description="The tool's name; must match the proposal if sent.")
    input: dict[str, Any] | None = Field(
        None, description="The proposed arguments; must match the proposal exactly if sent."
    )
    execute: bool = Field(False, description="true approves the call.")
    edited_input: dict[str, Any] | None = Field(
        None,
        description="Approve with this patch onto the proposal (JSON merge patch; editable tools only).",
    )
    rejection_reason: str | None = Field(None, description="With execute false: reject, giving this reason.")
    rejected: bool = Field(False, description="With execute false: reject without a reason.")
    preview_digest: str | None = Field(
        None,
        description="The preview_digest of the preview the approver saw; must be the call's current one.",
    )


class AnswerIn(BaseModel):
    """The user's answer to a question the run asked (``data.questions[]`` of the response)."""

    model_config = _OPEN

    id: str = Field(min_length=1, description="The id the server gave the question.")
    value: str | bool | None = Field(
        None, description="true or false for a confirmation, one of the options for a selection, else text."
    )
    declined: bool = Field(False, description="true: the user will not answer; the call that asked fails.")


class CommandIn(BaseModel):
    """A command as the client echoes it back, with its decision. Only a command this server
    proposed (named by its id) can be approved; its argv must be the proposal's exactly."""

    model_config = _OPEN

    id: str | None = Field(None, min_length=1, description="The id the server gave the proposed command.")
    command: str | None = Field(None, description="The command line; must be the proposal's if sent.")
    argv: list[str] | None = Field(None, description="The proposed argv; must match exactly if sent.")
    execute: bool = Field(False, description="true approves the proposed command.")
    rejection_reason: str | None = Field(None, description="With execute false: reject, giving this reason.")
    rejected: bool = Field(False, description="With execute false: reject without a reason.")
    preview_digest: str | None = Field(
        None,
        description="The preview_digest of the dry run the approver saw; must be the command's current one.",
    )


_REPORTED = (
    "What ran, which only the server reports: a non-empty list on the user's turn (the last message) is "
    "refused (422); in earlier messages it is the server's answer echoed back."
)


class MessageData(BaseModel):
    model_config = _OPEN

    tool_calls: list[ToolCallIn] | None = None
    executed_tool_calls: list[dict[str, Any]] | None = Field(None, description=_REPORTED)
    rejected_tool_calls: list[dict[str, Any]] | None = None
    cmds: list[CommandIn] | None = None
    executed_cmds: list[dict[str, Any]] | None = Field(None, description=_REPORTED)
    session: dict[str, Any] | None = Field(None, description="Session state, returned as the server sent it.")
    answers: list[AnswerIn] | None = Field(None, description="Answers to the questions the run asked.")
    conversation_id: ConversationId | None = Field(
        None, description="Ties turns together (the seed's thread id)."
    )
    thread_id: ConversationId | None = None


class MessageIn(BaseModel):
    model_config = _OPEN

    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]] | None = Field(
        "",
        description=(
            "The text, or a list of parts: {type: text, text}, {type: image, url} or {type: image, "
            "media_type, data (base64)}, {type: file, name, media_type, data (base64)}; images and files "
            "in the last message only. Limits: 5 MiB a part, 10 MiB a message's parts."
        ),
    )
    data: MessageData | None = None
    platform_context: dict[str, Any] | None = None


class ChatRequest(BaseModel):
    """``messages``: the conversation as the client has it; the last message is the user's turn."""

    model_config = _OPEN

    messages: list[MessageIn] = Field(min_length=1)
    conversation_id: ConversationId | None = Field(
        None,
        description="Alternative to the last message's data. At most 128 characters of A-Z a-z 0-9 . _ : -",
    )
    platform_context: dict[str, Any] | None = None


# A call's fields in every form (ADR 20; docs/protocol.md has the table).
INPUT_DOC = (
    "The arguments the call runs (or ran) with: the proposal while it waits, the approved (possibly "
    "edited) ones once decided."
)
PROPOSED_INPUT_DOC = "The arguments the model proposed."
EDITED_DOC = "Whether the approver changed the arguments (then `input` differs from `proposed_input`)."
APPROVAL_REASON_DOC = "Why it waits (or waited) for a human: the policy's reason for asking."
REJECTION_REASON_DOC = "Why it was rejected: the approver's reason, or the policy's denial."


class _CallOut(BaseModel):
    """What every call in a response carries: which call, and the arguments as proposed and as run."""

    id: str
    name: str
    input: dict[str, Any] = Field(description=INPUT_DOC)
    proposed_input: dict[str, Any] = Field(description=PROPOSED_INPUT_DOC)
    edited: bool = Field(description=EDITED_DOC)
    approval_reason: str | None = Field(description=APPROVAL_REASON_DOC)


class ToolCallOut(_CallOut):
    """A call waiting for a decision (``data.tool_calls``)."""

    execute: bool
    tool_description: str
    editable: bool
    reason: str | None = Field(deprecated="use approval_reason; goes in the next release")


class AttachmentOut(BaseModel):
    """An image or a file a message carried or a tool returned: what it is, not its bytes (which can
    be megabytes)."""

    type: str
    media_type: str
    size: int = Field(description="Decoded bytes (an image by URL: the URL's length).")
    name: str | None = None
    url: str | None = None


class ExecutedToolCallOut(_CallOut):
    """A call that ran, failed or was interrupted (``data.executed_tool_calls``)."""

    output: str = Field(description="The result's text.")
    status: str
    error: str | None = None
    attachments: list[AttachmentOut] = Field(
        default_factory=list,
        description="The images and files the tool returned besides its text (absent when none): kept "
        "with the call and shown to the model, listed here without their bytes.",
    )


class RejectedToolCallOut(_CallOut):
    """A call that was rejected (``data.rejected_tool_calls``)."""

    rejection_reason: str | None = Field(description=REJECTION_REASON_DOC)
    reason: str | None = Field(deprecated="use rejection_reason; goes in the next release")


class QuestionOut(BaseModel):
    id: str
    call_id: str
    tool: str
    kind: Literal["text", "confirmation", "selection"]
    prompt: str
    options: list[str]
    max_length: int
    expires_at: float | None = Field(
        None,
        description="When its window closes, in seconds since the epoch; past it the answer is refused "
        "(409 question_expired). null: it waits as long as it takes.",
    )


class DataOut(BaseModel):
    conversation_id: str
    tool_calls: list[ToolCallOut]
    executed_tool_calls: list[ExecutedToolCallOut]
    rejected_tool_calls: list[RejectedToolCallOut]
    cmds: list[dict[str, Any]]
    executed_cmds: list[dict[str, Any]]
    session: dict[str, Any]
    questions: list[QuestionOut] = Field(default_factory=list)


class ChatResponse(BaseModel):
    role: Literal["assistant"]
    content: str
    data: DataOut
    meta: dict[str, Any]


class ErrorDetail(BaseModel):
    code: str
    message: str
    request_id: str
    field: str | None = None
    call_id: str | None = None
    conversation_id: str | None = None
    question_id: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail
