"""The suite's leak check (tests/conftest.py): a task left pending on a closed event loop fails the
test that left it, not the one running when it is collected (issue 33). Run in a child pytest on a
copy of the suite's conftest, since the leak must really happen."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parents[1]

LEAKING = """
import asyncio


def test_leaks_a_task():
    loop = asyncio.new_event_loop()

    async def forever():
        await asyncio.Event().wait()

    async def main():
        loop.create_task(forever(), name="left-behind")
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    loop.close()


def test_runs_after_it():
    assert True
"""


def test_a_task_left_pending_on_a_closed_loop_fails_its_own_test_and_not_the_next(tmp_path):
    for name in ("conftest.py", "_isolate.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "test_leaky.py").write_text(LEAKING)

    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )

    assert "ERROR at teardown of test_leaks_a_task" in run.stdout, run.stdout
    assert "left tasks pending on a closed event loop: left-behind" in run.stdout
    assert "2 passed, 1 error" in run.stdout
