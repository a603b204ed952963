"""A live server for end-to-end tests: uvicorn on a loopback port in a thread, spoken to with httpx."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
