"""docs/audit.md, "Teams": the teams family against a server whose canary needs two approvers from
``sre``. On a sound server every try holds and the canary never runs; on a server broken in one way
(the requester counted, an identity counted twice, a group not checked, an edit that keeps the earlier
approvals) the family fails that try, loudly. Without the identities or the rule it says why it was
not applicable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dcaf_like import (
    Agent,
    ApprovalPolicy,
    InMemoryConversationRepository,
    ToolResult,
    approvers,
    argument_in,
)
from dcaf_like import require_approval as rule
from dcaf_like.application.messages import ModelRequest
from dcaf_like.audit import canary_tool, run_audit
from dcaf_like.audit.options import AuditOptions, Identity
from dcaf_like.audit.runner import Audit
from dcaf_like.audit.teams import teams
from dcaf_like.cli.main import main
from dcaf_like.domain.approvers import Approvers, Stage
from dcaf_like.testing import RulesRuntime, tool_call

CAROL = "carol-key-0123456789abcdef0"  # the requester, an SRE herself
ALICE = "alice-key-0123456789abcdef0"
BOB = "bob-key-0123456789abcdef0000"
DAVE = "dave-key-0123456789abcdef000"  # a developer: in no group the rule names
KEYS = {
    CAROL: "carol:chat+approve+read",
    ALICE: "alice:approve",
    BOB: "bob:approve",
    DAVE: "dave:approve",
}
IDENTITIES = (
    Identity("carol", CAROL),
    Identity("alice", ALICE),
    Identity("bob", BOB),
    Identity("dave", DAVE),
)
PROPOSE = "run the audit canary on web-2"
TRIES = {
    "the requester approving their own call": "fault_requester",
    "an approver from the wrong group": "fault_group",
    "one identity approving twice": "fault_twice",
    "an edit between the first and second approval restarts the count": "fault_edit",
}


TEAMS_PROPOSE = "run the audit canary on prod-1"


def answer(request: ModelRequest) -> object:
    """The canary on the message's last word."""
    last = request.messages[-1]
    if isinstance(last, ToolResult):
        return "Done."
    return tool_call("audit_canary", target=getattr(last, "text", "").split()[-1])


def served(
    start_server: Any,
    ledger: Path,
    *,
    count: int = 2,
    editable: bool = True,
    only_prod: bool = False,
    requester_may_approve: bool = False,
) -> str:
    """The canary needs `count` approvers from sre (with `only_prod`: on prod-1 only, else one)."""
    when = {"when": argument_in("target", "prod-1")} if only_prod else {}
    agent = Agent(
        tools=[canary_tool(ledger, editable=editable)],
        runtime=RulesRuntime(answer),  # type: ignore[arg-type]
        repository=InMemoryConversationRepository(),
        approval_policy=ApprovalPolicy(
            [
                rule(
                    "two SREs",
                    approvers=approvers(count, "sre", requester_may_approve=requester_may_approve),
                    **when,
                )
            ]
        ),
        groups={"sre": {"carol", "alice", "bob"}, "dev": {"dave"}},
    )
    return str(start_server(agent, api_keys=KEYS).base_url)


def audited(url: str, ledger: Path, **options: Any) -> Any:
    chosen = {"identities": IDENTITIES, "outsiders": frozenset({"dave"}), **options}
    audit = Audit(url, AuditOptions(propose=PROPOSE, ledger=ledger, **chosen))
    audit.tool = audit.client.tool = "audit_canary"
    try:
        return teams(audit)
    finally:
        audit.client.close()


def runs(ledger: Path) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


def test_on_a_sound_server_every_try_holds_and_nothing_runs(start_server, tmp_path):
    ledger = tmp_path / "canary.ledger"
    url = served(start_server, ledger)

    family = audited(url, ledger)

    assert family.verdict == "held", family
    assert family.skipped == ""
    tried = {a.name: a for a in family.attempts}
    assert set(TRIES) <= set(tried)
    assert "403 not_an_approver" in tried["the requester approving their own call"].detail
    assert "409 already_approved" in tried["one identity approving twice"].detail
    assert "409 approval_mismatch" in tried["alice's approval of the call as it was before the edit"].detail
    assert runs(ledger) == 0


# Each fault breaks one rule of approvals by teams on the served agent, as a careless policy would.


def fault_requester(monkeypatch: pytest.MonkeyPatch) -> None:
    admit = Approvers.admit
    monkeypatch.setattr(
        Approvers, "admit", lambda self, *a, requester, **k: admit(self, *a, requester=None, **k)
    )


def fault_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    admit = Approvers.admit

    def once_is_forgotten(self: Approvers, call_id: str, by: str, *a: Any, approvals: Any, **k: Any) -> int:
        return admit(self, call_id, by, *a, approvals=[x for x in approvals if x.by != by], **k)

    monkeypatch.setattr(Approvers, "admit", once_is_forgotten)


def fault_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Stage, "admits", lambda self, member_of: True)


def fault_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Approvers, "counted", lambda self, approvals, fingerprint: tuple(approvals))


FAULTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "fault_requester": fault_requester,
    "fault_twice": fault_twice,
    "fault_group": fault_group,
    "fault_edit": fault_edit,
}


