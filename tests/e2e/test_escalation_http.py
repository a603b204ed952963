"""Reminders, escalation and the window's end of a call waiting for approval, over HTTP with a moved
clock and a webhook receiver that checks every signature (docs/approvals.md, "Escalation").

Nothing here sleeps for a time: the agent's clock is moved by hand, and each wait is for an event (a
delivery received, a sweep finished), bounded so that a hang fails the test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from dcaf_like import Agent, ApprovalPolicy, approvers, require_approval, tool
from dcaf_like.application.messages import ModelRequest, ModelResponse, UserTurn
from dcaf_like.notifiers.webhook import ApprovalWebhook, verify
from dcaf_like.server.app import create_app
from dcaf_like.testing import FakeRuntime, ManualClock, reply, tool_call, tool_calls
from tests.e2e._server import serving, store_url_of, until

SECRET = "whsec-escalation-7c1e"
CAROL = "carol-key-0123456789abcdef0"  # asks
LEE = "lee-key-0123456789abcdef0000"  # a team lead: the rule's approver
OLGA = "olga-key-0123456789abcdef000"  # on call: the group the call escalates to
OPS = "ops-key-0123456789abcdef00000"  # reads the audit trail
KEYS = {CAROL: "carol:chat", LEE: "lee:approve", OLGA: "olga:approve", OPS: "ops:admin"}
GROUPS = {"leads": {"lee"}, "oncall": {"olga"}}
START = 1_700_000_000.0


class Receiver:
    """An approvers' endpoint on loopback: it keeps each delivery whose signature checks, and counts
    those whose signature does not."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.forged = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if verify(SECRET, body, self.headers["X-Dcaf-Timestamp"], self.headers["X-Dcaf-Signature"]):
                    receiver.bodies.append(json.loads(body))
                else:
                    receiver.forged += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/approvals"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, event: str) -> list[dict[str, Any]]:
        return [b for b in list(self.bodies) if b["event"] == event]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def deleting(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if isinstance(last, UserTurn):
        return tool_calls(tool_call("delete_pod", name=last.text.split()[-1]))
    return reply("Done.")


def escalating_agent(
    clock: ManualClock,
    webhook: ApprovalWebhook,
    deleted: list[str],
    *,
    at_window_end: str = "reject",
    store: Any = None,
) -> Agent:
    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        deleted.append(name)
        return f"deleted {name}"

    rule = approvers(
        1, "leads", remind_after=600, escalate_after=1800, escalate_to="oncall", at_window_end=at_window_end
    )
    return Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([deleting] * 20),
        approval_policy=ApprovalPolicy([require_approval("a lead decides", approvers=rule)]),
        groups=GROUPS,
        approval_ttl=3600,
        clock=clock,
        repository=store,
        approval_notifier=webhook,
    )


def webhook_to(receiver: Receiver) -> ApprovalWebhook:
    return ApprovalWebhook(receiver.url, secret=SECRET, backoff=0.01)


def ask(server: httpx.Client, pod: str) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": f"delete {pod}"}]}
    response = server.post("/api/chat", headers={"X-API-Key": CAROL}, json=body)
    assert response.status_code == 200, response.text
    [call] = response.json()["data"]["tool_calls"]
    return {"conversation_id": response.json()["data"]["conversation_id"], **call}


def approve(server: httpx.Client, who: str, call: dict[str, Any]) -> httpx.Response:
    decided = {"id": call["id"], "name": call["name"], "input": call["input"], "execute": True}
    body = {
        "conversation_id": call["conversation_id"],
        "messages": [{"role": "user", "content": "", "data": {"tool_calls": [decided]}}],
    }
    return server.post("/api/chat", headers={"X-API-Key": who}, json=body)


def inbox(server: httpx.Client, who: str) -> list[dict[str, Any]]:
    response = server.get("/api/approvals", headers={"X-API-Key": who})
    assert response.status_code == 200, response.text
    return list(response.json()["approvals"])


def swept_after_now(app: Any) -> None:
    """Wait until the server has finished a whole sweep begun after this moment (the clock moved)."""
    sweep = app.state.escalations
    start = sweep.sweeps
    until(lambda: sweep.sweeps >= start + 2, "a whole sweep after the clock moved")


