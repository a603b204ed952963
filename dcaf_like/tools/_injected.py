"""Parameters the framework fills in, by annotation; the model never sees them."""

from __future__ import annotations

from typing import Any

from dcaf_like.application.ports import ToolContext
from dcaf_like.domain import PlatformContext, Session

_INJECTED: dict[type, str] = {Session: "session", PlatformContext: "platform_context", ToolContext: "context"}


def injected_kind(annotation: Any) -> str | None:
    """Which framework value a parameter with this annotation receives, if any."""
    return _INJECTED.get(annotation) if isinstance(annotation, type) else None
