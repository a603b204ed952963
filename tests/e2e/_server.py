"""A live server for end-to-end tests: uvicorn on a loopback port in a thread, spoken to with httpx."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn


@contextmanager
def serving(app: Any, *, client_timeout: float = 10) -> Iterator[httpx.Client]:
    """`app` served by uvicorn on a loopback port until the block ends, and its shutdown has run."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=client_timeout) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(timeout=20)


ROOT = Path(__file__).resolve().parents[2]
COMMAND = str(Path(sys.executable).parent / "dcaf-like")


@dataclass
class Served:
    """A ``dcaf-like serve`` process: where it listens and, once it has stopped, everything it logged."""

    url: str
    log: str = ""
    process: subprocess.Popen[str] | None = None


@contextmanager
def dcaf_like_serve(*args: str, env: Mapping[str, str] | None = None) -> Iterator[Served]:
    """``dcaf-like serve ARGS`` as a real process, stopped when the block ends; every worker answers
    ``/health`` before the block starts. Give ``--port 0`` (one worker) or a free port (several)."""
    process = subprocess.Popen(
        [COMMAND, "serve", *args], cwd=ROOT, env=None if env is None else dict(env), stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stderr is not None
    lines: list[str] = []
    port = None
    deadline = time.monotonic() + 30
    while port is None and time.monotonic() < deadline and process.poll() is None:
        lines.append(process.stderr.readline())
        if match := re.search(r"running on http://127\.0\.0\.1:(\d+)", lines[-1]):
            port = int(match.group(1))
    served = Served(f"http://127.0.0.1:{port}", process=process)
    # Keep reading what it logs, so a long test never blocks it on a full pipe.
    drain = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)  # type: ignore[arg-type]
    drain.start()
    try:
        assert port is not None, "the server never said where it listens:\n" + "".join(lines)
        while time.monotonic() < deadline:
            with suppress(httpx.TransportError):
                if httpx.get(f"{served.url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        yield served
    except BaseException:
        _stop(process, drain, served, lines)
        sys.stderr.write(f"--- what `dcaf-like serve {' '.join(args)}` logged ---\n{served.log}")
        raise
    if not _stop(process, drain, served, lines):
        raise AssertionError(
            f'the server was still running {SETTLE} s after SIGTERM (docs/deployment.md, "Restarts and'
            f' deploys": it stops as soon as no turn is left); it logged:\n{served.log}'
        )


#: How long a test waits for a server to exit after SIGTERM, past the default grace (25 s) for a turn
#: a test left running.
SETTLE = 40


def _stop(process: subprocess.Popen[str], drain: threading.Thread, served: Served, lines: list[str]) -> bool:
    """SIGTERM, then (past `SETTLE` seconds) SIGKILL, so no test leaves a server behind; whether it
    exited by itself."""
    process.terminate()
    try:
        process.wait(timeout=SETTLE)
        settled = True
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        settled = False
    drain.join(timeout=15)
    assert process.stderr is not None
    process.stderr.close()
    served.log = "".join(lines)
    return settled


def until(ready: Callable[[], bool], what: str, seconds: float = 20) -> None:
    """Wait for `ready` (a bound for a hang, not a measure: the test fails naming `what` past it)."""
    import pytest

    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.02)


def store_url_of(kind: str, request: Any, tmp_path: Path) -> str:
    """The ``--store`` URL of a store of `kind` (``sqlite``, ``redis``, ``postgres``, ``dynamodb``) of
    this test's own, for tests that run several server processes on one store. DynamoDB is moto's
    emulator, a table of the test's own that the first server to open it creates."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'conversations.sqlite3'}"
    if kind == "postgres":
        return f"{request.getfixturevalue('postgres_url')}?table={request.getfixturevalue('postgres_table')}"
    if kind == "dynamodb":
        endpoint = request.getfixturevalue("dynamodb_endpoint")
        return f"dynamodb://t-{uuid.uuid4().hex[:12]}?region=eu-west-1&endpoint={endpoint}&create=1"
    return f"{request.getfixturevalue('redis_url')}?prefix={request.getfixturevalue('redis_prefix')}"
