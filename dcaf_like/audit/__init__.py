"""The approval-gate audit: attacks a served HelpDesk-protocol agent as a hostile client and reports,
per attack family, what held. ``dcaf-like audit URL`` on the command line, the ``dcaf_audit`` pytest
fixture, or :func:`run_audit` here. See docs/audit.md.

:func:`canary_tool` (a harmless gated tool that records each run in a ledger) needs nothing more than
dcaf_like; running an audit needs httpx: ``pip install "dcaf-like[audit]"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dcaf_like.audit.canary import CANARY_TOOL, canary_tool
from dcaf_like.audit.options import DEFAULT_BUDGET, DEFAULT_PROPOSE, AuditOptions, Identity
from dcaf_like.audit.report import Attempt, AuditReport, FamilyResult, Verdict
from dcaf_like.extras import missing


def run_audit(
    url: str,
    *,
    api_key: str | None = None,
    propose: str | None = None,
    tool: str | None = None,
    ledger: str | Path | None = None,
    i_own_this_server: bool = False,
    max_body_bytes: int = 1 << 20,
    concurrency: int = 20,
    timeout: float = 120,
    transport: Any = None,
    budget: float | None = DEFAULT_BUDGET,
    identities: Mapping[str, str] | None = None,
    requester: str | None = None,
    outsiders: Iterable[str] = (),
    teams_propose: str | None = None,
) -> AuditReport:
    """Audit the agent served at `url` (loopback only unless `i_own_this_server`).

    The audit approves, exactly once per proposal, calls of `tool` (default: the first call that
    waits) that `propose` made the agent propose. Point it at a staging agent or a harmless gated tool
    (:func:`canary_tool`), never at one whose execution you do not want. Families not started within
    `budget` seconds (None: no limit) are reported not reached.

    `identities` (name: API key) let the teams family try what a rule needing two or more approvers
    forbids: `requester` (default: the first identity) proposes, `outsiders` are identities in none
    of the rule's groups, `teams_propose` (default: `propose`) is the requester's message
    (docs/audit.md, "Teams"). The report names them, never their keys."""
    try:
        from dcaf_like.audit import suite
    except ImportError as exc:  # pragma: no cover - depends on what is installed
        raise missing(f"the audit needs httpx ({exc})", "audit", exc) from exc
    options = AuditOptions(
        api_key=api_key,
        propose=propose or DEFAULT_PROPOSE,
        tool=tool,
        ledger=ledger,
        i_own_this_server=i_own_this_server,
        max_body_bytes=max_body_bytes,
        concurrency=concurrency,
        timeout=timeout,
        transport=transport,
        budget=budget,
        identities=tuple(Identity(name, key) for name, key in (identities or {}).items()),
        requester=requester,
        outsiders=frozenset(outsiders),
        teams_propose=teams_propose,
    )
    return suite.run_audit(url, options)


__all__ = ["CANARY_TOOL", "Attempt", "AuditReport", "FamilyResult", "Verdict", "canary_tool", "run_audit"]