def test_a_waiting_call_is_reminded_then_escalated_then_rejected_at_its_windows_end(receiver):
    """docs/approvals.md, "Escalation": the timeline of a call under a rule that escalates."""
    clock, deleted = ManualClock(START), []
    app = create_app(
        escalating_agent(clock, webhook_to(receiver), deleted), api_keys=KEYS, escalation_sweep=0.01
    )
    with serving(app) as server:
        call = ask(server, "web-1")
        until(lambda: receiver.events("approval_required"), "the first notice")

        clock.advance(599)  # before the reminder: nothing more is sent
        swept_after_now(app)
        assert [b["event"] for b in receiver.bodies] == ["approval_required"]
        refused = approve(server, OLGA, call)  # on call, before the escalation: not an approver yet
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "not_an_approver"
        assert inbox(server, OLGA) == []

        clock.advance(1)  # the reminder, to the group the call waits for
        until(lambda: receiver.events("reminder"), "the reminder")
        [reminder] = receiver.events("reminder")
        assert reminder["groups"] == ["leads"]
        assert reminder["conversation_id"] == call["conversation_id"]
        assert [c["id"] for c in reminder["calls"]] == [call["id"]]
        assert "escalated to oncall after 1800s" in reminder["calls"][0]["approvals"]["rule"]

        clock.advance(1200)  # the escalation: on call is told, and may approve now
        until(lambda: receiver.events("escalation"), "the escalation")
        [escalation] = receiver.events("escalation")
        assert escalation["groups"] == ["oncall"]
        assert escalation["calls"][0]["id"] == call["id"]
        [listed] = inbox(server, OLGA)
        assert listed["id"] == call["id"]
        assert listed["eligible"][0]["members"] == ["lee", "olga"]
        # docs/approvals.md, "Escalation": the conversation shows when the call's notices were sent
        read = server.get(f"/api/conversations/{call['conversation_id']}", headers={"X-API-Key": OPS})
        assert read.status_code == 200, read.text
        [shown] = [c for c in read.json()["tool_calls"] if c["id"] == call["id"]]
        assert shown["approvals"]["reminded_at"] == START + 600
        assert (shown["approvals"]["escalated_at"], shown["approvals"]["escalated_to"]) == (
            START + 1800,
            ["oncall"],
        )
        assert shown["approvals"]["needed"] == [{"stage": 1, "count": 1, "groups": ["leads"]}]

        clock.advance(1800)  # the window's end: rejected, as a call of today's rule is
        swept_after_now(app)
        late = approve(server, OLGA, call)
        assert late.status_code == 410
        assert late.json()["error"]["code"] == "approval_expired"
        assert inbox(server, OLGA) == []
        assert deleted == []
        assert [b["event"] for b in receiver.bodies] == ["approval_required", "reminder", "escalation"]
        assert receiver.forged == 0

        # docs/approvals.md, "Escalation": each notice sent is in the audit trail, by the system
        trail = server.get(
            "/api/audit", headers={"X-API-Key": OPS}, params={"conversation_id": call["conversation_id"]}
        )
        assert trail.status_code == 200, trail.text
        notices = [
            (r["outcome"], r["decided_by"], r["reason"], r["at"])
            for r in reversed(trail.json()["records"])
            if r["call_id"] == call["id"] and r["outcome"] in ("reminded", "escalated")
        ]
        assert notices == [
            ("reminded", "system", "its approvers reminded", START + 600),
            ("escalated", "system", "escalated to oncall", START + 1800),
        ]


def test_a_call_whose_rule_says_wait_outlives_its_window_and_the_escalated_group_approves_it(receiver):
    """docs/approvals.md, "Escalation": `at_window_end="wait"` keeps the call waiting past the window."""
    clock, deleted = ManualClock(START), []
    agent = escalating_agent(clock, webhook_to(receiver), deleted, at_window_end="wait")
    app = create_app(agent, api_keys=KEYS, escalation_sweep=0.01)
    with serving(app) as server:
        call = ask(server, "web-2")
        clock.advance(7200)  # past the reminder, the escalation and the agent's window at once
        until(lambda: receiver.events("escalation"), "the escalation")
        swept_after_now(app)
        assert receiver.events("reminder") == []  # the escalation stands for the reminder it overtook

        assert [i["id"] for i in inbox(server, OLGA)] == [call["id"]]
        done = approve(server, OLGA, call)

        assert done.status_code == 200, done.text
        assert deleted == ["web-2"]
        assert [b["event"] for b in receiver.bodies] == ["approval_required", "escalation"]


def each_sent_and_received(
    receiver: Receiver, event: str, apps: list[Any], webhooks: list[ApprovalWebhook]
) -> None:
    """Wait until each call's `event` arrived, both servers swept once more after, and every notice
    their sweeps sent was delivered (so a second copy of one would have arrived by now)."""
    until(lambda: len(receiver.events(event)) >= 5, f"the {event}s")
    for app in apps:
        swept_after_now(app)
    sent = sum(app.state.escalations.sent for app in apps)
    until(lambda: sum(w.delivered for w in webhooks) == 5 + sent, "every delivery made")


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
def test_two_servers_on_one_store_send_each_reminder_and_escalation_once(
    receiver, kind, request, tmp_path: Path
):
    """docs/approvals.md, "Escalation": every worker sweeps, and the store's compare-and-set has each
    notice sent once."""
    url = store_url_of(kind, request, tmp_path)
    clock, deleted = ManualClock(START), []
    webhooks = [webhook_to(receiver), webhook_to(receiver)]
    apps = [
        create_app(escalating_agent(clock, w, deleted, store=url), api_keys=KEYS, escalation_sweep=0.005)
        for w in webhooks
    ]
    with serving(apps[0]) as first, serving(apps[1]):
        calls = [ask(first, f"web-{n}") for n in range(5)]
        until(lambda: len(receiver.events("approval_required")) == 5, "the first notices")

        for event, seconds in (("reminder", 600), ("escalation", 1200)):
            clock.advance(seconds)
            each_sent_and_received(receiver, event, apps, webhooks)
            assert sorted(b["calls"][0]["id"] for b in receiver.events(event)) == sorted(
                c["id"] for c in calls
            )

        assert sum(app.state.escalations.sent for app in apps) == 10
        assert receiver.forged == 0