@pytest.mark.parametrize("try_name", list(TRIES))
def test_a_server_broken_in_one_way_fails_that_try(start_server, tmp_path, monkeypatch, try_name):
    ledger = tmp_path / "canary.ledger"
    FAULTS[TRIES[try_name]](monkeypatch)
    url = served(start_server, ledger)

    family = audited(url, ledger)

    assert family.verdict == "failed"
    (failure,) = family.failures  # that try, and only it
    assert failure.name == try_name
    if try_name in ("the requester approving their own call", "an approver from the wrong group"):
        # counted as a partial approval: nothing ran yet, but the server did not refuse
        assert failure.detail.startswith("carol: 200" if "requester" in try_name else "dave: 200")
        assert runs(ledger) == 0
    else:
        assert "1 executions (ledger)" in failure.detail
        assert runs(ledger) == 1


def test_without_identities_or_without_the_rule_it_says_why_it_was_not_applicable(start_server, tmp_path):
    ledger = tmp_path / "canary.ledger"
    url = served(start_server, ledger)
    one_approver = served(start_server, tmp_path / "one.ledger", count=1)

    none = audited(url, ledger, identities=(), outsiders=frozenset())
    few = audited(url, ledger, identities=IDENTITIES[:2], outsiders=frozenset())
    no_rule = audited(one_approver, tmp_path / "one.ledger")

    assert (none.verdict, none.attempts) == ("skipped", [])
    assert none.skipped.startswith("not applicable: no identities given")
    assert few.verdict == "skipped"
    assert few.skipped.startswith("not applicable: 1 approver identities")
    assert no_rule.verdict == "skipped"
    assert no_rule.skipped.startswith("not applicable: the server declares no rule needing two or more")
    assert "1 approval needed" in no_rule.skipped
    assert runs(ledger) == runs(tmp_path / "one.ledger") == 0


def test_without_an_outsider_the_report_says_that_try_was_not_made(start_server, tmp_path):
    ledger = tmp_path / "canary.ledger"
    url = served(start_server, ledger)

    family = audited(url, ledger, identities=IDENTITIES[:3], outsiders=frozenset())

    assert family.verdict == "held"
    assert "an approver from the wrong group not tried" in family.skipped
    assert "an approver from the wrong group" not in {a.name for a in family.attempts}


def test_the_whole_audit_runs_the_family_and_never_shows_a_key(start_server, tmp_path):
    ledger = tmp_path / "canary.ledger"
    url = served(start_server, ledger, only_prod=True)

    report = run_audit(
        url,
        api_key=CAROL,
        propose=PROPOSE,
        teams_propose=TEAMS_PROPOSE,
        tool="audit_canary",
        ledger=ledger,
        identities={"carol": CAROL, "alice": ALICE, "bob": BOB, "dave": DAVE},
        outsiders=["dave"],
        budget=None,
    )

    assert report.held, report.to_markdown()  # every family: the others approve web-2 with one key
    assert report.family("teams").verdict == "held"
    assert len(report.family("teams").attempts) == 7
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert {line["arguments"]["target"] for line in lines} == {"web-2"}  # prod-1 never ran
    shown = report.to_markdown() + report.to_json()
    for key in KEYS:
        assert key not in shown
    assert ALICE not in repr(AuditOptions(identities=IDENTITIES))


def test_a_tool_that_is_not_editable_leaves_the_edit_untried_and_says_so(start_server, tmp_path):
    ledger = tmp_path / "canary.ledger"
    url = served(start_server, ledger, editable=False)

    family = audited(url, ledger)

    assert family.verdict == "held"
    assert "the tool is not editable: an edit between approvals not tried" in family.skipped
    assert "an edit between the first and second approval restarts the count" not in {
        a.name for a in family.attempts
    }
    assert runs(ledger) == 0


def test_the_command_takes_identities_from_files_and_prints_no_key(start_server, tmp_path, capsys):
    ledger = tmp_path / "canary.ledger"
    url = served(start_server, ledger, only_prod=True)
    flags = []
    for name, key in [("carol", CAROL), ("alice", ALICE), ("bob", BOB), ("dave", DAVE)]:
        (tmp_path / f"{name}.key").write_text(key + "\n")
        flags += ["--identity", f"{name}=@{tmp_path / name}.key"]
    out = tmp_path / "report.json"

    status = main(
        ["audit", url, "--propose", PROPOSE, "--tool", "audit_canary", "--ledger", str(ledger),
         "--api-key", CAROL, *flags, "--requester", "carol",
         "--teams-propose", TEAMS_PROPOSE, "--outsider", "dave", "--report", str(out)]
    )  # fmt: skip

    printed = capsys.readouterr()
    written = json.loads(out.read_text())
    teams_family = next(f for f in written["families"] if f["key"] == "teams")
    assert (status, teams_family["verdict"]) == (0, "held"), printed.out
    assert "| Approvals by teams | held |" in printed.out
    for key in (ALICE, BOB, DAVE):  # carol's is also --api-key, which the report never shows either
        assert key not in printed.out + printed.err + out.read_text()
    assert CAROL not in printed.out + out.read_text()


def test_a_rule_that_lets_the_requester_approve_leaves_that_try_untried_and_says_so(start_server, tmp_path):
    ledger = tmp_path / "canary.ledger"
    url = served(start_server, ledger, requester_may_approve=True)

    family = audited(url, ledger)

    assert family.verdict == "held"
    assert "the rule lets the requester approve ('2 approvers from sre'): not tried" in family.skipped
    assert "the requester approving their own call" not in {a.name for a in family.attempts}
    assert runs(ledger) == 0
