"""The approval webhook against a real HTTP receiver on loopback: signed, masked, retried, never blocking."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dcaf_like.application.notifications import ApprovalNotice, WaitingCall
from dcaf_like.notifiers.webhook import ApprovalWebhook, from_environment, sign, verify

SECRET = "whsec-test-3f9a"


class Receiver:
    """An HTTP server recording each POST; `answers` scripts the statuses (then 200), `hold` blocks."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.answers: list[int] = []
        self.hold = threading.Event()
        self.hold.set()
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append({"headers": dict(self.headers), "body": body})
                receiver.arrived.set()
                receiver.hold.wait(10)
                status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/approvals?token=chat-secret"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


def notice(conversation_id: str = "conv_1") -> ApprovalNotice:
    call = WaitingCall(
        id="tc_1",
        name="rotate_key",
        input={"user": "alice", "new_key": "***"},
        approval_reason="rotate_key requires approval",
        description="Rotate a user's key.",
    )
    return ApprovalNotice(agent="ops", conversation_id=conversation_id, calls=(call,), user="bob")


def test_a_delivery_is_signed_and_a_receiver_can_check_it(receiver):
    webhook = ApprovalWebhook(receiver.url, secret=SECRET, page_url="https://ops.example/agent/")

    webhook.approval_required(notice("conv 1/2"))
    webhook.close()

    [delivery] = receiver.received
    headers, body = delivery["headers"], delivery["body"]
    assert verify(SECRET, body, headers["X-Dcaf-Timestamp"], headers["X-Dcaf-Signature"])
    assert not verify("another-secret", body, headers["X-Dcaf-Timestamp"], headers["X-Dcaf-Signature"])
    assert not verify(SECRET, body + b" ", headers["X-Dcaf-Timestamp"], headers["X-Dcaf-Signature"])
    document = json.loads(body)
    assert document["type"] == "approval_required"
    assert document["delivery"] == headers["X-Dcaf-Delivery"]
    assert (document["agent"], document["conversation_id"], document["user"]) == ("ops", "conv 1/2", "bob")
    assert document["calls"][0]["input"] == {"user": "alice", "new_key": "***"}
    assert document["link"] == "https://ops.example/agent/#conversation=conv%201%2F2"
    assert webhook.delivered == 1


def test_an_old_or_unsigned_delivery_is_refused_against_replay():
    body = b'{"type": "approval_required"}'
    sent = int(time.time()) - 3600
    signature = sign(SECRET, sent, body)

    assert verify(SECRET, body, str(sent), signature, now=sent + 10)
    assert not verify(SECRET, body, str(sent), signature)  # an hour later: replayed
    assert not verify(SECRET, body, None, signature)
    assert not verify(SECRET, body, str(sent), None)
    assert not verify(SECRET, body, "soon", signature)


def test_a_failing_receiver_gets_the_same_delivery_again_until_it_takes_it(receiver):
    receiver.answers = [503, 500, 429]
    webhook = ApprovalWebhook(receiver.url, secret=SECRET, backoff=0)

    webhook.approval_required(notice())
    webhook.close()

    assert len(receiver.received) == 4
    deliveries = {r["headers"]["X-Dcaf-Delivery"] for r in receiver.received}
    assert len(deliveries) == 1  # one delivery, tried four times: the receiver can drop repeats
    for attempt in receiver.received:
        headers = attempt["headers"]
        assert verify(SECRET, attempt["body"], headers["X-Dcaf-Timestamp"], headers["X-Dcaf-Signature"])
    assert (webhook.delivered, webhook.failed) == (1, 0)


def test_a_refusal_is_final_and_logged_without_the_secret_or_the_urls_token(receiver, caplog):
    receiver.answers = [400]
    webhook = ApprovalWebhook(receiver.url, secret=SECRET, backoff=0)

    with caplog.at_level(logging.ERROR, logger="dcaf_like.notify"):
        webhook.approval_required(notice())
        webhook.close()

    assert len(receiver.received) == 1
    assert webhook.failed == 1
    assert "HTTP 400" in caplog.text
    for shown in (caplog.text, repr(webhook)):
        assert "chat-secret" not in shown
        assert SECRET not in shown


def test_a_receiver_that_is_down_is_tried_attempts_times_then_given_up(caplog):
    webhook = ApprovalWebhook("http://127.0.0.1:9/hooks", secret=SECRET, attempts=3, backoff=0, timeout=2)

    with caplog.at_level(logging.ERROR, logger="dcaf_like.notify"):
        webhook.approval_required(notice())
        webhook.close()

    assert (webhook.delivered, webhook.failed) == (0, 1)
    assert "after 3 attempt(s)" in caplog.text


