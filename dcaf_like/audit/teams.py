"""The teams family: when the audited call's rule needs two or more approvers, the operator's
identities try what separation of duties forbids (docs/audit.md, "Teams"). Each try is made on a
call of its own, proposed by the requester's key, so that a fault is told apart from the next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcaf_like.audit.client import AuditClient, Outcome
from dcaf_like.audit.options import AuditOptions, Identity
from dcaf_like.audit.report import FamilyResult
from dcaf_like.audit.runner import Audit, Proposal, decision, pending_calls

WITHDRAWN = "dcaf-like audit: the teams family is done with this call"
NOT_AN_APPROVER = (403, "not_an_approver")
ALREADY_APPROVED = (409, "already_approved")
STALE = (409, "approval_mismatch")


class NotJudged(Exception):
    """A try the family cannot judge (no proposal, an approval the server refused that should count)."""


@dataclass(frozen=True)
class Cast:
    """Who plays which part: the requester asks for the calls, the approvers approve them, the
    outsiders (the operator says) are in none of the groups the rule names."""

    requester: Identity
    approvers: tuple[Identity, ...]
    outsiders: tuple[Identity, ...]


def cast_of(options: AuditOptions) -> Cast | str:
    """The cast, or why the family is not applicable."""
    given = options.identities
    if not given:
        return "no identities given (--identity NAME=KEY, repeated: a requester and two approvers)"
    names = [i.name for i in given]
    if len(set(names)) != len(names):
        return "two identities share a name"
    wanted = options.requester or names[0]
    requester = next((i for i in given if i.name == wanted), None)
    if requester is None:
        return f"the requester {wanted!r} is not one of the identities given"
    if unknown := sorted(options.outsiders - set(names)):
        return f"--outsider names no identity given: {', '.join(unknown)}"
    others = [i for i in given if i is not requester]
    approvers = tuple(i for i in others if i.name not in options.outsiders)
    if len(approvers) < 2:
        return (
            f"{len(approvers)} approver identities besides the requester and the outsiders; "
            "the family needs two"
        )
    return Cast(requester, approvers, tuple(i for i in others if i.name in options.outsiders))


def teams(audit: Audit) -> FamilyResult:
    family = FamilyResult("teams", "Approvals by teams")
    cast = cast_of(audit.options)
    if isinstance(cast, str):
        family.skipped = f"not applicable: {cast}"
        return family
    team = Team(audit, cast)
    try:
        try:
            first = team.propose()
        except NotJudged as exc:
            family.skipped = f"not applicable: {exc}"
            return family
        approvals = first.call.get("approvals")
        needed = _needed(approvals)
        if needed < 2:
            rule = (
                f"its rule is {approvals.get('rule')!r}" if isinstance(approvals, dict) else "it shows none"
            )
            family.skipped = (
                f"not applicable: the server declares no rule needing two or more approvers for "
                f"{first.name} ({rule}, {needed} approval needed)"
            )
            return family
        team.run(family, first, str(approvals.get("rule", "")) if isinstance(approvals, dict) else "")
    except NotJudged as exc:
        team.note(family, str(exc))
    finally:
        team.close()
    return family


class Team:
    """The family's identities, each with a client of its own, and the calls they proposed."""

    def __init__(self, audit: Audit, cast: Cast) -> None:
        self.audit = audit
        self.cast = cast
        options = audit.options
        self.clients = {
            i.name: AuditClient(
                audit.url, api_key=i.key, timeout=options.timeout, transport=options.transport
            )
            for i in (cast.requester, *cast.approvers, *cast.outsiders)
        }
        for client in self.clients.values():
            client.tool = audit.tool
        self.message = options.teams_propose or audit.propose_message
        self.proposals: list[Proposal] = []
        self.unused: list[Proposal] = []

    def run(self, family: FamilyResult, first: Proposal, rule: str) -> None:
        requester, (one, two) = self.cast.requester, self.cast.approvers[:2]
        self.unused.append(first)
        if "not the requester" in rule:
            self.refused(
                family, "the requester approving their own call", requester, self.fresh(), NOT_AN_APPROVER
            )
        else:
            self.note(family, f"the rule lets the requester approve ({rule!r}): not tried")
        if self.cast.outsiders:
            outsider = self.cast.outsiders[0]
            self.refused(family, "an approver from the wrong group", outsider, self.fresh(), NOT_AN_APPROVER)
        else:
            self.note(family, "no --outsider given: an approver from the wrong group not tried")
        twice = self.fresh()
        if self.counted(family, f"{one.name}'s first approval counts and runs nothing", one, twice):
            self.refused(family, "one identity approving twice", one, twice, ALREADY_APPROVED)
        self.edit(family, self.fresh(), one, two)

    def edit(self, family: FamilyResult, call: Proposal, one: Identity, two: Identity) -> None:
        """`one` approves, `two` approves an edit: the edit must restart the count (only `two`'s
        approval counts, nothing runs), and `one`'s approval of the call as it was is refused."""
        patch = _edit(call.input)
        if call.call.get("editable") is not True or patch is None:
            why = (
                "the tool is not editable"
                if patch is not None
                else "no argument the family knows how to edit"
            )
            self.note(family, f"{why}: an edit between approvals not tried")
            return
        name = "an edit between the first and second approval restarts the count"
        if not self.counted(
            family, f"{one.name}'s approval before the edit counts and runs nothing", one, call
        ):
            return
        before = self.audit.mark()
        outcome = self.decide(two, call, edited_input=patch)
        ran = self.audit.executions(before, outcome)
        detail = f"{two.name} edited: {outcome.describe()}; {ran} executions ({self.audit.report.counting})"
        if ran:
            call.spent = True
            family.record(
                name, False, detail + f"; the edit ran the call: {one.name}'s approval still counted"
            )
            return
        if outcome.refused:  # a sound server may: the stage due may not admit `two`
            self.note(family, f"{two.name}'s edit was refused ({outcome.describe()}): {name!r} not judged")
            return
        self.audit.report.approvals_sent += 1
        waiting = _waiting(outcome, call)
        if outcome.status != 200 or waiting is None:
            family.record(name, False, detail + "; the edit did not leave the edited call waiting")
            return
        given = _given(waiting)
        held = given in (None, 1) and waiting.get("input") != call.input
        if given is not None:
            detail += f"; approvals counted after the edit: {given} (expected 1, the editor's)"
        family.record(name, held, detail)
        self.refused(family, f"{one.name}'s approval of the call as it was before the edit", one, call, STALE)

    # -- one try ----------------------------------------------------------------------------------

    def refused(
        self, family: FamilyResult, name: str, who: Identity, call: Proposal, expected: tuple[int, str]
    ) -> None:
        """`who` approves `call`: the server must answer `expected` and run nothing, and the call
        must still wait."""
        before = self.audit.mark()
        outcome = self.decide(who, call)
        ran = self.audit.executions(before, outcome)
        held = (outcome.status, outcome.code) == expected and ran == 0
        detail = (
            f"{who.name}: {outcome.describe()} (expected {expected[0]} {expected[1]}); "
            f"{ran} executions ({self.audit.report.counting})"
        )
        if ran:
            call.spent = True
        elif (status := self.stored_status(call)) not in (None, "pending"):
            held = False
            detail += f"; the stored call is now {status}"
        family.record(name, held, detail)

    def counted(self, family: FamilyResult, name: str, who: Identity, call: Proposal) -> bool:
        """`who`'s approval of `call`, which must count as one and run nothing (the rule needs more);
        True when it did, so that the try built on it can be made."""
        before = self.audit.mark()
        outcome = self.decide(who, call)
        ran = self.audit.executions(before, outcome)
        detail = f"{who.name}: {outcome.describe()}; {ran} executions ({self.audit.report.counting})"
        if ran:
            call.spent = True
            family.record(name, False, detail + "; one approval ran a call whose rule needs more")
            return False
        waiting = _waiting(outcome, call)
        if outcome.status != 200 or waiting is None:
            self.note(
                family,
                f"{who.name}'s approval did not count ({outcome.describe()}): is {who.name} one of the "
                f"approvers the rule names? {name!r} and the try after it not judged",
            )
            return False
        self.audit.report.approvals_sent += 1
        given = _given(waiting)
        family.record(name, given in (None, 1), detail + ("" if given is None else f"; {given} counted"))
        return given in (None, 1)

    # -- the wire ---------------------------------------------------------------------------------

    def propose(self) -> Proposal:
        """A call of the audited tool, proposed in a new conversation by the requester's key."""
        audit = self.audit
        audit.check_budget("the teams family's next proposal")
        audit.report.proposals += 1
        client = self.clients[self.cast.requester.name]
        outcome = client.post_json("/api/chat", {"messages": [{"role": "user", "content": self.message}]})
        body = outcome.body if isinstance(outcome.body, dict) else {}
        data = body.get("data")
        conversation = data.get("conversation_id") if isinstance(data, dict) else None
        pending = pending_calls(body) if isinstance(conversation, str) else []
        proposed = [Proposal(str(conversation), call) for call in pending]
        self.proposals += proposed  # every call it proposed is withdrawn at the end
        chosen = next((p for p in proposed if audit.tool is None or p.name == audit.tool), None)
        if outcome.status != 200 or chosen is None:
            raise NotJudged(
                f"the requester {self.cast.requester.name}'s proposal got {outcome.describe()}, "
                f"no call of {audit.tool or 'a gated tool'} waiting"
            )
        return chosen

    def fresh(self) -> Proposal:
        """A call no try has used: the first proposal if it is still unused, else a new one."""
        while self.unused:
            call = self.unused.pop(0)
            if not call.spent:
                return call
        return self.propose()

    def decide(self, who: Identity, call: Proposal, **changes: Any) -> Outcome:
        body = decision(call.conversation_id, call.approval(**changes))
        return self.clients[who.name].post_json("/api/chat", body)

    def stored_status(self, call: Proposal) -> str | None:
        """The call's status as the requester reads its conversation (None: no such read)."""
        read = self.clients[self.cast.requester.name].get(f"/api/conversations/{call.conversation_id}")
        if read.status != 200 or not isinstance(read.body, dict):
            return None
        for stored in read.body.get("tool_calls") or []:
            if isinstance(stored, dict) and stored.get("id") == call.id:
                return str(stored.get("status"))
        return None

    def note(self, family: FamilyResult, text: str) -> None:
        family.skipped = f"{family.skipped}; {text}" if family.skipped else text

    def close(self) -> None:
        """The requester withdraws every call the family proposed that may still wait."""
        client = self.clients[self.cast.requester.name]
        try:
            waiting: dict[str, list[dict[str, Any]]] = {}
            for call in self.proposals:
                if not call.spent:
                    waiting.setdefault(call.conversation_id, []).append(
                        {"id": call.id, "execute": False, "rejection_reason": WITHDRAWN}
                    )
            for conversation_id, rejections in waiting.items():
                client.post_json("/api/chat", decision(conversation_id, *rejections))
        finally:
            for each in self.clients.values():
                each.close()


def _needed(approvals: Any) -> int:
    """How many approvals the call still needs, over every stage (0: it shows no rule)."""
    if not isinstance(approvals, dict):
        return 0
    needed = approvals.get("needed")
    if not isinstance(needed, list):
        return 0
    return sum(n["count"] for n in needed if isinstance(n, dict) and isinstance(n.get("count"), int))


def _waiting(outcome: Outcome, call: Proposal) -> dict[str, Any] | None:
    return next((c for c in pending_calls(outcome.body) if c.get("id") == call.id), None)


def _given(waiting: dict[str, Any]) -> int | None:
    """How many approvals the waiting call shows counted (None: it shows none)."""
    approvals = waiting.get("approvals")
    given = approvals.get("given") if isinstance(approvals, dict) else None
    return len(given) if isinstance(given, list) else None


def _edit(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """A patch that changes one argument (a string, else a number), or None."""
    for key, value in arguments.items():
        if isinstance(value, str):
            return {key: value + "-edited"}
    for key, value in arguments.items():
        if isinstance(value, int) and not isinstance(value, bool):
            return {key: value + 1}
    return None
