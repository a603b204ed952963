"""A failure answered: its JSON error body (``errors.py`` says which status and code) and its log line."""

from __future__ import annotations

from starlette.responses import JSONResponse

from dcaf_like.application.ports import ServedAgent, arecord_decisions
from dcaf_like.server.detached import ShuttingDown
from dcaf_like.server.errors import HttpError, http_error
from dcaf_like.server.middleware import current_request_id, logger


def failure(exc: Exception, conversation_id: str | None) -> JSONResponse:
    """The answer to a request that failed with `exc`, logged."""
    error = http_error(exc, conversation_id)
    log_failure(error, exc)
    return error_response(error)


def error_response(error: HttpError) -> JSONResponse:
    response = JSONResponse(error.body(current_request_id()), status_code=error.status)
    if error.code == "shutting_down":  # a drain: the client (or its load balancer) tries another worker
        response.headers["Retry-After"] = str(ShuttingDown.retry_after)
    return response


def log_failure(error: HttpError, exc: BaseException | None) -> None:
    """A server failure with its traceback, a failing dependency as a warning, a refusal as info."""
    request_id = current_request_id()
    if error.status == 500:
        logger.error("request %s failed", request_id, exc_info=exc, extra={"request_id": request_id})
    elif error.status >= 500:
        logger.warning("request %s: %s: %s", request_id, error.code, error.message)
    else:
        logger.info("request %s refused: %s: %s", request_id, error.code, error.message)


async def audit_refused(served: ServedAgent, exc: BaseException) -> None:
    """Append to the audit trail the decisions a refusal carries (a key without ``approve``): every
    refused decision is in the trail (docs/operations.md). A store that cannot take them is logged,
    and the refusal is answered all the same."""
    refused = getattr(exc, "refused", ())
    if not refused or served.repository is None:
        return
    try:
        await arecord_decisions(served.repository, refused)
    except Exception as failed:
        logger.warning("could not record %d refused decision(s): %s", len(refused), failed)