def test_the_caller_is_never_held_by_a_slow_receiver(receiver):
    receiver.hold.clear()  # the receiver takes the request and does not answer
    webhook = ApprovalWebhook(receiver.url, secret=SECRET)

    webhook.approval_required(notice())  # returns while the receiver holds the delivery
    assert receiver.arrived.wait(10)
    assert webhook.delivered == 0

    receiver.hold.set()
    webhook.close()
    assert webhook.delivered == 1


def test_past_its_queue_a_notice_is_dropped_and_said(receiver, caplog):
    receiver.hold.clear()
    webhook = ApprovalWebhook(receiver.url, secret=SECRET, queue_size=1)
    webhook.approval_required(notice("conv_1"))
    assert receiver.arrived.wait(10)  # the first is being delivered; the queue is empty again

    with caplog.at_level(logging.WARNING, logger="dcaf_like.notify"):
        webhook.approval_required(notice("conv_2"))  # queued
        webhook.approval_required(notice("conv_3"))  # no room

    assert webhook.dropped == 1
    assert "conv_3 was dropped" in caplog.text
    receiver.hold.set()
    webhook.close()
    assert [json.loads(r["body"])["conversation_id"] for r in receiver.received] == ["conv_1", "conv_2"]


@pytest.mark.parametrize(
    ("url", "secret", "says"),
    [
        ("ftp://example.com/hook", SECRET, r"an http\(s\) URL, not 'ftp'"),
        ("https://example.com/hook", "", "needs a secret"),
    ],
)
def test_a_misconfigured_webhook_is_refused_when_built(url, secret, says):
    with pytest.raises(ValueError, match=says):
        ApprovalWebhook(url, secret=secret)


def test_from_the_environment():
    assert from_environment({}) is None
    with pytest.raises(ValueError, match="DCAF_APPROVAL_WEBHOOK_SECRET is not"):
        from_environment({"DCAF_APPROVAL_WEBHOOK_URL": "https://example.com/hook"})
    webhook = from_environment(
        {"DCAF_APPROVAL_WEBHOOK_URL": "https://example.com/hook", "DCAF_APPROVAL_WEBHOOK_SECRET": "s"}
    )
    assert repr(webhook) == "ApprovalWebhook('https://example.com')"


def test_the_example_receiver_posts_each_notice_to_the_chat_once_and_refuses_forgeries(receiver):
    import sys
    from http.server import ThreadingHTTPServer
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import approval_webhook_receiver as example

    chat = receiver  # stands in for the chat's incoming webhook
    posted_to_chat = example.post_to_chat(chat.url)
    server = ThreadingHTTPServer(("127.0.0.1", 0), example.make_handler(SECRET, posted_to_chat))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        webhook = ApprovalWebhook(url, secret=SECRET, page_url="https://ops.example")
        webhook.approval_required(notice())
        webhook.close()
        forged = ApprovalWebhook(url, secret="not-the-secret", attempts=1)
        forged.approval_required(notice("conv_forged"))
        forged.close()
    finally:
        server.shutdown()
        server.server_close()

    [message] = [json.loads(r["body"])["text"] for r in chat.received]
    assert "*ops* waits for approval (conversation `conv_1`)" in message
    assert '`rotate_key` {"user": "alice", "new_key": "***"} (rotate_key requires approval)' in message
    assert "Decide: https://ops.example/#conversation=conv_1" in message
    assert (webhook.delivered, forged.failed) == (1, 1)


def test_an_agent_tells_the_webhook_once_per_call_that_starts_waiting_secrets_masked(receiver):
    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime, reply, tool_call

    @tool(secret=["new_key"])
    def rotate_key(user: str, new_key: str) -> str:
        """Rotate a user's key."""
        return f"rotated {user}"

    webhook = ApprovalWebhook(receiver.url, secret=SECRET, page_url="https://ops.example")
    runtime = FakeRuntime([tool_call("rotate_key", user="alice", new_key="s3cr3t-value"), reply("Rotated.")])
    agent = Agent(tools=[rotate_key], runtime=runtime, name="ops", approval_notifier=webhook)

    proposal = agent.run("rotate alice's key", user="bob")
    [call] = proposal.pending_tool_calls
    agent.approve(proposal.conversation_id, call.id, user="carol")  # nothing new waits after it
    agent.close()  # delivers what is queued

    [delivery] = receiver.received
    document = json.loads(delivery["body"])
    assert document["conversation_id"] == proposal.conversation_id
    assert document["user"] == "bob"
    assert document["calls"] == [
        {
            "id": call.id,
            "name": "rotate_key",
            "input": {"user": "alice", "new_key": "***"},
            "approval_reason": "rotate_key requires approval",
            "description": "Rotate a user's key.",
            "risk": None,
            "preview": None,
            "preview_kind": None,
            "preview_error": None,
        }
    ]
    assert b"s3cr3t-value" not in delivery["body"]
    assert document["link"] == f"https://ops.example/#conversation={proposal.conversation_id}"


