"""Approvals by teams over two ``dcaf-like serve`` worker processes sharing a store (PostgreSQL, Redis),
issue 38's done-when: a delete_pod in prod needing two SREs runs once after alice and bob approve; not
after alice approves twice, not when the requester (carol, an SRE herself) approves, not when a ``dev``
member (dave) approves; twenty SREs sending the final approval at once run it once; an edit after the
first approval needs both again; every counted approval and every refusal is in ``GET /api/audit``.
What ran is read from the ledger the tool writes, not only from the answers. Where a test says which
worker, the approvals are sent over two connections held open to different worker processes, so what
one worker counted is read by the other from the store."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user
from _server import dcaf_like_serve

SREs = [f"sre-{n}" for n in range(20)]
KEYS = {
    "carol": "chat+approve+read",  # the requester; an SRE by name (teams_agent.py)
    "alice": "approve",  # SREs by name
    "bob": "approve",
    "dave": "approve",  # in dev, not in sre
    "ops": "admin",
    **dict.fromkeys(SREs, "approve+approve:sre"),  # SREs by their key's scope
}


def secret(name: str) -> str:
    return f"{name}-key-0123456789abcdef"


@pytest.fixture(params=["postgres", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        return f"{url}?table={request.getfixturevalue('postgres_table')}"
    url = request.getfixturevalue("redis_url")
    return f"{url}?prefix={request.getfixturevalue('redis_prefix')}"


@dataclass
class Worker:
    """One connection held open to one worker process (`pid`): every request on it reaches that worker."""

    client: httpx.Client
    pid: int
    connection: object  # the connection's network stream: another one means another connection

    def post(self, name: str, body: dict[str, Any]) -> httpx.Response:
        response = self.client.post("/api/chat", json=body, headers={"X-API-Key": secret(name)})
        reopened = f"the connection to worker {self.pid} was closed: this request may have reached another"
        assert response.extensions["network_stream"] is self.connection, reopened
        return response


@dataclass
class Team:
    """Two workers on one store, spoken to by name: each request on a connection of its own (the
    kernel spreads them over both workers), or on a `Worker`'s."""

    url: str
    ledger: Path
    clients: list[httpx.Client] = field(default_factory=list)

    def post(self, name: str, body: dict[str, Any], on: Worker | None = None) -> httpx.Response:
        if on is not None:
            return on.post(name, body)
        headers = {"X-API-Key": secret(name)}
        return httpx.post(f"{self.url}/api/chat", json=body, headers=headers, timeout=30)

    def connect(self) -> Worker:
        """A connection held open to whichever worker the kernel gives it, which it asks for its PID."""
        client = httpx.Client(base_url=self.url, timeout=30, limits=httpx.Limits(max_connections=1))
        self.clients.append(client)
        asked = client.post(
            "/api/chat", json={"messages": [user("which worker")]}, headers={"X-API-Key": secret("carol")}
        )
        assert asked.status_code == 200, asked.text
        pid = int(asked.json()["content"].removeprefix("Done: "))
        connection = asked.extensions["network_stream"]
        assert connection is not None
        return Worker(client, pid, connection)

    def two_workers(self) -> tuple[Worker, Worker]:
        """Connections to two different worker processes."""
        first = self.connect()
        for _ in range(64):  # each new connection reaches either worker: 64 on one is 2**-64
            other = self.connect()
            if other.pid != first.pid:
                return first, other
        pytest.fail(f"64 connections all reached worker {first.pid}")

    def propose(self) -> tuple[str, dict[str, Any]]:
        """carol asks to delete web-1: the conversation, and the call waiting."""
        proposed = self.post("carol", {"messages": [user("delete pod web-1")]})
        assert proposed.status_code == 200, proposed.text
        (pending,) = proposed.json()["data"]["tool_calls"]
        return proposed.json()["data"]["conversation_id"], pending

    def decide(
        self, name: str, conversation_id: str, decided: dict[str, Any], on: Worker | None = None
    ) -> httpx.Response:
        body = {"messages": [user(conversation_id=conversation_id, tool_calls=[decided])]}
        return self.post(name, body, on)

    def trail(self, conversation_id: str) -> list[tuple[str, str]]:
        """The conversation's decision records, oldest first: (outcome, who)."""
        response = httpx.get(
            f"{self.url}/api/audit",
            params={"conversation_id": conversation_id},
            headers={"X-API-Key": secret("ops")},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return [(r["outcome"], r["decided_by"]) for r in reversed(response.json()["records"])]

    def ran(self) -> list[str]:
        """The pods the tool deleted, in order, whichever worker ran it."""
        return self.ledger.read_text().split() if self.ledger.exists() else []


@pytest.fixture
def team(tmp_path: Path, store_url: str) -> Iterator[Team]:
    ledger = tmp_path / "ledger.log"
    keys = ",".join(f"{name}:{scopes}={secret(name)}" for name, scopes in KEYS.items())
    env = {**os.environ, "DCAF_TEST_LEDGER": str(ledger), "DCAF_API_KEYS": keys}
    env.pop("DCAF_STORE", None)
    # --port 0: the supervisor binds one and its workers listen on it
    options = ["--factory", "--port", "0", "--workers", "2", "--store", store_url]
    with dcaf_like_serve("tests/e2e/teams_agent.py:make_agent", *options, env=env) as served:
        team = Team(served.url, ledger)
        yield team
        for client in team.clients:
            client.close()


def refusal(response: httpx.Response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def counted(response: httpx.Response) -> dict[str, Any]:
    """The call still waiting after an approval that counted, as its approver is shown it."""
    assert response.status_code == 200, response.text
    (waiting,) = response.json()["data"]["tool_calls"]
    return waiting


def test_alice_approving_twice_counts_once_and_runs_nothing(team: Team) -> None:
    one, other = team.two_workers()
    conversation_id, pending = team.propose()
    first = counted(team.decide("alice", conversation_id, approve(pending), on=one))
    assert [g["by"] for g in first["approvals"]["given"]] == ["alice"]

    again = team.decide("alice", conversation_id, approve(pending), on=other)

    assert refusal(again) == (
        409,
        "already_approved",
        f"alice already approved tool call {pending['id']}: it needs the approval of someone else",
    )
    assert team.ran() == []
    assert team.trail(conversation_id) == [("counted", "alice"), ("refused", "alice")]


@pytest.mark.parametrize(
    ("who", "why"),
    [
        ("carol", "the requester of a call may not approve it under its rule"),
        ("dave", "stage 1 of its approval needs"),
    ],
    ids=["the requester", "a dev member"],
)
def test_neither_the_requester_nor_a_dev_member_counts_as_the_second(team: Team, who: str, why: str) -> None:
    one, other = team.two_workers()
    conversation_id, pending = team.propose()
    counted(team.decide("alice", conversation_id, approve(pending), on=one))

    status, code, message = refusal(team.decide(who, conversation_id, approve(pending), on=other))

    assert (status, code) == (403, "not_an_approver")
    assert message.startswith(f"{who} may not decide tool call {pending['id']}: {why}")
    assert team.ran() == []
    assert team.trail(conversation_id) == [("counted", "alice"), ("refused", who)]


def test_alice_and_bob_run_it_exactly_once(team: Team) -> None:
    one, other = team.two_workers()
    conversation_id, pending = team.propose()
    first = counted(team.decide("alice", conversation_id, approve(pending), on=one))
    assert first["approvals"]["needed"] == [{"stage": 1, "count": 1, "groups": ["sre"]}]
    assert team.ran() == []

    done = team.decide("bob", conversation_id, approve(pending), on=other)

    assert done.status_code == 200, done.text
    data = done.json()["data"]
    assert [c["output"] for c in data["executed_tool_calls"]] == ['pod "web-1" deleted in prod']
    assert done.json()["meta"]["stop_reason"] == "awaiting_requester"  # the model goes on for carol only
    assert data["tool_calls"] == []
    assert team.ran() == ["web-1"]
    replayed = team.decide("bob", conversation_id, approve(pending), on=one)
    assert refusal(replayed)[:2] == (409, "tool_call_already_decided")
    assert team.ran() == ["web-1"]
    assert team.trail(conversation_id) == [("counted", "alice"), ("approved", "bob"), ("refused", "bob")]


def test_an_edit_after_the_first_approval_needs_both_again(team: Team) -> None:
    one, other = team.two_workers()
    conversation_id, pending = team.propose()
    counted(team.decide("alice", conversation_id, approve(pending), on=one))

    edit = approve(pending, edited_input={"name": "web-2"})
    edited = counted(team.decide("bob", conversation_id, edit, on=other))

    assert (edited["input"]["name"], edited["edited"]) == ("web-2", True)
    assert [g["by"] for g in edited["approvals"]["given"]] == ["bob"]  # alice's approved web-1
    assert edited["approvals"]["needed"] == [{"stage": 1, "count": 1, "groups": ["sre"]}]
    assert team.ran() == []
    # what alice approved before the edit does not count for what would run now
    stale = team.decide("alice", conversation_id, approve(pending), on=one)
    assert refusal(stale)[:2] == (409, "approval_mismatch")
    again = team.decide("bob", conversation_id, approve(edited), on=one)
    assert refusal(again)[:2] == (409, "already_approved")
    assert team.ran() == []
    done = team.decide("alice", conversation_id, approve(edited), on=one)  # alice approves what will run
    assert done.status_code == 200, done.text
    assert team.ran() == ["web-2"]
    assert team.trail(conversation_id) == [
        ("counted", "alice"),
        ("counted", "bob"),
        ("refused", "alice"),
        ("refused", "bob"),
        ("edited", "alice"),
    ]


def test_twenty_final_approvals_at_once_run_the_call_once(team: Team) -> None:
    conversation_id, pending = team.propose()
    decision = approve(pending)
    assert refusal(team.decide("carol", conversation_id, decision))[:2] == (403, "not_an_approver")
    first = counted(team.decide("alice", conversation_id, decision))
    assert first["approvals"]["needed"][0]["count"] == 1

    start = threading.Barrier(len(SREs))
    answers: dict[str, tuple[int, str]] = {}

    def final(name: str) -> None:
        start.wait()
        for _ in range(len(SREs)):  # a lost race is tried again, as a client would
            response = team.decide(name, conversation_id, decision)
            code = "ran" if response.status_code == 200 else response.json()["error"]["code"]
            if code != "concurrent_update":
                break
        answers[name] = (response.status_code, code)

    threads = [threading.Thread(target=final, args=(name,)) for name in SREs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    ran = [name for name, (_, code) in answers.items() if code == "ran"]
    assert len(ran) == 1
    assert sorted(code for _, code in answers.values() if code != "ran") == ["tool_call_already_decided"] * 19
    assert team.ran() == ["web-1"]
    assert sorted(team.trail(conversation_id)) == sorted(
        [("refused", "carol"), ("counted", "alice"), ("approved", ran[0])]
        + [("refused", name) for name in SREs if name != ran[0]]
    )
