"""`dcaf-like worker` (docs/deployment.md, "The tool tier"): an agent without a job engine is refused
with a message that says what to give it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dcaf_like.cli.main import main

pytest.importorskip("celery", reason="the celery extra is not installed: pip install -e '.[celery]'")


def test_an_agent_without_a_job_engine_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "plain_app.py"
    app.write_text(
        "from dcaf_like import Agent\n"
        "from dcaf_like.testing import FakeRuntime\n"
        "agent = Agent(runtime=FakeRuntime([]))\n"
    )
    assert main(["worker", f"{app}:agent"]) == 2
    error = capsys.readouterr().err
    assert "has no job engine: give it Agent(executor=CeleryExecutor(...))" in error


def test_a_target_that_does_not_exist_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", f"{tmp_path / 'missing.py'}:agent"]) == 2
    assert "no such file" in capsys.readouterr().err
