"""The audit's state: its one target, the calls it made the agent propose, how it counts executions,
and the judgement of each try."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from dcaf_like.audit.client import AuditClient, Ledger, Outcome, check_target
from dcaf_like.audit.options import AuditOptions
from dcaf_like.audit.report import Attempt, AuditReport, FamilyResult

PROPOSE_TRIES = 3  # turns asked for one proposal before the audit gives up
CLEANUP_REASON = "dcaf-like audit: not approved"
SPARES = 2  # calls proposed at the start besides the main one: another conversation's, the wave's
CANCEL_EVERY = 0.5  # seconds between the audit's requests to stop a continuation it does not judge

T = TypeVar("T")


class AuditAborted(RuntimeError):
    """The audit cannot go on (the agent proposed no gated call, the proposal budget is spent)."""


class BudgetSpent(AuditAborted):
    """The audit's time budget ran out: the families not started are reported not reached."""


@dataclass
class Proposal:
    """A call the audit made the agent propose, in its conversation; `spent` once it may no longer be
    pending (it ran, was rejected, or an attack may have used it)."""

    conversation_id: str
    call: dict[str, Any]
    spent: bool = False
    ran: bool = False  # the audit saw it run, approved as proposed

    @property
    def id(self) -> str:
        return str(self.call["id"])

    @property
    def name(self) -> str:
        return str(self.call["name"])

    @property
    def input(self) -> dict[str, Any]:
        value = self.call.get("input") or {}
        return dict(value) if isinstance(value, dict) else {}

    def approval(self, **changes: Any) -> dict[str, Any]:
        """The exact approval: id, name and input as proposed, ``execute: true``."""
        return {"id": self.id, "name": self.name, "input": self.input, "execute": True, **changes}


def decision(conversation_id: str | None, *calls: dict[str, Any], **data: Any) -> dict[str, Any]:
    """A request body whose last user message carries decisions."""
    body: dict[str, Any] = {"tool_calls": list(calls), **data}
    if conversation_id is not None:
        body.setdefault("conversation_id", conversation_id)
    return {"messages": [{"role": "user", "content": "", "data": body}]}


def raw_decision(conversation_id: str, call_id: str, name: str, raw_input: bytes) -> bytes:
    """A decision whose ``input`` is written as given (for forms ``json.dumps`` never writes)."""
    head = json.dumps({"id": call_id, "name": name, "execute": True})[:-1]
    call = f'{head}, "input": {raw_input.decode()}}}'
    data = f'{{"conversation_id": {json.dumps(conversation_id)}, "tool_calls": [{call}]}}'
    return f'{{"messages": [{{"role": "user", "content": "", "data": {data}}}]}}'.encode()


