"""A provider failure as a typed error, from its HTTP status and the names it carries.

The framework adapters (LangChain, Agno, ADK) pass their providers' exceptions through, so they only
know a status code and an exception or error-code name; this is the one place that reads them.
"""

from __future__ import annotations

from dcaf_like.application.errors import (
    ModelAccessDenied,
    ModelError,
    ModelRateLimited,
    ModelRequestInvalid,
    ModelTimeout,
)

_RATE_LIMITED = ("RateLimit", "Throttl", "TooManyRequests", "ResourceExhausted")
_DENIED = ("Authentication", "PermissionDenied", "AccessDenied")


def typed_error(message: str, *, runtime: str, status: int | None, kind: str) -> ModelError:
    """`kind` is the exception's class name plus any provider error code (e.g. ``ClientError
    ThrottlingException``)."""
    if status in (429, 529) or any(k in kind for k in _RATE_LIMITED):
        return ModelRateLimited(message, runtime=runtime)
    if status == 408 or "Timeout" in kind:
        return ModelTimeout(message, runtime=runtime)
    if status in (401, 403) or any(k in kind for k in _DENIED):
        return ModelAccessDenied(message, runtime=runtime)
    if status in (400, 404, 413, 422) or "Validation" in kind:
        return ModelRequestInvalid(message, runtime=runtime)
    return ModelError(message, runtime=runtime, retryable=status is None or status >= 500)
