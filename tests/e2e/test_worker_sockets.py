"""How `dcaf-like serve --workers N` listens (issue 26): every socket a worker serves on has TCP_NODELAY
(uvicorn's own multi-worker socket left Nagle on: ~44 ms per keep-alive response), each worker listens
on a socket of its own on Linux (the kernel spreads new connections across the workers, a replacement
included), and a worker's death is logged at WARNING. Socket options and /proc are read; nothing is
timed."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import httpx
import pytest
import uvicorn

from dcaf_like.server import _workers

ROOT = Path(__file__).resolve().parents[2]
COMMAND = str(Path(sys.executable).parent / "dcaf-like")
TARGET = "tests/e2e/process_agent.py:make_agent"
linux_only = pytest.mark.skipif(
    not _workers.REUSE_PORT, reason="one socket per worker is Linux's SO_REUSEPORT"
)


def as_a_worker_receives_it(sock: socket.socket) -> socket.socket:
    """What a worker process gets: uvicorn's supervisor pickles its sockets into each worker it spawns."""
    received: socket.socket = ForkingPickler.loads(bytes(ForkingPickler.dumps(sock)))
    return received


@contextlib.contextmanager
def uvicorn_serving_on(sock: socket.socket) -> Iterator[uvicorn.Server]:
    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", workers=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_every_connection_a_worker_accepts_has_tcp_nodelay() -> None:
    held = _workers.supervisor_socket("127.0.0.1", 0)
    port = held.getsockname()[1]
    served = as_a_worker_receives_it(held)

    with uvicorn_serving_on(served) as server, socket.create_connection(("127.0.0.1", port)) as client:
        for _ in range(2):  # keep-alive: the second response is the one Nagle held back
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nok"):
                answer += client.recv(1024)
            assert answer.startswith(b"HTTP/1.1 200")
        nodelay = (socket.IPPROTO_TCP, socket.TCP_NODELAY)
        accepted = [
            c.transport.get_extra_info("socket").getsockopt(*nodelay) for c in server.server_state.connections
        ]
        listening = [s.getsockopt(*nodelay) for listener in server.servers for s in listener.sockets]

    held.close()
    assert served.proto == socket.IPPROTO_TCP
    assert len(listening) == 1
    assert all(listening)
    assert len(accepted) == 1
    assert all(accepted)


@linux_only
def test_each_worker_opens_a_socket_of_its_own_on_the_held_port() -> None:
    held = _workers.supervisor_socket("127.0.0.1", 0)
    first, second = as_a_worker_receives_it(held), as_a_worker_receives_it(held)

    assert first.fileno() != second.fileno()
    for sock in (first, second):
        assert sock.getsockname() == held.getsockname()
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
        sock.listen()  # two sockets listening on one port: the kernel balances between them
    for sock in (first, second, held):
        sock.close()


# -- a real `dcaf-like serve --workers 2` ------------------------------------------------------------


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on `port` (state 0A in /proc/net/tcp)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    found.add(fields[9])
    return found


def listeners_by_pid(port: int) -> dict[int, int]:
    """Processes with a socket listening on `port`, and how many each holds."""
    inodes = listening_inodes(port)
    owners: dict[int, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:[") and target[8:-1] in inodes:
                        owners[int(pid)] = owners.get(int(pid), 0) + 1
    return owners


def wait_for(condition, seconds: float = 30):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.05)
    raise AssertionError("the condition never held")


@linux_only
def test_two_workers_listen_on_sockets_of_their_own_and_a_killed_one_is_a_warning(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [COMMAND, "serve", TARGET, "--factory", "--workers", "2", "--port", "0",
         "--store", f"sqlite:///{tmp_path / 'c.sqlite3'}"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
             "DCAF_TEST_LEDGER": str(tmp_path / "ledger")},
    )  # fmt: skip
    assert process.stderr is not None
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(process.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        port = int(wait_for(lambda: re.search(r"running on http://127\.0\.0\.1:(\d+)", "".join(log)))[1])
        workers = wait_for(lambda: (found := listeners_by_pid(port)) and len(found) == 2 and found)
        assert set(workers.values()) == {1}, workers  # one socket each, none shared
        assert process.pid not in workers  # the supervisor holds the port but does not listen
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200

        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        after = wait_for(
            lambda: (found := listeners_by_pid(port)) and len(found) == 2 and victim not in found and found
        )

        assert set(after.values()) == {1}
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=20)
        reader.join(timeout=10)
        process.stderr.close()
    died = [line for line in log if f"worker process [{victim}] died" in line]
    assert len(died) == 1, "".join(log)
    assert died[0].startswith("WARNING")
