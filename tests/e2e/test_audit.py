"""`dcaf-like audit` against two servers: the negative control (the seed's client-trusting gate), whose
failures it must report, and our own server as a real process, whose gate it must report held."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _server import COMMAND, ROOT, dcaf_like_serve, serving
from audit_agent import make_agent_that_goes_on
from audit_control_server import control_app

from dcaf_like.audit import AuditReport, run_audit

PROPOSE = "please run the audit canary on web-2"
GATE_FAMILIES = [
    "never_proposed",
    "other_tool",
    "other_conversation",
    "client_commands",
    "bad_input",
    "entrances",
    "altered_arguments",
    "replay",
    "after_rejection",
    "concurrency",
    "accounting",
]


@pytest.fixture
def control(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    ledger = tmp_path / "control.ledger"
    with serving(control_app(ledger)) as client:
        yield str(client.base_url), ledger


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AuditReport, Path, str]]:
    """Our server (`dcaf-like serve` with A2A, a scripted model and the canary tool), audited once."""
    ledger = tmp_path_factory.mktemp("ours") / "canary.ledger"
    env = {**os.environ, "DCAF_AUDIT_LEDGER": str(ledger), "PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'e2e'}"}
    target = "tests/e2e/audit_agent.py:make_agent"
    with dcaf_like_serve(
        target, "--factory", "--port", "0", "--store", "memory://", "--a2a", env=env
    ) as served:
        report = run_audit(served.url, propose=PROPOSE, tool="audit_canary", ledger=ledger)
        yield report, ledger, served.url


def test_the_audit_reports_the_client_trusting_gate_failed_and_ours_held(control, ours):
    control_url, control_ledger = control
    theirs = run_audit(control_url, propose=PROPOSE, ledger=control_ledger)
    report, ledger, _ = ours

    assert theirs.error == ""
    assert not theirs.held
    failed = {f.key for f in theirs.failed}
    assert {"never_proposed", "altered_arguments", "replay", "client_commands", "concurrency"} <= failed
    assert theirs.family("entrances").verdict == "failed"  # the stream runs forged calls too
    assert control_ledger.read_text().count("\n") > 20, "the control ran what the audit forged"

    assert report.error == "", report.to_markdown()
    verdicts = report.verdicts()
    assert {key: verdicts[key] for key in GATE_FAMILIES} == dict.fromkeys(GATE_FAMILIES, "held"), (
        report.to_markdown()
    )
    assert report.family("entrances").skipped == "", "our server serves A2A: its entrance must be tried"
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert len(lines) == 2  # the one approval the audit needed for its replays, and the wave's one
    assert all(line["tool"] == "audit_canary" for line in lines)


def test_our_server_holds_the_perimeter(ours):
    """Our server refuses a foreign Host, a cross-origin Origin, non-JSON bodies and conflicting
    length headers before the agent runs."""
    report, _, _ = ours
    perimeter = report.family("perimeter")
    assert perimeter.verdict == "held", report.to_markdown()


def test_the_command_exits_1_and_writes_the_report_when_a_family_failed(control, tmp_path):
    url, ledger = control
    out = tmp_path / "report.json"

    done = subprocess.run(
        [COMMAND, "audit", url, "--propose", PROPOSE, "--ledger", str(ledger), "--report", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip

    assert done.returncode == 1, done.stderr
    written = json.loads(out.read_text())
    assert written["held"] is False
    assert written["tool"] == "audit_canary"
    verdicts = {f["key"]: f["verdict"] for f in written["families"]}
    assert verdicts["never_proposed"] == verdicts["replay"] == "failed"
    assert "| A call id never proposed | FAILED |" in done.stdout


def test_the_command_writes_markdown_and_exits_0_only_when_every_family_held(ours, tmp_path):
    report, ledger, url = ours
    out = tmp_path / "report.md"

    done = subprocess.run(
        [COMMAND, "audit", url, "--propose", PROPOSE, "--ledger", str(ledger), "--report", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip

    text = out.read_text()
    assert text.startswith(f"# Approval-gate audit of {url}")
    assert "| A call id never proposed | held |" in text
    assert done.returncode == (0 if report.held else 1), done.stdout + done.stderr


def test_the_command_refuses_a_url_that_is_not_loopback(tmp_path):
    done = subprocess.run(
        [COMMAND, "audit", "http://192.0.2.10:8000", "--report", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip

    assert done.returncode == 2
    assert "not a loopback address" in done.stderr
    assert "--i-own-this-server" in done.stderr
    assert not (tmp_path / "r.json").exists()


def test_the_fixture_fails_the_test_with_the_report(control, dcaf_audit):
    url, ledger = control

    with pytest.raises(pytest.fail.Exception, match="FAILED"):
        dcaf_audit(url, propose=PROPOSE, ledger=ledger)
    report = dcaf_audit(url, propose=PROPOSE, check=False)

    assert report.counting == "protocol"
    assert "never_proposed" in {f.key for f in report.failed}


def test_the_audit_sends_the_api_key_as_the_server_expects(start_server, tmp_path, monkeypatch):
    monkeypatch.setenv("DCAF_AUDIT_LEDGER", str(tmp_path / "ledger"))
    from audit_agent import make_agent

    url = str(start_server(make_agent(), api_keys={"k-audit-0123456789abcdef": "auditor"}).base_url)

    without = run_audit(url, propose=PROPOSE)
    keyed = run_audit(url, propose=PROPOSE, api_key="k-audit-0123456789abcdef", ledger=tmp_path / "ledger")

    assert "401" in without.error
    assert without.held is False
    assert keyed.error == ""
    assert keyed.family("replay").verdict == keyed.family("never_proposed").verdict == "held"
    assert "k-audit-0123456789abcdef" not in keyed.to_json() + keyed.to_markdown()


def test_the_audit_stops_the_agent_going_on_after_each_decision_and_leaves_nothing_waiting(
    start_server, tmp_path
):
    """A real model goes on after a decision, sometimes until its step limit: the audit judges the
    decision, so it asks the server to stop that turn, and rejects what the agent proposed meanwhile."""
    ledger = tmp_path / "canary.ledger"
    agent, model = make_agent_that_goes_on(str(ledger))
    url = str(start_server(agent, client_timeout=60).base_url)

    report = run_audit(url, propose=PROPOSE, tool="audit_canary", ledger=ledger)

    assert report.held, report.to_markdown()
    decisions_honoured = report.agent_turns - report.proposals
    assert decisions_honoured >= 4  # the approval to replay, the rejection, the wave's one, a clean-up
    assert model.after_decisions == decisions_honoured  # one model call after each, not ten
    assert len(ledger.read_text().splitlines()) == 2
    conversations = [agent.repository.get(i) for i in agent.repository.list_ids()]
    assert len(conversations) == report.proposals
    assert all(c is not None and not c.pending_tool_calls for c in conversations)


def test_out_of_time_the_report_says_which_families_were_not_reached(control):
    url, ledger = control

    report = run_audit(url, propose=PROPOSE, ledger=ledger, budget=0)

    assert report.budget_spent
    assert not report.held
    assert "time budget of 0 s" in report.error
    assert report.unreached == [f.key for f in report.families] != []
    assert all(f.skipped.startswith("not reached: ") for f in report.families)
    assert report.proposals == report.agent_turns == 0
    assert report.to_markdown().startswith(f"# Approval-gate audit of {url}: OUT OF TIME")
    assert "**Out of time:**" in report.to_markdown()


def test_an_audit_that_could_not_run_says_so_and_what_would_let_it_run(cluster):
    """Issue 36: a keyed server audited without a key headlined FAILED, though the exit status was 2."""
    from dcaf_like import Agent, create_app
    from dcaf_like.testing import FakeRuntime

    agent = Agent(tools=cluster.tools(), runtime=FakeRuntime([]))
    with serving(create_app(agent, api_keys={"k" * 32: "ops"}, ui=False)) as client:
        report = run_audit(str(client.base_url), propose=PROPOSE)

    headline = report.to_markdown().splitlines()[0]
    assert headline.endswith(": COULD NOT RUN")
    assert "FAILED" not in headline
    assert "--api-key" in report.error
    assert "DCAF_API_KEY" in report.error
    assert not report.held
