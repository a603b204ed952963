"""How a failure becomes an HTTP status and a JSON error body.

The client's mistakes are 4xx and say what was wrong; the model's failures are 502/504; anything
unforeseen is a 500 that says only the request id (its details go to the log, never to the client).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcaf_like.application.cursors import InvalidCursor
from dcaf_like.application.errors import (
    ConcurrencyConflict,
    ConversationNotFound,
    HookFailed,
    InvalidRequest,
    InvalidToolArguments,
    MissingCapability,
    MissingScope,
    ModelError,
    ModelRateLimited,
    ModelTimeout,
    NotStorable,
    StoreUnavailable,
    ToolsetUnavailable,
    UnknownTool,
    UnsupportedPart,
)
from dcaf_like.application.run_events import EventsExpired, NoRunEvents
from dcaf_like.domain import (
    AlreadyApproved,
    ApprovalExpired,
    ApprovalMismatch,
    ContextChanged,
    DomainError,
    EditNotAllowed,
    IllegalTransition,
    InvalidAnswer,
    InvalidPart,
    NotAnApprover,
    OpenQuestions,
    PartTooLarge,
    PendingToolCalls,
    PolicyDenied,
    PreviewChanged,
    QuestionClosed,
    QuestionExpired,
    ToolCallAlreadyDecided,
    UnknownQuestion,
    UnknownToolCall,
)
from dcaf_like.domain.grant import GrantNotFound, InvalidGrant
from dcaf_like.helpdesk.protocol import ReportedRuns
from dcaf_like.server.detached import ShuttingDown


@dataclass(frozen=True, slots=True)
class HttpError:
    status: int
    code: str
    message: str
    field: str | None = None
    call_id: str | None = None
    conversation_id: str | None = None
    question_id: str | None = None
    #: The call's current preview, for a decision sent against another (ADR 38).
    preview: dict[str, Any] | None = None

    @property
    def is_client_error(self) -> bool:
        return 400 <= self.status < 500

    def body(self, request_id: str) -> dict[str, Any]:
        detail: dict[str, Any] = {"code": self.code, "message": self.message, "request_id": request_id}
        for key in ("field", "call_id", "conversation_id", "question_id", "preview"):
            value = getattr(self, key)
            if value is not None:
                detail[key] = value
        return {"error": detail}


def http_error(exc: BaseException, conversation_id: str | None = None) -> HttpError:
    """The HTTP form of an exception raised while serving a request."""
    message = str(exc)
    conv = conversation_id or None
    match exc:
        case ShuttingDown():
            return HttpError(503, "shutting_down", "the server is shutting down; try again shortly")
        case NotStorable() | ReportedRuns():
            return HttpError(422, "invalid_request", exc.message, field=exc.field)
        case InvalidCursor():
            return HttpError(422, "invalid_cursor", exc.message, field=exc.field)
        case InvalidGrant():
            return HttpError(422, "invalid_grant", message, field=exc.field)
        case GrantNotFound():
            return HttpError(404, "grant_not_found", message)
        case MissingCapability():
            return HttpError(501, "missing_capability", message)
        case InvalidRequest():
            return HttpError(400, "invalid_request", exc.message, field=exc.field)
        case MissingScope():
            return HttpError(403, "missing_scope", message)
        case UnknownToolCall():
            return HttpError(404, "unknown_tool_call", message, call_id=exc.call_id, conversation_id=conv)
        case IllegalTransition():  # a decision's, in the words Python raises it with
            decided = ToolCallAlreadyDecided(exc.call_id, exc.from_status, exc.to_status)
            return HttpError(
                409, "tool_call_already_decided", str(decided), call_id=exc.call_id, conversation_id=conv
            )
        case ApprovalMismatch():
            return HttpError(409, "approval_mismatch", message, call_id=exc.call_id, conversation_id=conv)
        case PreviewChanged():
            return HttpError(
                409,
                "preview_changed",
                message,
                call_id=exc.call_id,
                conversation_id=conv,
                preview=exc.current,
            )
        case ContextChanged():
            return HttpError(409, "context_changed", message, call_id=exc.call_id, conversation_id=conv)
        case PolicyDenied():
            return HttpError(403, "policy_denied", message, call_id=exc.call_id, conversation_id=conv)
        case NotAnApprover():
            return HttpError(403, "not_an_approver", message, call_id=exc.call_id, conversation_id=conv)
        case AlreadyApproved():
            return HttpError(409, "already_approved", message, call_id=exc.call_id, conversation_id=conv)
        case EditNotAllowed():
            return HttpError(403, "edit_not_allowed", message, call_id=exc.call_id, conversation_id=conv)
        case ApprovalExpired():
            return HttpError(410, "approval_expired", message, call_id=exc.call_id, conversation_id=conv)
        case PendingToolCalls():
            return HttpError(
                409, "tool_calls_pending", message, call_id=exc.call_ids[0], conversation_id=conv
            )
        case UnknownQuestion() | QuestionClosed() | QuestionExpired() | InvalidAnswer() | OpenQuestions():
            return _question_error(exc, conv)
        case InvalidToolArguments():
            return HttpError(422, "invalid_tool_arguments", message, field="edited_input")
        case PartTooLarge():
            return HttpError(413, "part_too_large", message, field=exc.field or f"attachments[{exc.index}]")
        case InvalidPart():
            return HttpError(422, "invalid_part", message, field=exc.field or f"attachments[{exc.index}]")
        case UnsupportedPart():
            return HttpError(422, "unsupported_part", message, field=f"attachments[{exc.index}]")
        case UnknownTool():
            return HttpError(422, "unknown_tool", message)
        case ConcurrencyConflict():
            return HttpError(409, "concurrent_update", message, conversation_id=exc.conversation_id)
        case NoRunEvents():
            return HttpError(404, "run_events_not_kept", message, conversation_id=exc.conversation_id)
        case EventsExpired():
            return HttpError(410, "events_expired", message, conversation_id=exc.conversation_id)
        case ConversationNotFound():
            return HttpError(404, "conversation_not_found", message, conversation_id=exc.conversation_id)
        case DomainError():
            return HttpError(409, "conflict", message, conversation_id=conv)
        case ModelTimeout():
            return HttpError(504, "model_timeout", message, conversation_id=conv)
        case ModelRateLimited():
            return HttpError(503, "model_rate_limited", message, conversation_id=conv)
        case ModelError():
            return HttpError(502, "model_error", message, conversation_id=conv)
        case StoreUnavailable():
            return HttpError(503, "store_unavailable", message, conversation_id=conv)
        case HookFailed():  # the operator's own code: its message names the hook, not its words
            return HttpError(500, "hook_failed", message, conversation_id=conv)
        case ToolsetUnavailable():
            return HttpError(503, "toolset_unavailable", message, conversation_id=conv)
        case _:
            return HttpError(500, "internal_error", "the server failed; its log has the details")


def _question_error(exc: DomainError, conversation_id: str | None) -> HttpError:
    """A refused answer, or a message sent while questions wait: refused as a forged or replayed
    approval is, naming the question."""
    message, conv = str(exc), conversation_id
    match exc:
        case UnknownQuestion():
            return HttpError(
                404, "unknown_question", message, conversation_id=conv, question_id=exc.question_id
            )
        case QuestionClosed():
            return HttpError(
                409, "question_already_answered", message, conversation_id=conv, question_id=exc.question_id
            )
        case QuestionExpired():
            return HttpError(
                409, "question_expired", message, conversation_id=conv, question_id=exc.question_id
            )
        case InvalidAnswer():
            return HttpError(
                422,
                "invalid_answer",
                message,
                field="answers",
                conversation_id=conv,
                question_id=exc.question_id,
            )
        case OpenQuestions():
            return HttpError(
                409, "questions_open", message, conversation_id=conv, question_id=exc.question_ids[0]
            )
    raise TypeError(f"not a question's error: {type(exc).__name__}")
