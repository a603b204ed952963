"""``dcaf-like approvals --url URL``: the inbox on the terminal (docs/approvals.md, "One inbox").

It lists the calls waiting for the key's decision across conversations (``GET /api/approvals``),
numbered, and reads a command per line: ``a N`` approves call N, ``r N REASON`` rejects it, ``n``
shows the next page, ``l`` lists again, ``q`` quits. A decision is the request every client sends
(decisions only, for the call's conversation, with its platform context): the server judges it as it
would any other, and its refusal is shown as it says it.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from typing import Any, TextIO

from dcaf_like.cli._remote import Remote, RemoteError, said

HELP = "a N: approve call N · r N REASON: reject it · n: next page · l: list again · q: quit"


class InboxError(RemoteError):
    """The server could not be asked (unreachable, or it refused the listing)."""


class RemoteInbox(Remote):
    """The inbox of the agent served at `url`, read with `api_key` when its server wants one."""

    def page(self, cursor: str | None = None, limit: int = 20) -> dict[str, Any]:
        query = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
        try:
            status, body = self.call("GET", f"/api/approvals?{urllib.parse.urlencode(query)}")
        except RemoteError as exc:
            raise InboxError(str(exc)) from exc
        if status != 200:
            raise InboxError(said(status, body))
        page: dict[str, Any] = body
        return page

    def decide(self, item: dict[str, Any], *, approve: bool, reason: str = "") -> tuple[int, dict[str, Any]]:
        """Approve or reject `item` (an entry of :meth:`page`): the server's status and answer."""
        decided: dict[str, Any] = {"id": item["id"], "name": item["name"], "input": item["input"]}
        decided |= {"execute": True} if approve else {"execute": False, "rejection_reason": reason}
        body = {
            "conversation_id": item["conversation_id"],
            "platform_context": item["platform_context"],
            "messages": [{"role": "user", "content": "", "data": {"tool_calls": [decided]}}],
        }
        try:
            return self.call("POST", "/api/chat", body)
        except RemoteError as exc:
            raise InboxError(str(exc)) from exc


def describe(number: int, item: dict[str, Any]) -> str:
    """One call of the inbox in two lines: what it runs and where, then what it still needs."""
    arguments = ", ".join(f"{k}={json.dumps(v)}" for k, v in item["input"].items())
    where = item["conversation_id"] + (f" (asked by {item['requested_by']})" if item["requested_by"] else "")
    given = ", ".join(g["by"] for g in item["given"])
    needs = "; ".join(
        f"stage {e['stage']}: {e['count']} more"
        + (f" from {' or '.join(e['groups'])}" if e["groups"] else "")
        + (f" ({', '.join(e['members'])})" if e["members"] else "")
        for e in item["eligible"]
    )
    progress = f"approved by {given}; " if given else ""
    return (
        f"[{number}] {item['name']}({arguments}) in {where}: {item['approval_reason'] or 'needs approval'}\n"
        f"    {item['rule']}: {progress}needs {needs or 'one approval'}"
    )


def run(inbox: RemoteInbox, out: TextIO, read_line: Callable[[], str], *, limit: int = 20) -> None:
    """List, then read and apply commands until ``q`` or the end of the input."""
    cursor: str | None = None
    listed: list[dict[str, Any]] = []

    def show(at: str | None) -> None:
        nonlocal cursor, listed
        page = inbox.page(at, limit)
        listed, cursor = page["approvals"], page["next_cursor"]
        if not listed:
            print("Nothing waits for your decision.", file=out)
        for number, item in enumerate(listed, 1):
            print(describe(number, item), file=out)
        print(HELP + ("" if cursor else " (last page)"), file=out, flush=True)

    show(None)
    while True:
        print("> ", end="", file=out, flush=True)
        line = read_line()
        if not line:
            return
        command, _, rest = line.strip().partition(" ")
        if command == "q":
            return
        if command in ("l", ""):
            show(None)
        elif command == "n":
            if cursor is None:
                print("That was the last page.", file=out)
            else:
                show(cursor)
        elif command in ("a", "r"):
            number, _, reason = rest.strip().partition(" ")
            if not number.isdigit() or not 1 <= int(number) <= len(listed):
                print(f"No call {number!r} on this page (1 to {len(listed)}).", file=out)
                continue
            item = listed[int(number) - 1]
            status, body = inbox.decide(item, approve=command == "a", reason=reason.strip())
            print(_outcome(item, status, body), file=out, flush=True)
        else:
            print(HELP, file=out)


def _outcome(item: dict[str, Any], status: int, body: dict[str, Any]) -> str:
    name = f"{item['name']} in {item['conversation_id']}"
    if status != 200:
        return f"Refused: {name}: {said(status, body)}"
    data = body.get("data", {})
    for call in data.get("executed_tool_calls", []):
        if call.get("id") == item["id"]:
            return f"Ran {name}: {call.get('output')}"
    for call in data.get("rejected_tool_calls", []):
        if call.get("id") == item["id"]:
            return f"Rejected {name}: {call.get('rejection_reason')}"
    for call in data.get("tool_calls", []):
        if call.get("id") == item["id"]:
            approvals = call.get("approvals") or {}
            given = ", ".join(g["by"] for g in approvals.get("given", []))
            still = sum(n["count"] for n in approvals.get("needed", []))
            return f"Counted for {name}: approved by {given}; {still} more needed"
    return f"Decided {name}."
