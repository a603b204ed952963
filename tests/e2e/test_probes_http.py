"""`/health` and `/ready` on a real `dcaf-like serve` process whose Redis the test starts and stops."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from _server import dcaf_like_serve

REDIS = shutil.which("redis-server")
KEY = "k" * 32


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _redis(port: int) -> Iterator[None]:
    assert REDIS is not None
    process = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _until(lambda: _answers(port), "redis did not start")
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _until(condition: Any, message: str, attempts: int = 300) -> Any:
    for _ in range(attempts):
        if result := condition():
            return result
        time.sleep(0.1)
    raise AssertionError(message)


def _ready(url: str, status: int) -> Any:
    def probe() -> Any:
        answer = httpx.get(f"{url}/ready", timeout=10)
        return answer if answer.status_code == status else None

    return probe


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")
def test_ready_follows_the_redis_the_server_uses_while_health_stays_up(tmp_path):
    port = _free_port()
    env = {**os.environ, "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"), "DCAF_API_KEYS": f"ops={KEY}"}
    store = f"redis://127.0.0.1:{port}/0?prefix=probe-test:"
    agent = "tests/e2e/process_agent.py:make_agent"
    first = _redis(port)
    first.__enter__()
    try:
        with dcaf_like_serve(agent, "--factory", "--port", "0", "--store", store, env=env) as served:
            up = httpx.get(f"{served.url}/ready", timeout=10)  # no key: the probes are open
            assert up.status_code == 200, up.text
            assert up.json()["status"] == "ready"
            assert up.json()["checks"]["store"]["ok"] is True
            assert up.json()["checks"]["runtime"]["ok"] is True
            assert isinstance(up.json()["checks"]["store"]["latency_ms"], float)

            first.__exit__(None, None, None)
            first = None
            down = _until(_ready(served.url, 503), "/ready never noticed that Redis stopped")
            checks = down.json()["checks"]
            assert checks["store"]["ok"] is False
            assert checks["runtime"]["ok"] is True
            assert str(port) not in down.text  # the error names a class, not where the store is
            assert httpx.get(f"{served.url}/health", timeout=10).status_code == 200

            with _redis(port):
                back = _until(_ready(served.url, 200), "/ready never noticed that Redis came back")
                assert back.json()["checks"]["store"]["ok"] is True
    finally:
        if first is not None:
            first.__exit__(None, None, None)


def test_ready_without_a_store_check_for_a_function_agent():
    from dcaf_like import create_app

    app = create_app(lambda messages, context: "hi", ui=False)
    from _server import serving

    with serving(app) as client:
        answer = client.get("/ready")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready", "checks": {}}


def test_ready_waits_for_a_runtime_that_loads_its_model_and_starts_loading_it():
    import threading

    from dcaf_like import Agent, create_app
    from dcaf_like.testing import FakeRuntime

    release = threading.Event()

    class Loading(FakeRuntime):
        loaded = False

        def load(self) -> Loading:
            release.wait(30)
            self.loaded = True
            return self

    from _server import serving

    with serving(create_app(Agent(runtime=Loading()), ui=False)) as client:
        waiting = client.get("/ready")
        release.set()
        ready = _until(lambda: (answer := client.get("/ready")).status_code == 200 and answer, "never loaded")
    assert waiting.status_code == 503
    assert waiting.json()["checks"]["runtime"] == {
        "ok": False,
        "latency_ms": waiting.json()["checks"]["runtime"]["latency_ms"],
        "error": "model loading",
    }
    assert waiting.json()["checks"]["store"]["ok"] is True
    assert ready.json()["checks"]["runtime"]["ok"] is True


@pytest.mark.parametrize("url", ["memory://", "sqlite:///{tmp}/p.db"])
def test_every_store_answers_a_ping(tmp_path, url):
    from dcaf_like.stores import open_store

    store = open_store(url.format(tmp=tmp_path))
    store.ping()
    import asyncio

    asyncio.run(store.aping())
