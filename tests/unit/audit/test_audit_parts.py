"""The audit's parts that need no server: which URLs it may attack, the altered arguments it sends,
how it reads what ran and what waits, its report, and the canary tool."""

from __future__ import annotations

import json
import unicodedata

import httpx
import pytest

from dcaf_like import Agent
from dcaf_like.audit import Attempt, AuditReport, FamilyResult, canary_tool
from dcaf_like.audit.client import AuditClient, Outcome, executed_calls
from dcaf_like.audit.runner import decision, pending_calls
from dcaf_like.audit.target import TargetRefused, check_target
from dcaf_like.audit.variants import different, same_json
from dcaf_like.testing import FakeRuntime, tool_call

PROPOSED = {"name": "web-2", "namespace": "default", "replicas": 3, "labels": {"team": "ops"}}


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "http://localhost:8000/", "http://[::1]:8000", "https://127.0.0.2/base"]
)
def test_loopback_urls_may_be_audited(url):
    assert check_target(url) == url.rstrip("/")


@pytest.mark.parametrize(
    "url", ["http://192.0.2.10:8000", "http://agent.example.com", "http://127.0.0.1.example.com:8000"]
)
def test_other_urls_are_refused_unless_the_caller_owns_the_server(url):
    with pytest.raises(TargetRefused, match="--i-own-this-server"):
        check_target(url)
    assert check_target(url, i_own_this_server=True) == url


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "127.0.0.1:8000", "http://user:pw@127.0.0.1:8000"])
def test_what_is_not_a_plain_http_url_is_refused(url):
    with pytest.raises(TargetRefused):
        check_target(url, i_own_this_server=True)


def test_every_altered_form_differs_from_the_proposal():
    forms = list(different(PROPOSED))

    assert all(changed != PROPOSED for _, changed in forms)
    names = " ".join(name for name, _ in forms)
    for kind in ("look-alike", "NFKC", "NFC/NFD", "zero-width", "nested value", "+ 1", "extra argument"):
        assert kind in names
    lookalike = next(changed for name, changed in forms if "look-alike" in name)
    assert lookalike["name"] != "web-2"
    assert unicodedata.normalize("NFKC", lookalike["name"]) != "web-2"


def test_a_value_with_composed_letters_gets_its_decomposed_twin():
    [twin] = [c for name, c in different({"name": "café"}) if "NFC/NFD" in name]

    assert twin["name"] == unicodedata.normalize("NFD", "café") != "café"


def test_the_same_json_forms_parse_to_the_proposal_but_the_duplicate_keys_and_the_left_out_one():
    forms = dict(same_json(PROPOSED))

    assert json.loads(forms["keys in reverse order"]) == PROPOSED
    assert list(json.loads(forms["keys in reverse order"])) == list(reversed(PROPOSED))
    assert json.loads(forms["replicas: 3 written 3.0"]) == PROPOSED
    assert b"3e0" in forms["replicas: 3 written 3e0"]
    assert json.loads(forms["name twice, the proposal's value last"]) == PROPOSED
    assert json.loads(forms["name twice, the proposal's value first"])["name"] == "dcaf-audit-other"
    assert "name" not in json.loads(forms["name left out"])


def test_what_ran_is_read_once_per_call_from_a_stream_and_from_a_message():
    call = {"id": "tc_1", "name": "t", "input": {}, "output": "ok"}
    events = [
        {"type": "tool_finished", "tool_call": call},
        {"type": "executed_tool_calls", "executed_tool_calls": [call]},
        {
            "type": "done",
            "message": {"data": {"executed_tool_calls": [call], "executed_cmds": [{"command": "x"}]}},
        },
    ]

    assert executed_calls(events) == [call, {"command": "x"}]
    assert executed_calls({"data": {"executed_tool_calls": []}}) == []


def test_a_family_fails_on_one_failed_try_and_is_skipped_only_when_nothing_was_tried():
    family = FamilyResult("replay", "Replay after execution")
    family.record("again", True, "409")
    assert family.verdict == "held"
    family.record("on the stream", False, "200, 1 reported run")
    assert family.verdict == "failed"
    assert family.failures == [Attempt("on the stream", False, "200, 1 reported run")]
    assert FamilyResult("a2a", "A2A", skipped="no card").verdict == "skipped"


