"""pytest fixtures, registered as a plugin when dcaf_like is installed."""

from __future__ import annotations

import pytest

from dcaf_like.adapters.memory import InMemoryConversationRepository
from dcaf_like.testing.fake_runtime import FakeRuntime


@pytest.fixture
def fake_runtime() -> FakeRuntime:
    """An empty scripted runtime: add steps with ``fake_runtime.then(...)``."""
    return FakeRuntime()


@pytest.fixture
def memory_repository() -> InMemoryConversationRepository:
    return InMemoryConversationRepository()
