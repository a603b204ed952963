"""A failure answered: its JSON error body (``errors.py`` says which status and code) and its log line."""

from __future__ import annotations

from starlette.responses import JSONResponse

from dcaf_like.server.errors import HttpError, http_error
from dcaf_like.server.middleware import current_request_id, logger
from dcaf_like.server.runs import ShuttingDown


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
