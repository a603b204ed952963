"""A script calling ``asyncio.run(...)`` once per request, against each client opened per event loop
(issue 33): every loop ends, and no connection outlives its loop. The long run (500 loops per kind,
beside ``stress``) is ``python scripts/loop_per_call.py``; this is its bounded version."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytestmark = pytest.mark.integration

_SCRIPT = pathlib.Path(__file__).parents[2] / "scripts" / "loop_per_call.py"
_spec = importlib.util.spec_from_file_location("loop_per_call", _SCRIPT)
assert _spec is not None
assert _spec.loader is not None
loop_per_call = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(loop_per_call)

RUNS = 25


def test_postgres_loops_end_and_close_every_connection(postgres_url):
    assert loop_per_call.check_postgres(RUNS, postgres_url) == (
        f"postgres: {RUNS} runs, no hang, no connection left open"
    )


def test_postgres_loops_end_when_the_pool_is_still_growing(postgres_url, caplog):
    """Three requests at once on each loop make the pool grow: its workers connect in the background,
    and one still connecting as the loop ends is cancelled, which is no error to log."""
    assert loop_per_call.check_postgres(RUNS, postgres_url, concurrent=3) == (
        f"postgres: {RUNS} runs, no hang, no connection left open"
    )
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []


def test_redis_loops_end_and_close_every_connection(redis_url):
    assert (
        loop_per_call.check_redis(RUNS, redis_url) == f"redis: {RUNS} runs, no hang, no connection left open"
    )


def test_openai_client_loops_end_and_close_every_connection():
    assert loop_per_call.check_openai(RUNS) == f"openai: {RUNS} runs, no hang, no connection left open"