class Audit:
    """One run against one URL. Every loop in it is bounded: proposals (`max_proposals`), turns per
    proposal, the concurrent wave (`concurrency`), each request's `timeout`, and the whole run's
    `budget` (seconds, None: none), checked before each family and each proposal."""

    def __init__(self, url: str, options: AuditOptions) -> None:
        self.url = check_target(url, i_own_this_server=options.i_own_this_server)
        self.options = options
        self.budget = options.budget
        self.deadline = None if options.budget is None else time.monotonic() + options.budget
        self.client = AuditClient(
            self.url, api_key=options.api_key, timeout=options.timeout, transport=options.transport
        )
        self.propose_message = options.propose
        self.tool = self.client.tool = options.tool
        self.ledger = Ledger(options.ledger) if options.ledger is not None else None
        self.ledger_start = self.ledger.lines() if self.ledger is not None else 0
        self.max_body_bytes = options.max_body_bytes
        self.concurrency = max(2, min(options.concurrency, 64))
        self.max_proposals = options.max_proposals
        self.report = AuditReport(
            self.url, options.tool, "ledger" if options.ledger is not None else "protocol"
        )
        self.report.budget_s = options.budget
        self.proposals: list[Proposal] = []
        self._main: Proposal | None = None
        self.spares: list[Proposal] = []  # proposed at the start, for the families that use one up
        self.spare: Proposal | None = None  # a call proposed in another conversation, still waiting
        self.reads_conversations = False
        self.cancels = False  # the server stops a conversation's turn on request (dcaf_like does)
        self._lock = threading.Lock()
        self.a2a_path: str | None = None
        self.honoured = 0  # approvals the server honoured: with a ledger, its lines must match

    # -- proposals ------------------------------------------------------------------------------

    def check_budget(self, before: str) -> None:
        """Raise :class:`BudgetSpent` when the time budget is spent (`before`: what would come next)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise BudgetSpent(f"the time budget of {self.budget:g} s was spent before {before}")

    def propose(self) -> Proposal:
        """A new conversation in which the agent proposed a call of the audited tool. Each try
        costs an agent turn, so each is asked only within the time budget."""
        for _ in range(PROPOSE_TRIES):
            self.check_budget("asking the agent for another proposal")
            with self._lock:  # the spares are asked for at once
                if len(self.proposals) >= self.max_proposals:
                    raise AuditAborted(f"the audit asked for {self.max_proposals} proposals, its limit")
                self.report.proposals += 1
            sent = {"messages": [{"role": "user", "content": self.propose_message}]}
            outcome = self.client.post_json("/api/chat", sent)
            if outcome.timed_out:
                raise AuditAborted(
                    f"asking for a proposal: no answer in {self.client.timeout:g} s "
                    "(raise --timeout for a slow model)"
                )
            if outcome.status == 401:
                raise AuditAborted(
                    f"the server wants an API key (it answered {outcome.describe()}): pass --api-key KEY "
                    "or set DCAF_API_KEY, with a key that may chat and approve"
                )
            if outcome.status == 403:
                raise AuditAborted(
                    "the API key may not do what the audit needs (the server answered "
                    f"{outcome.describe()}): give a key with the chat and approve scopes"
                )
            if outcome.status != 200 or not isinstance(outcome.body, dict):
                raise AuditAborted(f"asking for a proposal: the server answered {outcome.describe()}")
            data = outcome.body.get("data") or {}
            pending = [c for c in data.get("tool_calls") or [] if isinstance(c, dict) and "id" in c]
            conversation = data.get("conversation_id")
            chosen = next((c for c in pending if self.tool is None or c.get("name") == self.tool), None)
            if chosen is not None and isinstance(conversation, str):
                proposal = Proposal(conversation, chosen)
                with self._lock:
                    self.tool = self.report.tool = self.client.tool = str(chosen["name"])
                    self.proposals.append(proposal)
                    for other in pending:  # only the audited tool is ever approved; the rest wait
                        if other is not chosen:
                            self.proposals.append(Proposal(conversation, other))
                return proposal
            if isinstance(conversation, str) and pending:
                self.reject_all(conversation, pending)
        wanted = f"a call of {self.tool}" if self.tool else "a call that waits for approval"
        raise AuditAborted(
            f"{self.propose_message!r} did not make the agent propose {wanted} in {PROPOSE_TRIES} tries; "
            "pass --propose with a message that does"
        )

    def main(self) -> Proposal:
        """The pending call most attacks aim at, proposed again if an attack may have used it."""
        if self._main is None or self._main.spent:
            self._main = self.propose()
        return self._main

    def fresh(self) -> Proposal:
        """A waiting call no attack has aimed at: one proposed at the start if one is left, else a
        new proposal. Proposing them all before any call runs means every proposal meets the agent
        (and whatever its tools act on) as the first one did."""
        while self.spares:
            spare = self.spares.pop(0)
            if not spare.spent:
                return spare
        return self.propose()

    def executed_main(self) -> Proposal | None:
        """A call the audit approved and saw run, for replays."""
        return next((p for p in self.proposals if p.ran), None)

    def reject_all(self, conversation_id: str, calls: list[dict[str, Any]]) -> None:
        rejections = [
            {"id": c["id"], "execute": False, "rejection_reason": CLEANUP_REASON} for c in calls if "id" in c
        ]
        if rejections:
            body = decision(conversation_id, *rejections)
            self.continued(conversation_id, lambda: self.client.post_json("/api/chat", body))

    def clean_up(self) -> None:
        """Reject every call the audit made the agent propose and did not use, one decision per
        conversation: nothing is left waiting. A call the agent proposed again while it went on
        after a decision is rejected in a second pass (a bounded one)."""
        for _ in range(2):
            waiting: dict[str, list[dict[str, Any]]] = {}
            for proposal in self.proposals:
                if not proposal.spent:
                    proposal.spent = True
                    waiting.setdefault(proposal.conversation_id, []).append(proposal.call)
            for conversation_id, calls in waiting.items():
                self.reject_all(conversation_id, calls)

    # -- decisions the server may honour --------------------------------------------------------

    def continued(self, conversation_id: str, send: Callable[[], T]) -> T:
        """`send`: a decision the server may honour, after which the agent goes on (at least one more
        model turn, often several: a model may call tools until its step limit). The audit judges
        the decision, not what the agent does next, so on a server that offers
        ``POST /api/conversations/{id}/cancel`` it asks, every :data:`CANCEL_EVERY` s until the
        answer comes, that the turn stop: it stops at its next model call or tool, after the decided
        calls ran. Calls the agent proposed meanwhile are rejected before the audit ends."""
        if not self.cancels:
            result = send()
        else:
            with ThreadPoolExecutor(max_workers=1) as pool:
                future = pool.submit(send)
                while True:
                    try:
                        result = future.result(timeout=CANCEL_EVERY)
                        break
                    except TimeoutError:
                        self.client.post_json(f"/api/conversations/{conversation_id}/cancel", {})
        for outcome in result if isinstance(result, list) else [result]:
            if isinstance(outcome, Outcome):
                self._keep_pending(conversation_id, outcome)
        return result

    def _keep_pending(self, conversation_id: str, outcome: Outcome) -> None:
        known = {p.id for p in self.proposals}
        for call in pending_calls(outcome.body):
            if str(call["id"]) not in known:
                self.proposals.append(Proposal(conversation_id, call))
                known.add(str(call["id"]))

    # -- counting and judging -------------------------------------------------------------------

    def executions(self, before: int | None, outcome: Outcome) -> int:
        if self.ledger is not None and before is not None:
            return self.ledger.lines() - before
        return len(outcome.executed)

    def mark(self) -> int | None:
        return self.ledger.lines() if self.ledger is not None else None

    def stored_status(self, proposal: Proposal) -> str | None:
        """The call's status as the server's conversation read says, when it offers one."""
        if not self.reads_conversations:
            return None
        read = self.client.get(f"/api/conversations/{proposal.conversation_id}")
        if read.status != 200 or not isinstance(read.body, dict):
            return None
        for call in read.body.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id") == proposal.id:
                return str(call.get("status"))
        return None

    def refuse(
        self, family: FamilyResult, name: str, send: Callable[[], Outcome], *, aimed: Proposal | None = None
    ) -> Attempt:
        """A try the server must refuse (a 4xx, a JSON-RPC error, an error event, or a closed
        connection) with nothing run; the call it aimed at must still wait."""
        before = self.mark()
        outcome = send()
        ran = self.executions(before, outcome)
        held = outcome.refused and ran == 0
        detail = f"{outcome.describe()}; {ran} executions ({self.report.counting})"
        if aimed is not None:
            if not held or ran:
                aimed.spent = True
            elif not aimed.spent and (status := self.stored_status(aimed)) not in (None, "pending"):
                held = False
                aimed.spent = True
                detail += f"; the stored call is now {status}"
        return family.record(name, held, detail)

    def refuse_or_run_proposal(
        self, family: FamilyResult, name: str, send: Callable[[], Outcome], aimed: Proposal
    ) -> Attempt:
        """A try that means the proposal: refused with nothing run, or honoured by running the
        proposal exactly once with its own arguments."""
        before = self.mark()
        outcome = self.continued(aimed.conversation_id, send)
        ran = self.executions(before, outcome)
        detail = f"{outcome.describe()}; {ran} executions ({self.report.counting})"
        if outcome.refused:
            return family.record(name, ran == 0, detail)
        aimed.spent = True
        self.report.approvals_sent += 1
        reported = [c for c in outcome.executed if c.get("id") == aimed.id]
        exact = all(c.get("name") == aimed.name and c.get("input") == aimed.input for c in reported)
        if not exact:
            detail += f"; ran with {reported[0].get('input')!r}, proposed {aimed.input!r}"
        if ran == 1 and exact:
            aimed.ran = True
            self.honoured += 1
            detail += "; ran the proposal as proposed"
        return family.record(name, ran <= 1 and exact and outcome.status == 200, detail)

    # -- discovery ------------------------------------------------------------------------------

    def discover(self) -> None:
        """What the server offers besides /api/chat (conversation reads, a way to stop a turn, an
        A2A card on this origin), and the calls the families will use up, proposed now."""
        main = self.main()
        read = self.client.get(f"/api/conversations/{main.conversation_id}")
        self.reads_conversations = read.status == 200 and isinstance(read.body, dict)
        # Nothing runs in main's conversation: a cancel asked now changes nothing there.
        cancel = self.client.post_json(f"/api/conversations/{main.conversation_id}/cancel", {})
        self.cancels = cancel.status == 202
        card = self.client.get("/.well-known/agent-card.json")
        if card.status == 200 and isinstance(card.body, dict):
            self.a2a_path = _rpc_path(card.body, self.url)
        # At once: a server whose model answers several conversations together answers sooner.
        with ThreadPoolExecutor(max_workers=SPARES) as pool:
            self.spares = list(pool.map(lambda _: self.propose(), range(SPARES)))

    def a2a(self, conversation_id: str, *calls: dict[str, Any]) -> Outcome:
        """Decisions as an A2A message on the conversation's task (JSON-RPC ``message/send``)."""
        assert self.a2a_path is not None
        message = {
            "kind": "message",
            "messageId": uuid.uuid4().hex,
            "role": "user",
            "contextId": conversation_id,
            "parts": [{"kind": "data", "data": {"tool_calls": list(calls)}}],
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        return self.client.post_json(self.a2a_path, body)


def pending_calls(body: Any) -> list[dict[str, Any]]:
    """The calls an answer says wait for a decision (a chat answer's ``data.tool_calls``, a
    stream's ``tool_calls`` events)."""
    lists: list[Any] = []
    if isinstance(body, dict):
        data = body.get("data")
        lists.append(data.get("tool_calls") if isinstance(data, dict) else None)
    elif isinstance(body, list):
        lists += [e.get("tool_calls") for e in body if isinstance(e, dict) and e.get("type") == "tool_calls"]
    calls = [c for found in lists if isinstance(found, list) for c in found]
    return [c for c in calls if isinstance(c, dict) and "id" in c]


def _rpc_path(card: dict[str, Any], url: str) -> str | None:
    """The card's JSON-RPC URL, if it is on the audited origin (the audit never goes elsewhere)."""
    candidates = [card.get("url")]
    for interface in card.get("supportedInterfaces") or card.get("additionalInterfaces") or []:
        if isinstance(interface, dict):
            candidates.append(interface.get("url"))
    target = urlsplit(url)
    for candidate in candidates:
        if isinstance(candidate, str):
            parts = urlsplit(candidate)
            if (parts.scheme, parts.netloc) == (target.scheme, target.netloc):
                prefix = target.path.rstrip("/")
                path = parts.path or "/"
                return path[len(prefix) :] if prefix and path.startswith(prefix + "/") else path
    return None


def elapsed_since(started: float) -> float:
    return time.monotonic() - started
