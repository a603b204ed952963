"""A real server for end-to-end tests: uvicorn on a loopback port, spoken to with httpx."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from _server import serving

from dcaf_like import create_app

StartServer = Callable[..., httpx.Client]


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """``client = start_server(agent, **create_app_options)``: a client whose base URL is a live server
    (``client_timeout=`` for slow agents, such as a real model on a busy machine)."""
    with ExitStack() as running:

        def start(agent: Any, *, client_timeout: float = 10, **options: Any) -> httpx.Client:
            return running.enter_context(serving(create_app(agent, **options), client_timeout=client_timeout))

        yield start