def test_the_report_renders_as_json_and_markdown():
    failed = FamilyResult("replay", "Replay after execution", [Attempt("again", False, "200 | ran")])
    held = FamilyResult("never_proposed", "A call id never proposed", [Attempt("fresh id", True, "404")])
    report = AuditReport("http://127.0.0.1:8000", "delete_pod", "ledger", [held, failed])

    written = json.loads(report.to_json())
    markdown = report.render("out.md")

    assert report.held is False
    assert [f.key for f in report.failed] == ["replay"]
    assert written["held"] is False
    assert [(f["key"], f["verdict"], f["tries"]) for f in written["families"]] == [
        ("never_proposed", "held", 1),
        ("replay", "failed", 1),
    ]
    assert "| Replay after execution | FAILED | 1 | 0 |" in markdown
    assert "- **FAILED**: again (200 \\| ran)" in markdown
    assert report.render("out.json") == report.to_json()


def test_the_canary_waits_for_approval_and_writes_one_line_per_run(tmp_path):
    ledger = tmp_path / "ledger"
    canary = canary_tool(ledger)
    runtime = FakeRuntime([tool_call("audit_canary", target="web-2", count=2), "Done."])
    agent = Agent(tools=[canary], runtime=runtime)

    response = agent.run("run the canary")
    [pending] = response.pending_tool_calls
    assert not ledger.exists()
    agent.approve(response.conversation_id, pending.id)

    [line] = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert canary.requires_approval
    assert line["call_id"] == pending.id
    assert line["conversation_id"] == response.conversation_id
    assert line["arguments"] == {"target": "web-2", "count": 2, "labels": None}


@pytest.mark.parametrize(
    ("outcome", "refused"),
    [
        (Outcome(404, {"error": {"code": "unknown_tool_call"}}), True),
        (Outcome(500, {"error": {"code": "internal_error"}}), False),
        (Outcome(200, {"data": {"executed_tool_calls": []}}), False),
        (Outcome(None), True),  # the server closed the connection without an answer
        (Outcome(None, timed_out=True), False),  # a server that never answers did not refuse
        (Outcome(200, {"jsonrpc": "2.0", "error": {"code": -32602}}), True),
        (Outcome(200, {"jsonrpc": "2.0", "result": {"status": {"state": "failed"}}}), True),
        (Outcome(200, {"jsonrpc": "2.0", "result": {"status": {"state": "completed"}}}), False),
        (Outcome(200, [{"type": "text_delta"}, {"type": "error", "error": {"code": "x"}}]), True),
        (Outcome(200, [{"type": "done"}]), False),
    ],
)
def test_what_counts_as_a_refusal(outcome, refused):
    assert outcome.refused is refused


def test_an_answer_counts_the_calls_the_audit_sent_not_the_agents_own_reads():
    sent = {"id": "tc_sent", "name": "delete_pod", "input": {}, "output": "deleted"}
    read = {"id": "tc_agents", "name": "describe_pod", "input": {}, "output": "no pod"}
    renamed = {"id": "tc_new", "name": "delete_pod", "input": {}, "output": "deleted"}  # a fresh id
    answer = {
        "data": {"executed_tool_calls": [sent, read, renamed]},
        "meta": {"timings_ms": {"model": 1500.0}},
    }
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    client = AuditClient("http://127.0.0.1:8000", transport=transport)
    client.tool = "delete_pod"

    outcome = client.post_json("/api/chat", decision("conv_1", {"id": "tc_sent", "execute": True}))

    assert outcome.executed == [sent, renamed]
    assert outcome.own == 1
    assert "1 of the agent's own calls ran (not counted)" in outcome.describe()
    assert (client.turns, client.model_seconds) == (1, 1.5)


def test_the_calls_an_answer_leaves_waiting_are_read_from_a_message_and_a_stream():
    call = {"id": "tc_1", "name": "delete_pod", "input": {}}

    assert pending_calls({"data": {"tool_calls": [call, "junk"]}}) == [call]
    assert pending_calls([{"type": "tool_calls", "tool_calls": [call]}, {"type": "done"}]) == [call]
    assert pending_calls({"error": {"code": "x"}}) == []
