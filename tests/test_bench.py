"""`make bench` runs (a short mode: the figures themselves are never asserted; no test is timed).

Marked ``bench``: `make bench` and CI run them (``pytest -m bench``); `make test` does not, they take
minutes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Each runs a benchmark script in a child process, which has its own timeout: on a loaded machine the
# quick mode can take minutes, which is no failure of what these tests check.
pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]


def bench(*args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    """A benchmark script of benchmarks/ run with `args` (and `env` added), as a user runs it."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=800,
        check=check,
        env={**os.environ, **env},
    )


def test_the_benchmarks_run_and_report_every_peer_side_by_side(redis_url, postgres_url):
    for package in ("agno", "google.adk", "langchain_openai"):
        pytest.importorskip(package, reason=f"{package} is needed to compare against it: make install")

    result = bench(
        "benchmarks/run.py", "--quick", DCAF_BENCH_REDIS_URL=redis_url, DCAF_BENCH_POSTGRES_URL=postgres_url
    )

    out = result.stdout
    for row in ("`import dcaf_like`", "`import agno.agent`", "`from google.adk.runners import Runner`"):
        assert row in out
    for table in (
        "Agent with one tool",
        "Turn: tool call, result, answer",
        "Store: a turn on N stored messages",
        "bare FastAPI endpoint, same JSON",
        "dcaf_like: answer, Redis store",
        "dcaf_like: answer, SQLite store, `dcaf-like serve --workers 2`",
        "Redis per turn of a new conversation",
        "deltas over `/api/chat-stream`",
        "Growth: messages already stored",
        "PostgreSQL round trips per turn",
        "Domain hot path",
        "Blocking call from the loop, there and back",
        "Provider client: CPU per model call",
        "Runs in flight: turns started at a steady rate",
        "Servers on their own stores",
        "an owner's first page (theirs: 1 in 100)",
        "Job engine: the approval",
        "DynamoDB (moto): items its queries read",
        "A turn, in instructions (callgrind)",  # docs/benchmarks.md, "A turn against Agno's"
    ):
        assert table in out
    assert "written to" not in out  # the quick mode leaves the docs alone


def test_the_provider_client_benchmark_measures_every_runtime_on_the_same_stub():
    """benchmarks/provider_cpu.py --quick: each runtime answered the stub's text (it checks that) and
    was measured; the figures themselves are not asserted."""
    for package in ("openai", "langchain_openai", "agno", "boto3", "google.adk"):
        pytest.importorskip(package, reason=f"{package} is needed to compare against it: make install")

    result = bench("benchmarks/provider_cpu.py", "--quick")

    rows = [line for line in result.stdout.splitlines() if line.startswith("| `")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "`OpenAIRuntime` (its wire client)",
        "`OpenAIRuntime(client=openai.OpenAI(...))` (the SDK)",
        "`LangChainRuntime(ChatOpenAI(...))`",
        "`AgnoRuntime(OpenAILike(...))`",
        "`BedrockRuntime` (boto3, Converse)",
        "`AdkRuntime(Gemini(...))` (google-genai)",
    ]
    for row in rows:
        assert float(row.split("|")[2]) > 0, row


def test_the_runs_in_flight_benchmark_answers_every_turn_of_each_server_and_reports_its_cost():
    """benchmarks/in_flight.py --quick: ours and the peers' servers on the slow stub, every turn
    answered by the stub's text (it checks that), latency, CPU and memory per turn reported; the
    figures themselves are not asserted."""
    pytest.importorskip("httpcore", reason="OpenAIRuntime needs the openai extra: make install")
    for package in ("agno.os", "google.adk.cli.fast_api"):
        pytest.importorskip(package, reason=f"{package} is needed to compare against it: make install")

    result = bench("benchmarks/in_flight.py", "--quick")

    rows = [
        line.split("|") for line in result.stdout.splitlines() if line.startswith("| ") and "| 20 |" in line
    ]
    assert [row[1].split()[0] for row in rows] == ["dcaf_like", "Agno", "Google"], result.stdout
    for row in rows:
        assert int(row[3]) > 0, row  # turns were in flight
        assert float(row[6]) > 0, row  # and cost the server CPU


