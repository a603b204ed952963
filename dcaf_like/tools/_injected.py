"""Parameters the framework fills in, by annotation; the model never sees them."""

from __future__ import annotations

import types
import typing
from typing import Any

from dcaf_like.application.ports import ToolContext
from dcaf_like.domain import Identity, PlatformContext, Session

_INJECTED: dict[type, str] = {
    Session: "session",
    PlatformContext: "platform_context",
    ToolContext: "context",
    Identity: "identity",
}
#: ``Identity | None``: the caller, or None on a server without API keys. A bare ``Identity`` is
#: required: the call fails (fails closed) when nobody was authenticated.
IDENTITY_OR_NONE = "identity_or_none"


def injected_kind(annotation: Any) -> str | None:
    """Which framework value a parameter with this annotation receives, if any."""
    if isinstance(annotation, type):
        return _INJECTED.get(annotation)
    origin = typing.get_origin(annotation)
    if origin is ToolContext:  # ToolContext[MyDeps]
        return "context"
    if origin in (typing.Union, types.UnionType):
        members = set(typing.get_args(annotation))
        if members == {Identity, type(None)}:
            return IDENTITY_OR_NONE
    return None
