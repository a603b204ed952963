"""A hook that appends every tool the agent ran to an audit file, one JSON object per line.

    python examples/audit_hook.py /tmp/tools.jsonl    # runs a scripted turn, then prints the file

Each line says when, in which conversation, which call of which tool, with which arguments (secret
ones arrive masked), who approved it, and how it ended:

    {"at": "2026-11-27T10:02:11+00:00", "conversation_id": "conv_...", "call_id": "tc_...",
     "tool": "delete_pod", "arguments": {"name": "web-2"}, "decided_by": "olga", "status": "executed",
     "error": null}
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from dcaf_like import Hook, HookContext, ToolCallInfo


class AuditFile(Hook):
    """Appends each executed (or failed) tool call to `path` as a JSON line."""

    name = "audit_file"

    def __init__(
        self, path: str | Path, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        self._lock = threading.Lock()  # turns of several threads append whole lines

    def after_tool(self, context: HookContext, call: ToolCallInfo) -> None:
        line = {
            "at": self.clock().isoformat(timespec="seconds"),
            "conversation_id": context.conversation_id,
            "call_id": call.id,
            "tool": call.name,
            "arguments": call.arguments,
            "decided_by": call.decided_by,
            "status": call.status,
            "error": call.error,
        }
        with self._lock, self.path.open("a", encoding="utf-8") as audit:
            audit.write(json.dumps(line, ensure_ascii=False) + "\n")


def main(path: str) -> None:
    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime, tool_call

    @tool(requires_approval=True)
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return f"pod {name} deleted"

    model = FakeRuntime([tool_call("delete_pod", name="web-2"), "web-2 is gone."])
    agent = Agent(tools=[delete_pod], runtime=model, hooks=[AuditFile(path)])
    proposed = agent.run("delete web-2")
    agent.approve(proposed.conversation_id, proposed.pending_tool_calls[0].id, user="olga")
    print(Path(path).read_text(encoding="utf-8"), end="")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tools.jsonl")