def test_the_peers_on_their_own_stores_answer_the_same_turn_and_are_measured_beside_ours(postgres_url):
    for package in ("agno.db.sqlite", "google.adk.sessions.database_session_service"):
        pytest.importorskip(package, reason=f"{package} is needed to compare against it: make install")

    result = bench("benchmarks/peer_stores.py", "--quick", DCAF_BENCH_POSTGRES_URL=postgres_url)

    rows = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| ") and "`" in line]
    assert [(row[1].split()[0], row[2].strip()) for row in rows] == [
        (kind, store) for store in ("sqlite", "postgres") for kind in ("dcaf_like", "Agno", "Google")
    ], result.stdout
    for row in rows:  # each answered "web-1 is running." after running the tool, keeping its sessions there
        assert "not measured" not in row[3], row
        assert float(row[3]) > 0, row


def test_the_peers_servers_answer_the_same_turn_and_are_measured_beside_ours():
    for package in ("agno.os", "google.adk.cli.fast_api"):
        pytest.importorskip(package, reason=f"{package} is needed to compare against it: make install")

    result = bench("benchmarks/peer_servers.py", "--quick")

    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 3, result.stdout
    for row in rows:  # each server answered "web-1 is running." after running the tool, then took the load
        assert "not measured" not in row, row
        assert float(row.split("|")[2]) > 0


def test_a_short_soak_runs_every_server_and_every_approval_ran_exactly_once(redis_url, postgres_url):
    result = bench(
        "benchmarks/soak.py",
        "--seconds",
        "3",
        check=False,
        DCAF_BENCH_REDIS_URL=redis_url,
        DCAF_BENCH_POSTGRES_URL=postgres_url,
    )

    assert result.returncode == 0, result.stdout + result.stderr  # it fails on a 5xx or a broken check
    rows = [line for line in result.stdout.splitlines() if line.endswith("| exact |")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "1 worker, SQLite",
        "2 workers, Redis",
        "2 workers, PostgreSQL",
    ]


def test_the_inbox_benchmark_runs_and_the_inbox_finds_every_waiting_call():
    """benchmarks/inbox.py --quick (docs/approvals.md, "One inbox"): the figures are not asserted, only
    that each size was measured and the inbox found every waiting call (the script fails otherwise)."""
    result = bench("benchmarks/inbox.py", "--quick")

    cells = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| ")]
    rows = [row for row in cells if row[1].strip().replace(",", "").isdigit()]
    assert [(row[1].strip(), row[4].strip()) for row in rows] == [("200", "100"), ("2,000", "100")], (
        result.stdout
    )


def test_the_store_scale_benchmark_measures_every_operation_on_every_shared_store(redis_url, postgres_url):
    """benchmarks/store_scale.py --quick (docs/stores.md, "Stores of any size"): every operation is
    measured at each size on each store (the script checks what each one returns: a full page, the
    10 conversations the prune finds); the figures are not asserted."""
    result = bench(
        "benchmarks/store_scale.py",
        "--quick",
        DCAF_BENCH_REDIS_URL=redis_url,
        DCAF_BENCH_POSTGRES_URL=postgres_url,
    )

    cells = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| ")]
    rows = [row for row in cells if len(row) == 9 and row[1].strip() != "Store"]  # the first table's
    measured = {(row[1].strip(), row[2].strip()) for row in rows}
    operations = {row[2].strip() for row in rows}
    assert len(operations) == 7, result.stdout
    for store in ("SQLite", "Redis", "PostgreSQL", "DynamoDB (moto)"):
        assert {(store, operation) for operation in operations} <= measured, result.stdout
    assert "| DynamoDB (moto): items its queries read |" in result.stdout


def test_the_job_engine_benchmark_runs_the_tools_in_process_and_on_two_celery_workers(redis_url):
    """benchmarks/jobs.py --quick (docs/runs.md, "Tools on a job engine"): the approvals are timed and
    every tool's result is recorded both ways (the script fails otherwise); figures not asserted."""
    pytest.importorskip("celery", reason="the celery extra is not installed: pip install -e '.[celery]'")

    result = bench("benchmarks/jobs.py", "--quick")

    assert "| approve a call of a background tool (its job sent to Redis) |" in result.stdout
    assert "| 2 Celery workers, 4 each |" in result.stdout
