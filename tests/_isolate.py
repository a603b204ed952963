"""Tests marked ``native`` run in a pytest process of their own, so a crash in native code fails one test.

llama.cpp is native code: a build that mishandles the CPU dies by a signal, and in-process that signal
ends the whole run before its summary line. Each marked test is run again by a child
``python -m pytest NODEID`` (which runs it normally, the marker seeing it is already in a child), and
its outcome is read from the child's JUnit report, or from the signal that killed it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from _pytest.reports import TestReport

IN_CHILD = "DCAF_TEST_ISOLATED"
CHILD_TIMEOUT = 1800  # seconds: a child's own tests keep pytest-timeout's limit


def should_isolate(item: pytest.Item) -> bool:
    return item.get_closest_marker("native") is not None and os.environ.get(IN_CHILD) != "1"


def lift_parent_timeouts(items: list[pytest.Item]) -> None:
    """The parent only waits for its children: pytest-timeout's limit applies inside each child, to
    the test itself, and the parent waits up to CHILD_TIMEOUT for it."""
    for item in items:
        if should_isolate(item):
            item.add_marker(pytest.mark.timeout(CHILD_TIMEOUT))


def run_in_child(item: pytest.Item) -> bool:
    """Runs `item` in a child pytest and reports its setup, call and teardown as the child ended."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    start = time.time()
    outcome, longrepr, output = _child_outcome(item)
    stop = time.time()
    reports = [_report(item, "setup", "passed", None, start, start)]
    if outcome == "skipped":
        reports = [_report(item, "setup", "skipped", longrepr, start, stop)]
    else:
        reports.append(_report(item, "call", outcome, longrepr, start, stop, output))
    reports.append(_report(item, "teardown", "passed", None, stop, stop))
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _child_outcome(item: pytest.Item) -> tuple[str, Any, str]:
    rootdir = item.config.rootpath
    with tempfile.TemporaryDirectory(prefix="dcaf-isolated-") as work:
        junit = Path(work) / "report.xml"
        command = [
            sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", "no:cacheprovider",
            f"--junitxml={junit}", "-o", "junit_logging=all",
        ]  # fmt: skip
        env = {**os.environ, IN_CHILD: "1", "PYTHONFAULTHANDLER": "1"}
        try:
            done = subprocess.run(
                command, cwd=rootdir, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "failed", f"the child running this test did not finish in {CHILD_TIMEOUT} s", ""
        output = done.stdout + done.stderr
        if done.returncode < 0:
            name = _signal_name(-done.returncode)
            return (
                "failed",
                f"the test's process died by {name} (native code crashed)\n\n{_tail(output)}",
                output,
            )
        return _read_junit(junit, item, done.returncode, output)


def _read_junit(junit: Path, item: pytest.Item, returncode: int, output: str) -> tuple[str, Any, str]:
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        return "failed", f"the child pytest exited {returncode} without a report\n\n{_tail(output)}", output
    for case in cases:
        for child in case:
            if child.tag in {"failure", "error"}:
                return "failed", f"{child.get('message', '')}\n{child.text or ''}", output
            if child.tag == "skipped":
                path, lineno, _ = item.location
                return "skipped", (str(path), (lineno or 0) + 1, child.get("message", "skipped")), output
        return "passed", None, output
    return "failed", f"the child pytest ran no test (exit {returncode})\n\n{_tail(output)}", output


def _report(
    item: pytest.Item, when: str, outcome: str, longrepr: Any, start: float, stop: float, output: str = ""
) -> TestReport:
    sections = [("Captured output of the child process", output)] if output and outcome == "failed" else []
    return TestReport(
        item.nodeid, item.location, dict.fromkeys(item.keywords, 1), outcome, longrepr, when,
        sections=sections, duration=stop - start, start=start, stop=stop,
    )  # fmt: skip


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
