"""A real server for end-to-end tests: uvicorn on a loopback port, spoken to with httpx."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from dcaf_like import create_app

StartServer = Callable[..., httpx.Client]


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """``client = start_server(agent, **create_app_options)``: a client whose base URL is a live server
    (``client_timeout=`` for slow agents, such as a real model on a busy machine)."""
    running: list[tuple[uvicorn.Server, threading.Thread, httpx.Client]] = []

    def start(agent: Any, *, client_timeout: float = 10, **options: Any) -> httpx.Client:
        config = uvicorn.Config(
            create_app(agent, **options), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=client_timeout)
        running.append((server, thread, client))
        return client

    yield start
    for server, thread, client in running:
        client.close()
        server.should_exit = True
        thread.join(timeout=10)
