"""``serve(agent)`` and ``create_app(agent)``. FastAPI and uvicorn are imported only when called."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from dcaf_like.adapters.http import ServedAgent

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


def create_app(
    agent: ServedAgent | Callable[..., Any],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    title: str | None = None,
) -> FastAPI:
    """The FastAPI app serving `agent` (an Agent, or a ``(messages, context)`` function), for users
    who mount it in their own app or run it under their own server (``uvicorn --factory``, workers)."""
    from dcaf_like.adapters.http import create_app as build

    return build(agent, max_body_bytes=max_body_bytes, title=title)


def serve(
    agent: ServedAgent | Callable[..., Any],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_level: str = "info",
) -> None:
    """Serve `agent` over HTTP until interrupted. Binds to loopback unless told otherwise."""
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    app = create_app(agent, max_body_bytes=max_body_bytes)
    # Our access line carries the request id, so it replaces uvicorn's.
    log_config = {
        **LOGGING_CONFIG,
        "loggers": {
            **LOGGING_CONFIG["loggers"],
            "dcaf_like": {"handlers": ["default"], "level": log_level.upper(), "propagate": False},
        },
    }
    uvicorn.run(app, host=host, port=port, log_level=log_level, log_config=log_config, access_log=False)
