"""`run_audit`: every family against one URL, in order, into one report."""

from __future__ import annotations

import time

import httpx

from dcaf_like.audit.families import FAMILIES
from dcaf_like.audit.options import AuditOptions
from dcaf_like.audit.report import AuditReport, FamilyResult
from dcaf_like.audit.runner import Audit, AuditAborted


def run_audit(url: str, options: AuditOptions) -> AuditReport:
    started = time.monotonic()
    audit = Audit(url, options)
    report = audit.report
    try:
        audit.discover()
        for family in FAMILIES:
            if report.error:
                name = family.__name__
                report.families.append(
                    FamilyResult(name, name.replace("_", " "), skipped=f"not run: {report.error}")
                )
                continue
            try:
                report.families.append(family(audit))
            except (AuditAborted, httpx.ConnectError) as exc:
                report.error = str(exc) if isinstance(exc, AuditAborted) else f"cannot reach {url}: {exc}"
                name = family.__name__
                report.families.append(FamilyResult(name, name.replace("_", " "), skipped=f"not run: {exc}"))
    except AuditAborted as exc:
        report.error = str(exc)
    except httpx.ConnectError as exc:
        report.error = f"cannot reach {url}: {exc}"
    finally:
        try:
            audit.clean_up()
        except httpx.TransportError:
            pass  # the server is gone: nothing is left to reject
        finally:
            audit.client.close()
            report.duration_s = time.monotonic() - started
    return report
