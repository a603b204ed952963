"""The server's sweep of reminders and escalations (docs/approvals.md, "Escalation"): it runs from the
app's start to its shutdown when a rule escalates and someone is notified, and not otherwise."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dcaf_like import Agent, ApprovalPolicy, approvers, require_approval, tool
from dcaf_like.application.notifications import ApprovalNotice, ApprovalNotifier
from dcaf_like.server.app import create_app
from dcaf_like.testing import FakeRuntime
from tests.e2e._server import until


class Quiet(ApprovalNotifier):
    def approval_required(self, notice: ApprovalNotice) -> None:
        pass


@tool
def delete_pod(name: str) -> str:
    """Delete a pod."""
    return name


def agent(rule, notifier=None) -> Agent:
    policy = ApprovalPolicy([require_approval("a lead decides", approvers=rule)])
    return Agent(
        tools=[delete_pod], runtime=FakeRuntime([]), approval_policy=policy, approval_notifier=notifier
    )


ESCALATING = approvers(1, "leads", remind_after=60)


def test_the_sweep_runs_while_the_app_does_when_a_rule_escalates_and_someone_is_notified():
    app = create_app(agent(ESCALATING, Quiet()), escalation_sweep=0.01)
    with TestClient(app):
        sweep = app.state.escalations
        assert sweep is not None
        until(lambda: sweep.sweeps >= 1, "a sweep")


@pytest.mark.parametrize(("rule", "notifier"), [(approvers(2, "leads"), Quiet()), (ESCALATING, None)])
def test_no_sweep_when_no_rule_escalates_or_nobody_is_notified(rule, notifier, monkeypatch):
    monkeypatch.delenv("DCAF_APPROVAL_WEBHOOK_URL", raising=False)
    app = create_app(agent(rule, notifier))
    with TestClient(app):
        assert app.state.escalations is None


@pytest.mark.parametrize("every", [0, -1.0])
def test_a_sweep_period_not_above_zero_is_refused_when_the_app_is_built(every):
    with pytest.raises(ValueError, match="above 0"):
        create_app(agent(ESCALATING, Quiet()), escalation_sweep=every)


def test_the_period_comes_from_the_environment_when_not_given(monkeypatch):
    monkeypatch.setenv("DCAF_ESCALATION_SWEEP", "0")
    with pytest.raises(ValueError, match="above 0"):
        create_app(agent(ESCALATING, Quiet()))