def test_a_broken_notifier_never_fails_the_turn(caplog):
    from dcaf_like import Agent, tool
    from dcaf_like.application.notifications import ApprovalNotifier
    from dcaf_like.testing import FakeRuntime, tool_call

    class Broken(ApprovalNotifier):
        def approval_required(self, notice: ApprovalNotice) -> None:
            raise RuntimeError("queue gone")

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return name

    agent = Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([tool_call("delete_pod", name="web-1")]),
        approval_notifier=Broken(),
    )
    with caplog.at_level(logging.ERROR):
        response = agent.run("delete web-1")

    assert [c.name for c in response.pending_tool_calls] == ["delete_pod"]
    assert "the approval notifier failed" in caplog.text
    assert agent.conversation(response.conversation_id) is not None  # saved before the notifier was told


def test_the_agent_takes_its_webhook_from_the_environment(receiver, monkeypatch):
    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime, tool_call

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return name

    monkeypatch.setenv("DCAF_APPROVAL_WEBHOOK_URL", receiver.url)
    monkeypatch.setenv("DCAF_APPROVAL_WEBHOOK_SECRET", SECRET)
    agent = Agent(tools=[delete_pod], runtime=FakeRuntime([tool_call("delete_pod", name="web-1")]))

    agent.run("delete web-1")
    agent.close()

    [delivery] = receiver.received
    headers = delivery["headers"]
    assert verify(SECRET, delivery["body"], headers["X-Dcaf-Timestamp"], headers["X-Dcaf-Signature"])


def test_a_call_under_a_team_rule_tells_the_webhook_its_rule_and_what_it_needs(receiver):
    """docs/approvals.md, "Approvals by teams": the webhook shows approvals so far and still needed."""
    from dcaf_like import Agent, Identity, approvers, tool
    from dcaf_like.testing import FakeRuntime, tool_call

    @tool(approvers=approvers(2, "sre"))
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return name

    webhook = ApprovalWebhook(receiver.url, secret=SECRET)
    agent = Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([tool_call("delete_pod", name="web-1")]),
        approval_notifier=webhook,
        groups={"sre": {"alice", "bob"}},
    )
    agent.run("delete web-1", identity=Identity("carol", frozenset({"chat"})))
    agent.close()

    [delivery] = receiver.received
    [call] = json.loads(delivery["body"])["calls"]
    assert call["approvals"] == {
        "rule": "2 approvers from sre, not the requester",
        "given": [],
        "needed": [{"stage": 1, "count": 2, "groups": ["sre"]}],
    }


def test_a_call_whose_preview_went_stale_is_sent_to_the_approvers_again_with_its_new_preview(receiver):
    """docs/approvals.md, "What the approver sees": an approved call whose recheck finds the world
    changed waits again; the approvers are told again, with the new preview, as of any call that
    starts waiting."""
    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime, reply, tool_call

    replicas = {"api": 2}

    def show(name: str, count: int) -> str:
        return f"-replicas: {replicas[name]}\n+replicas: {count}\n"

    @tool(preview=show, recheck=True)
    def scale(name: str, count: int) -> str:
        """Scale a deployment."""
        replicas[name] = count
        return f"{name} scaled to {count}"

    webhook = ApprovalWebhook(receiver.url, secret=SECRET)
    runtime = FakeRuntime([tool_call("scale", name="api", count=5), reply("Scaled.")])
    agent = Agent(tools=[scale], runtime=runtime, name="ops", approval_notifier=webhook)
    proposal = agent.run("scale api to 5", user="bob")
    [call] = proposal.pending_tool_calls
    replicas["api"] = 3  # someone scaled it between the look and the approval

    again = agent.approve(proposal.conversation_id, call.id, user="carol")
    agent.close()

    assert [c.id for c in again.pending_tool_calls] == [call.id]  # not run: it waits again
    assert replicas == {"api": 3}
    shown = [json.loads(d["body"])["calls"][0]["preview"] for d in receiver.received]
    assert shown == ["-replicas: 2\n+replicas: 5\n", "-replicas: 3\n+replicas: 5\n"]
