"""``dcaf-like serve``: the installed console command, run as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from _server import dcaf_like_serve

ROOT = Path(__file__).resolve().parents[2]
COMMAND = str(Path(sys.executable).parent / "dcaf-like")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_serve_runs_an_agent_function_from_a_file_until_stopped():
    with dcaf_like_serve("examples/triage_function.py:triage", "--port", "0") as served:
        response = httpx.post(
            f"{served.url}/api/chat",
            json={"messages": [{"role": "user", "content": "OOMKilled on api-1"}]},
            timeout=10,
        )

        assert response.status_code == 200
        assert response.json()["content"].startswith("First step: Raise the container's memory limit")
        request_id = response.headers["x-request-id"]
    assert f"request_id={request_id}" in served.log, "the access log names the request id"


def test_serve_explains_a_target_it_cannot_find():
    missing_name = run("serve", "examples/triage_function.py:nope")
    missing_file = run("serve", "examples/absent.py:agent")
    no_colon = run("serve", "examples/triage_function.py")

    assert missing_name.returncode == 2
    assert "has no 'nope'" in missing_name.stderr
    assert "triage" in missing_name.stderr
    assert missing_file.returncode == 2
    assert "no such file" in missing_file.stderr
    assert no_colon.returncode == 2
    assert "expected FILE.py:NAME" in no_colon.stderr


def test_serve_says_which_runtime_is_missing_instead_of_a_traceback():
    env = {k: v for k, v in os.environ.items() if k != "DCAF_RUNTIME"}

    result = run("serve", "examples/k8s_agent.py:from_environment", "--factory", env=env)

    assert result.returncode == 2
    assert "no model runtime" in result.stderr
    assert "Traceback" not in result.stderr


def test_python_dash_m_runs_the_same_command():
    as_module = subprocess.run(
        [sys.executable, "-m", "dcaf_like.cli", "serve", "examples/triage_function.py:nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    as_command = run("serve", "examples/triage_function.py:nope")

    assert as_module.returncode == as_command.returncode != 0
    assert as_module.stderr == as_command.stderr
