"""A test marked ``native`` that crashes the process fails alone: the run goes on to its summary line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from _isolate import run_in_child, should_isolate


def pytest_configure(config):
    config.addinivalue_line("markers", "native: runs in a child process")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    return run_in_child(item) if should_isolate(item) else None
"""

TESTS_FILE = """
import ctypes
import pytest


@pytest.mark.native
def test_crashes_in_native_code():
    ctypes.string_at(0)


@pytest.mark.native
def test_fails_in_its_child():
    assert 1 + 1 == 3


@pytest.mark.native
def test_skips_in_its_child():
    pytest.skip("no model here")


@pytest.mark.native
def test_passes_in_its_child():
    assert True


def test_runs_in_the_parent_after_the_crash():
    assert True
"""


def test_a_native_crash_fails_one_test_and_the_run_reaches_its_summary(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_native.py").write_text(TESTS_FILE)

    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the children start in a second
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-o", "addopts=", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip

    assert done.returncode == 1, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert "2 failed, 2 passed, 1 skipped" in summary, done.stdout
    assert "FAILED test_native.py::test_crashes_in_native_code" in done.stdout
    assert "died by SIGSEGV" in done.stdout
    assert "FAILED test_native.py::test_fails_in_its_child" in done.stdout
    assert "assert (1 + 1) == 3" in done.stdout
    assert "no model here" in done.stdout
