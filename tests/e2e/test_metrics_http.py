"""`dcaf-like serve --metrics`: /metrics in the Prometheus text format moves by exactly what was done."""

from __future__ import annotations

import os
import socket
from contextlib import ExitStack

import httpx
import pytest
from _helpdesk import approve, user
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
    port = "0"
    if workers > 1:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = str(probe.getsockname()[1])
    env = {
        **os.environ,
        "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
        "DCAF_API_KEYS": f"root:admin={ADMIN},ops={OPS}",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    options = ["--factory", "--port", port, "--metrics", "--workers", str(workers)]
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
