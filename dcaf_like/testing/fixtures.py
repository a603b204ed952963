"""pytest fixtures, registered as a plugin when dcaf_like is installed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dcaf_like.audit.report import AuditReport
from dcaf_like.stores.memory import InMemoryConversationRepository
from dcaf_like.testing.fake_runtime import FakeRuntime


@pytest.fixture
def fake_runtime() -> FakeRuntime:
    """An empty scripted runtime: add steps with ``fake_runtime.then(...)``."""
    return FakeRuntime()


@pytest.fixture
def memory_repository() -> InMemoryConversationRepository:
    return InMemoryConversationRepository()


@pytest.fixture
def dcaf_audit() -> Callable[..., AuditReport]:
    """``dcaf_audit(url, propose=..., ledger=..., ...)``: the approval-gate audit of the agent served at
    `url` (the options of :func:`dcaf_like.audit.run_audit`). The test fails with the report when a
    family failed; ``check=False`` returns the report whatever it says. Needs httpx."""
    from dcaf_like.audit import run_audit

    def audit(url: str, *, check: bool = True, **options: Any) -> AuditReport:
        report = run_audit(url, **options)
        if check and not report.held:
            pytest.fail(report.to_markdown(), pytrace=False)
        return report

    return audit
