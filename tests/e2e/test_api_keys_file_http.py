"""``dcaf-like serve --api-keys-file FILE`` (issue 36): the keys in a file only its owner may read, one
``identity[:scope+scope]=key`` a line, checked by a real server process, with one worker or several."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _helpdesk import approve, user
from _server import dcaf_like_serve

COMMAND = str(Path(sys.executable).parent / "dcaf-like")
ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"
FROM_ENVIRONMENT = "env-key-0123456789abcdef00"


def keys_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "api-keys"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("workers", [1, 2])
def test_the_served_agent_takes_the_keys_of_the_file(tmp_path: Path, workers: int) -> None:
    path = keys_file(tmp_path, f"# operators\nalice:chat+approve+read={ALICE}\n\n  bob:read = {BOB}\n")
    # The command line wins over the environment, as everywhere: this key is not the server's.
    env = {
        **os.environ,
        "DCAF_TEST_LEDGER": str(tmp_path / "ledger"),
        "DCAF_API_KEYS": f"eve={FROM_ENVIRONMENT}",
    }
    env.pop("DCAF_STORE", None)
    options = ["--factory", "--port", "0", "--workers", str(workers), "--api-keys-file", str(path)]
    options += ["--store", f"sqlite:///{tmp_path / 'c.db'}"]

    with (
        dcaf_like_serve("tests/e2e/rules_agent.py:make_agent", *options, env=env) as served,
        httpx.Client(
            base_url=served.url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0)
        ) as client,
    ):
        message = {"messages": [user("delete pod web-1")]}
        nobody = client.post("/api/chat", json=message)
        environment = client.post("/api/chat", json=message, headers={"X-API-Key": FROM_ENVIRONMENT})
        reader = client.post("/api/chat", json=message, headers={"X-API-Key": BOB})
        alice = {"Authorization": f"Bearer {ALICE}"}
        proposed = client.post("/api/chat", json=message, headers=alice).json()["data"]
        decision = user(
            conversation_id=proposed["conversation_id"], tool_calls=[approve(proposed["tool_calls"][0])]
        )
        done = client.post("/api/chat", json={"messages": [decision]}, headers=alice)
        record = client.get(f"/api/conversations/{proposed['conversation_id']}", headers=alice).json()

    assert (nobody.status_code, environment.status_code) == (401, 401)
    assert (reader.status_code, reader.json()["error"]["code"]) == (403, "missing_scope")
    assert done.status_code == 200, done.text
    assert record["tool_calls"][0]["decided_by"] == "alice"
    assert (tmp_path / "ledger").read_text().split() == ["web-1"]
    for key in (ALICE, BOB):
        assert key not in served.log


def refused(tmp_path: Path, path: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [COMMAND, "serve", "examples/triage_function.py:triage", "--port", "0", "--api-keys-file", str(path)],
        cwd=Path(__file__).resolve().parents[2],
        env={k: v for k, v in os.environ.items() if not k.startswith("DCAF_")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "Uvicorn running" not in result.stderr, "the server must not have bound"
    return result


def test_a_file_others_may_read_is_refused_naming_the_fix(tmp_path: Path) -> None:
    path = keys_file(tmp_path, f"alice={ALICE}\n", mode=0o644)

    result = refused(tmp_path, path)

    assert f"the API keys file {path} is open to other users (mode 0644)" in result.stderr
    assert f"chmod 600 {path}" in result.stderr
    assert ALICE not in result.stderr


def test_a_malformed_line_is_refused_by_its_number_without_its_key(tmp_path: Path) -> None:
    path = keys_file(tmp_path, f"# keys\nalice={ALICE}\nbob:chta={BOB}\n")

    result = refused(tmp_path, path)

    assert f"{path}, line 3: unknown scopes ['chta'] for 'bob'" in result.stderr
    assert BOB not in result.stderr
    assert ALICE not in result.stderr
