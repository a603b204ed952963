"""`run_audit`: every family against one URL, in order, into one report."""

from __future__ import annotations

import time

import httpx

from dcaf_like.audit.families import FAMILIES
from dcaf_like.audit.options import AuditOptions
from dcaf_like.audit.report import AuditReport, FamilyResult
from dcaf_like.audit.runner import Audit, AuditAborted, BudgetSpent


def run_audit(url: str, options: AuditOptions) -> AuditReport:
    started = time.monotonic()
    audit = Audit(url, options)
    report = audit.report
    try:
        try:
            audit.discover()
        except (AuditAborted, httpx.ConnectError) as exc:
            _stop(report, url, exc)
        for family in FAMILIES:
            name = family.__name__
            if not report.error:
                try:
                    audit.check_budget(f"the family {name}")
                    report.families.append(family(audit))
                    continue
                except (AuditAborted, httpx.ConnectError) as exc:
                    _stop(report, url, exc)
            why = "not reached" if report.budget_spent else "not run"
            skipped = FamilyResult(name, name.replace("_", " "), skipped=f"{why}: {report.error}")
            report.families.append(skipped)
            if report.budget_spent:
                report.unreached.append(name)
    finally:
        try:
            audit.clean_up()
        except httpx.TransportError:
            pass  # the server is gone: nothing is left to reject
        finally:
            audit.client.close()
            report.duration_s = time.monotonic() - started
            report.agent_turns = audit.client.turns
            report.model_seconds = audit.client.model_seconds
    return report


def _stop(report: AuditReport, url: str, exc: Exception) -> None:
    """Why the families from here on are not run (not reached, when the time budget ran out)."""
    if isinstance(exc, AuditAborted):
        report.error = str(exc)
        if isinstance(exc, BudgetSpent):
            report.budget_spent = True
    else:
        report.error = f"cannot reach {url}: {exc}"
