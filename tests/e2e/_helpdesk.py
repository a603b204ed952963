"""HelpDesk messages as a client builds them."""

from __future__ import annotations

from typing import Any


def user(content: str = "", **data: Any) -> dict[str, Any]:
    """A HelpDesk user message; keyword arguments go to its ``data``."""
    return {"role": "user", "content": content, "data": data}


def approve(pending: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A pending call echoed back approved (as the HelpDesk UI does), optionally altered."""
    return {**pending, "execute": True, **changes}


def reject(pending: dict[str, Any], reason: str) -> dict[str, Any]:
    return {**pending, "execute": False, "rejection_reason": reason}
