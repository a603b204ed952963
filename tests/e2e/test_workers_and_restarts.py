"""Approvals across real server processes sharing one store: a restart between proposal and approval,
and two workers receiving the same approval fifty times at once. The tool must run exactly once."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import approve, user

ROOT = Path(__file__).resolve().parents[2]
COMMAND = str(Path(sys.executable).parent / "dcaf-like")
TARGET = "tests/e2e/process_agent.py:make_agent"


@dataclass
class Worker:
    process: subprocess.Popen[str]
    url: str
    log: list[str] = field(default_factory=list)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        self.process.wait(timeout=15)

    def kill_all(self) -> None:
        """Kill the server and any worker processes it started (its own process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=15)


StartWorker = Callable[..., Worker]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "executions.log"
    path.touch()
    return path


@pytest.fixture
def start_worker(ledger: Path) -> Iterator[StartWorker]:
    """``start_worker(store_url)``: a ``dcaf-like serve`` process on a free port, serving the rule agent."""
    workers: list[Worker] = []
    readers: list[threading.Thread] = []

    def start(store: str, *extra: str) -> Worker:
        process = subprocess.Popen(
            [COMMAND, "serve", TARGET, "--factory", "--port", "0", "--store", store, *extra],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
            env={**_environment(), "DCAF_TEST_LEDGER": str(ledger)},
            start_new_session=True,
        )
        assert process.stderr is not None
        log: list[str] = []
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line and process.poll() is not None:
                break
            log.append(line)
            if match := re.search(r"running on http://127\.0\.0\.1:(\d+)", line):
                port = int(match.group(1))
        if port is None:
            process.kill()
            raise RuntimeError("the worker did not start:\n" + "".join(log) + process.stderr.read())
        worker = Worker(process, f"http://127.0.0.1:{port}", log)
        # Keep reading its log so the pipe never fills and blocks the server.
        reader = threading.Thread(target=lambda: log.extend(process.stderr), daemon=True)  # type: ignore[arg-type]
        reader.start()
        workers.append(worker)
        readers.append(reader)
        # With --workers the port is bound at once but listened on only once a worker has started.
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{worker.url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.05)
        return worker

    yield start
    for worker in workers:
        worker.kill_all()
    for reader, worker in zip(readers, workers, strict=True):
        reader.join(timeout=15)
        assert worker.process.stderr is not None
        if not reader.is_alive():
            worker.process.stderr.close()


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DCAF_STORE"}


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'conversations.sqlite3'}"
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        return f"{url}?table={request.getfixturevalue('postgres_table')}"
    url = request.getfixturevalue("redis_url")
    prefix = request.getfixturevalue("redis_prefix")
    return f"{url}?prefix={prefix}"


def propose(url: str) -> tuple[str, dict[str, Any]]:
    response = httpx.post(
        f"{url}/api/chat", json={"messages": [user("delete pod web-1 in prod")]}, timeout=10
    )
    assert response.status_code == 200, response.text
    body = response.json()
    (pending,) = body["data"]["tool_calls"]
    assert pending["name"] == "delete_pod"
    assert pending["input"] == {"name": "web-1", "namespace": "prod"}
    return body["data"]["conversation_id"], pending


def approval(conversation_id: str, pending: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}


def executions(ledger: Path) -> list[str]:
    return ledger.read_text(encoding="utf-8").splitlines()


def test_an_approval_survives_a_killed_server_and_runs_once_in_the_next(
    start_worker: StartWorker, store_url: str, ledger: Path
) -> None:
    first = start_worker(store_url)
    conversation_id, pending = propose(first.url)
    first.stop(signal.SIGKILL)  # no shutdown hook runs: what was saved is all there is

    second = start_worker(store_url)
    approved = httpx.post(f"{second.url}/api/chat", json=approval(conversation_id, pending), timeout=10)
    replay = httpx.post(f"{second.url}/api/chat", json=approval(conversation_id, pending), timeout=10)

    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert body["content"] == 'Done: pod "web-1" deleted'
    (executed,) = body["data"]["executed_tool_calls"]
    assert executed["id"] == pending["id"]
    assert executed["output"] == 'pod "web-1" deleted'
    assert replay.status_code == 409
    assert replay.json()["error"]["code"] == "tool_call_already_decided"
    assert len(executions(ledger)) == 1
    assert executions(ledger)[0].endswith("prod/web-1")
    follow_up = httpx.post(
        f"{second.url}/api/chat",
        json={"messages": [user("thanks", conversation_id=conversation_id)]},
        timeout=10,
    )
    assert follow_up.status_code == 200
    assert follow_up.json()["content"] == "Nothing to do."
    history = httpx.get(f"{second.url}/api/conversations/{conversation_id}", timeout=10).json()
    assert [(m["role"], m["content"]) for m in history["messages"]] == [
        ("user", "delete pod web-1 in prod"),
        ("assistant", ""),
        ("assistant", 'Done: pod "web-1" deleted'),
        ("user", "thanks"),
        ("assistant", "Nothing to do."),
    ]
    (call,) = history["tool_calls"]
    assert (call["id"], call["status"], call["output"]) == (pending["id"], "executed", 'pod "web-1" deleted')


def test_fifty_simultaneous_approvals_over_two_workers_run_the_tool_once(
    start_worker: StartWorker, store_url: str, ledger: Path
) -> None:
    workers = [start_worker(store_url), start_worker(store_url)]
    conversation_id, pending = propose(workers[0].url)
    body = approval(conversation_id, pending)
    start = threading.Barrier(50)

    def send(n: int) -> httpx.Response:
        with httpx.Client(base_url=workers[n % 2].url, timeout=30) as client:
            start.wait()
            return client.post("/api/chat", json=body)

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(send, range(50)))

    statuses = Counter(r.status_code for r in responses)
    assert statuses[200] == 1, statuses
    assert statuses[409] == 49, statuses
    codes = Counter(r.json()["error"]["code"] for r in responses if r.status_code == 409)
    assert set(codes) <= {"tool_call_already_decided", "concurrent_update"}, codes
    (winner,) = [r for r in responses if r.status_code == 200]
    assert winner.json()["data"]["executed_tool_calls"][0]["id"] == pending["id"]
    assert len(executions(ledger)) == 1
    assert {line.split()[0] for line in executions(ledger)} <= {str(w.process.pid) for w in workers}


def test_one_command_with_two_workers_honours_fifty_approvals_once(
    start_worker: StartWorker, tmp_path: Path, ledger: Path
) -> None:
    server = start_worker(f"sqlite:///{tmp_path / 'shared.sqlite3'}", "--workers", "2")
    conversation_id, pending = propose(server.url)
    body = approval(conversation_id, pending)
    start = threading.Barrier(50)

    def send(_: int) -> httpx.Response:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            start.wait()
            return client.post("/api/chat", json=body)

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(send, range(50)))

    assert Counter(r.status_code for r in responses) == {200: 1, 409: 49}
    assert len(executions(ledger)) == 1
    server.stop()
    assert any("conversations are kept in sqlite:///" in line for line in server.log)


def test_several_workers_refuse_an_in_memory_store(ledger: Path) -> None:
    result = subprocess.run(
        [COMMAND, "serve", TARGET, "--factory", "--workers", "2", "--store", "memory://"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**_environment(), "DCAF_TEST_LEDGER": str(ledger)},
        check=False,
    )

    assert result.returncode == 2
    assert "2 workers cannot share an in-memory store" in result.stderr
