"""`dcaf-like serve --metrics`: /metrics in the Prometheus text format moves by exactly what was done."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import uuid
from collections import Counter
from contextlib import ExitStack

import httpx
import pytest
from _helpdesk import approve, reject, user
from _server import dcaf_like_serve

parser = pytest.importorskip("prometheus_client.parser", reason="the metrics extra is not installed")

ADMIN = "a" * 32
OPS = "o" * 32


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.parametrize("workers", [1, 2])
def test_metrics_count_the_turns_tools_and_decisions_made(tmp_path, workers):
    env = {
        **os.environ,
        "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
        "DCAF_API_KEYS": f"root:admin={ADMIN},ops={OPS}",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    options = ["--factory", "--port", "0", "--metrics", "--workers", str(workers)]
    store = ["--store", f"sqlite:///{tmp_path / 'c.db'}"]
    with ExitStack() as stack:
        served = stack.enter_context(
            dcaf_like_serve("tests/e2e/process_agent.py:make_agent", *options, *store, env=env)
        )
        ops = stack.enter_context(httpx.Client(base_url=served.url, headers={"X-API-Key": OPS}, timeout=10))
        admin = {"X-API-Key": ADMIN}
        assert httpx.get(f"{served.url}/metrics", timeout=10).status_code == 401
        assert ops.get("/metrics").status_code == 403
        before = _samples(httpx.get(f"{served.url}/metrics", headers=admin, timeout=10).text)

        proposed = ops.post("/api/chat", json={"messages": [user("delete pod web-1")]}).json()
        pending = proposed["data"]["tool_calls"][0]
        conversation = proposed["data"]["conversation_id"]
        decided = ops.post(
            "/api/chat",
            json={"messages": [user(conversation_id=conversation, tool_calls=[approve(pending)])]},
        )
        assert decided.status_code == 200, decided.text
        replayed = ops.post(
            "/api/chat",
            json={"messages": [user(conversation_id=conversation, tool_calls=[approve(pending)])]},
        )
        assert replayed.status_code == 409, replayed.text  # refused: not a failed turn
        assert ops.post("/api/chat", json={"messages": [user("hello")]}).status_code == 200
        metrics = httpx.get(f"{served.url}/metrics", headers=admin, timeout=10)

    assert metrics.headers["content-type"].startswith("text/plain")
    after = _samples(metrics.text)

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert moved("dcaf_turns_total", outcome="awaiting_approval") == 1
    assert moved("dcaf_turns_total", outcome="completed") == 2
    assert moved("dcaf_turns_total", outcome="failed") == 0
    assert moved("dcaf_model_calls_total", runtime="rules", outcome="ok") == 3
    assert moved("dcaf_model_call_seconds_count", runtime="rules") == 3
    assert moved("dcaf_tool_executions_total", tool="delete_pod", outcome="ok") == 1
    assert moved("dcaf_decisions_total", kind="approve", entrance="http") == 1
    assert moved("dcaf_decision_wait_seconds_count") == 1
    assert moved("dcaf_refused_requests_total", error="ToolCallAlreadyDecided") == 1
    assert moved("dcaf_http_requests_total", route="/api/chat", status="200") == 3
    assert moved("dcaf_http_requests_total", route="/api/chat", status="409") == 1
    # a fresh server: the one refused scrape above is the only one
    assert _value(after, "dcaf_http_requests_total", route="/metrics", status="403") == 1


def test_no_metrics_route_unless_enabled():
    from _server import serving

    from dcaf_like import create_app

    with serving(create_app(lambda messages, context: "hi", ui=False)) as client:
        assert client.get("/metrics").status_code == 404


def test_each_series_agrees_with_the_store_and_the_log_after_a_mix_of_turns_over_two_workers(
    tmp_path, request
):
    """docs/operations.md, "Metrics" and "Logs" (issue 35, item 6): over ``dcaf-like serve --workers 2``
    on PostgreSQL, every way a tool ends (ok, error, timeout, cancelled, interrupted by a shutdown)
    is counted under its outcome, as the store records it and as one WARNING line says; refused
    requests are counted apart from failed turns; no gauge of waiting calls; ``/metrics`` and an
    unknown path each under their own route. The metrics directory is the operator's own, so the
    figures of the server stopped mid-tool are read by the next one."""
    from _server import store_url_of, until

    from dcaf_like.stores import open_store
    from dcaf_like.testing import OpenAICompatibleServer

    store_url = store_url_of("postgres", request, tmp_path)
    ledger = tmp_path / "ledger.log"
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    options = ["--factory", "--port", "0", "--workers", "2", "--metrics", "--shutdown-grace", "1"]
    conversations: list[str] = []
    logs: list[str] = []
    with OpenAICompatibleServer() as model:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(ledger),
            "DCAF_TEST_OPENAI_URL": model.base_url,
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        }
        serve = ("tests/e2e/ops_mix_agent.py:make_agent", *options, "--store", store_url)
        with dcaf_like_serve(*serve, env=env) as served:

            def chat(*messages: dict, status: int = 200) -> dict:
                answer = httpx.post(f"{served.url}/api/chat", json={"messages": list(messages)}, timeout=30)
                assert answer.status_code == status, answer.text
                body = answer.json()
                if status == 200 and body["data"]["conversation_id"] not in conversations:
                    conversations.append(body["data"]["conversation_id"])
                return body

            model.call([("check_disk", {"host": "db-1"})])
            model.reply("The disk check failed.")
            chat(user("check the disks of db-1"))  # error
            model.call([("probe_endpoint", {"url": "https://db-1/health"})])
            model.reply("The probe timed out.")
            chat(user("probe db-1"))  # timeout
            model.call([("restart_service", {"name": "web"})])
            model.reply("web restarted.")
            proposed = chat(user("restart web"))  # awaiting approval
            web = proposed["data"]["conversation_id"]
            [pending] = proposed["data"]["tool_calls"]
            chat(user(conversation_id=web, tool_calls=[approve(pending)]))  # ok
            chat(user(conversation_id=web, tool_calls=[approve(pending)]), status=409)  # refused
            model.call([("restart_service", {"name": "api"})])
            model.reply("I will leave api alone.")
            proposed = chat(user("restart api"))
            api = proposed["data"]["conversation_id"]
            [pending] = proposed["data"]["tool_calls"]
            chat(user(conversation_id=api, tool_calls=[reject(pending, "not during the sale")]))
            assert httpx.get(f"{served.url}/no-such-page", timeout=10).status_code == 404

            def snapshot(volume: str) -> tuple[str, threading.Thread]:
                conversation_id = f"conv_{uuid.uuid4().hex[:24]}"
                conversations.append(conversation_id)
                model.call([("snapshot_volume", {"volume": volume})])
                body = {"messages": [user(f"snapshot {volume}", conversation_id=conversation_id)]}

                def follow() -> None:
                    with contextlib.suppress(httpx.HTTPError):
                        answers.append(
                            httpx.post(f"{served.url}/api/chat", json=body, timeout=60).status_code
                        )

                following = threading.Thread(target=follow, daemon=True)
                following.start()
                until(
                    lambda: ledger.exists() and f"started {volume}" in ledger.read_text(), "the tool started"
                )
                return conversation_id, following

            answers: list[int] = []
            conversation_id, following = snapshot("vol-1")
            cancel = httpx.post(f"{served.url}/api/conversations/{conversation_id}/cancel", timeout=10)
            assert cancel.status_code == 202
            following.join(timeout=30)  # cancelled
            _, following = snapshot("vol-2")
            served.process.send_signal(signal.SIGTERM)  # past its grace, the tool is interrupted
            served.process.wait(timeout=30)
            following.join(timeout=30)
            assert answers == [200, 503]
        logs.append(served.log)

        with dcaf_like_serve(*serve, env=env) as served:  # the same metrics directory
            scrapes = [httpx.get(f"{served.url}/metrics", timeout=10) for _ in range(2)]
        logs.append(served.log)
        model_calls = len(model.requests)

    samples = _samples(scrapes[-1].text)
    store = open_store(store_url, namespace="ops")
    held = [(cid, call) for cid in conversations for call in store.get(cid).tool_calls.values()]
    store.close()
    calls = [call for _, call in held]

    def value(name: str, **labels: str) -> float:
        return _value(samples, name, **labels)

    # Tools: what the store recorded, what the log says, what the metric counts, call by call.
    ran = [(cid, call) for cid, call in held if call.status.value != "rejected"]
    recorded = Counter((call.name, _outcome_of(call)) for _, call in ran)
    assert recorded == {
        ("check_disk", "error"): 1,
        ("probe_endpoint", "timeout"): 1,
        ("restart_service", "ok"): 1,
        ("snapshot_volume", "cancelled"): 1,
        ("snapshot_volume", "interrupted"): 1,
    }
    counted = Counter(
        {(dict(labels)["tool"], dict(labels)["outcome"]): count
         for (name, labels), count in samples.items() if name == "dcaf_tool_executions_total"}
    )  # fmt: skip
    assert counted == recorded
    found = [m for log in logs for line in log.splitlines() if (m := WARNING.search(line))]
    logged = [(m["call"], m["conversation"], m["tool"], m["outcome"]) for m in found]
    expected = [
        (call.id.value, cid, call.name, _outcome_of(call)) for cid, call in ran if _outcome_of(call) != "ok"
    ]
    assert sorted(logged) == sorted(expected)  # one line each, none for the call that ended well
    assert not any("db-1" in m.group(0) for m in found)  # neither an argument nor an error's text

    # Turns (refusals apart), model calls and tokens, decisions.
    assert value("dcaf_turns_total", outcome="completed") == 5
    assert value("dcaf_turns_total", outcome="awaiting_approval") == 2
    assert value("dcaf_turns_total", outcome="interrupted") == 1  # the one SIGTERM stopped
    assert value("dcaf_turns_total", outcome="failed") == 0
    assert value("dcaf_refused_requests_total", error="ToolCallAlreadyDecided") == 1
    assert value("dcaf_model_calls_total", runtime="openai:test-model", outcome="ok") == model_calls
    assert value("dcaf_model_call_seconds_count", runtime="openai:test-model") == model_calls
    assert (
        value("dcaf_model_tokens_total", runtime="openai:test-model", direction="input") == 12 * model_calls
    )
    assert (
        value("dcaf_model_tokens_total", runtime="openai:test-model", direction="output") == 7 * model_calls
    )
    decided = Counter(call.status.value for call in calls if call.name == "restart_service")
    assert value("dcaf_decisions_total", kind="approve", entrance="http") == decided["executed"] == 1
    assert value("dcaf_decisions_total", kind="reject", entrance="http") == decided["rejected"] == 1
    assert value("dcaf_decisions_total", kind="refused", entrance="http") == 1
    assert value("dcaf_decision_wait_seconds_count") == 2

    # HTTP: by route template; /metrics is a route, not "unmatched"; no gauge of waiting calls.
    assert value("dcaf_http_requests_total", route="/api/chat", status="200") == 7
    assert value("dcaf_http_requests_total", route="/api/chat", status="409") == 1
    assert value("dcaf_http_requests_total", route="/api/chat", status="503") == 1
    assert (
        value("dcaf_http_requests_total", route="/api/conversations/{conversation_id}/cancel", status="202")
        == 1
    )
    assert value("dcaf_http_requests_total", route="/metrics", status="200") == 1  # the first scrape
    assert value("dcaf_http_requests_total", route="unmatched", status="404") == 1
    assert not [name for name, _ in samples if "awaiting" in name]


#: One WARNING line per tool call that did not end well (docs/operations.md, "Logs").
WARNING = re.compile(
    r"^WARNING: +tool (?P<tool>\w+) (?P<outcome>\w+) \(call=(?P<call>\S+) conversation=(?P<conversation>\S+)"
    r" worker=\S+:\d+ error=(?P<error>\w+) seconds=[\d.]+\)$"
)


def _outcome_of(call) -> str:
    """A stored call's outcome, in the metric's words."""
    if call.status.value == "executed":
        return "ok"
    if call.status.value == "interrupted":
        return "interrupted"
    if call.error.startswith("timed out"):
        return "timeout"
    if call.error.startswith("stopped: the run was cancelled"):
        return "cancelled"
    return "error"
