"""``dcaf-like grants --url URL``: standing grants from the terminal (docs/approvals.md, "Grants").

``list`` (``--all`` with expired and revoked ones), ``make TOOL --requester NAME --arg KEY=VALUE
--duration SECONDS --reason TEXT``, ``revoke ID``: each the request of ``/api/grants`` any client
sends, judged by the server as it judges them all; its refusal is shown as it says it.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from dcaf_like.cli._remote import Remote, said


def describe(grant: dict[str, Any]) -> str:
    """One grant in two lines: its id, its state and its rule; who made it, why, until when."""
    if grant.get("revoked_at") is not None:
        state = f"revoked by {grant.get('revoked_by') or 'the operator'}"
    elif grant.get("active"):
        state = f"active until {_utc(grant['expires_at'])}"  # by the server's clock
    else:
        state = "expired"
    by = grant.get("granted_by") or "the operator"
    why = f": {grant['reason']}" if grant.get("reason") else ""
    return f"{grant['id']} [{state}] {grant['rule']}\n    granted by {by}{why}"


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def pairs(given: Sequence[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` items as a dict, each value read as JSON when it is JSON (``replicas=3``), else as
    text (``namespace=dev``); raises ValueError naming an item without ``=``."""
    taken: dict[str, Any] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, not {item!r}")
        try:
            taken[key] = json.loads(value)
        except ValueError:
            taken[key] = value
    return taken


def list_grants(remote: Remote, out: TextIO, *, everything: bool) -> int:
    status, body = remote.call("GET", f"/api/grants?all={'true' if everything else 'false'}")
    if status != 200:
        print(f"Refused: {said(status, body)}", file=out)
        return 2
    grants = body.get("grants", []) if isinstance(body, dict) else []
    if not grants:
        print("No grants in force." if not everything else "No grants.", file=out)
    for grant in grants:
        print(describe(grant), file=out)
    return 0


def make_grant(remote: Remote, out: TextIO, grant: dict[str, Any]) -> int:
    status, body = remote.call("POST", "/api/grants", grant)
    if status != 201:
        print(f"Refused: {said(status, body)}", file=out)
        return 2
    print(f"Made {describe(body)}", file=out)
    return 0


def revoke_grant(remote: Remote, out: TextIO, grant_id: str) -> int:
    status, body = remote.call("DELETE", f"/api/grants/{urllib.parse.quote(grant_id, safe='')}")
    if status != 200:
        print(f"Refused: {said(status, body)}", file=out)
        return 2
    print(f"Revoked {describe(body)}", file=out)
    return 0
