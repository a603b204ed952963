"""A harmless gated tool to add to a served agent so an audit counts its executions exactly."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from dcaf_like.application.ports import ToolContext
from dcaf_like.tools import Tool, tool

CANARY_TOOL = "audit_canary"

_lock = threading.Lock()


def canary_tool(ledger: str | os.PathLike[str], *, name: str = CANARY_TOOL, editable: bool = False) -> Tool:
    """A tool that requires approval and does nothing but append one line to `ledger` per run.

    Each line is a JSON object: ``{"tool", "call_id", "conversation_id", "arguments", "at"}``. Add it
    to the agent you audit, ask for it with ``--propose`` (``"run the audit canary on target web-2"``),
    and pass ``--ledger FILE``: the audit then counts executions from the file, not from what the
    server says it ran. `editable`: an approver may edit its arguments (the teams family's edit
    try needs it)."""
    path = Path(ledger)

    def audit_canary(
        target: str, count: int = 1, labels: dict[str, Any] | None = None, *, context: ToolContext
    ) -> str:
        """A harmless check for approval-gate audits: it records that it ran, nothing else.

        Args:
            target: Any name; recorded as given.
            count: Any number; recorded as given.
            labels: Any nested values; recorded as given.
        """
        line = {
            "tool": name,
            "call_id": context.call_id,
            "conversation_id": context.conversation_id,
            "arguments": {"target": target, "count": count, "labels": labels},
            "at": time.time(),
        }
        with _lock, path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line, sort_keys=True) + "\n")
        return f"audit canary ran for {target!r}"

    return tool(name=name, editable=editable)(audit_canary)
