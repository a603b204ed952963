"""`make demo` (examples/ops_demo.py) as a user runs it: a real process, a real runtime, the approval gate.

Here the runtime is OpenAIRuntime against the local OpenAI-compatible server (`DCAF_RUNTIME=openai:...`);
the same demo on the local model is tests/e2e/test_local_model_http.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from dcaf_like.testing import OpenAICompatibleServer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from ops_demo import ask  # noqa: E402

pytest.importorskip("openai", reason="the openai extra is not installed: pip install -e '.[openai]'")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_demo_serves_the_agent_and_its_client_approves_a_deletion(tmp_path, capsys):
    model = OpenAICompatibleServer().start()
    model.call([("delete_pod", {"name": "web-1", "namespace": "prod"})])
    model.reply("I deleted web-1 in prod.")
    port = free_port()
    env = {
        **os.environ,
        "DCAF_RUNTIME": "openai:demo-model",
        "OPENAI_BASE_URL": model.base_url,
        "PORT": str(port),
        "DCAF_STORE": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
    }
    process = subprocess.Popen(
        [sys.executable, "examples/ops_demo.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)

        reply = ask(
            "delete the pod web-1 in namespace prod", url=f"http://127.0.0.1:{port}", answer=lambda _: "y"
        )
    finally:
        process.terminate()
        process.wait(timeout=15)
        reader.join(timeout=15)
        process.stdout.close()  # type: ignore[union-attr]
        model.stop()

    printed = capsys.readouterr().out
    assert "The agent wants to run delete_pod(" in printed
    assert "risk: reversible" in printed
    assert '"owner": "ReplicaSet web-7d9f8 (of Deployment web)"' in printed  # the preview, before the yes
    assert 'ran delete_pod({"name": "web-1", "namespace": "prod"}) -> pod "web-1" deleted' in printed
    assert reply["content"] == "I deleted web-1 in prod."
    banner = "".join(output)
    urls = [line.split()[-1] for line in banner.splitlines() if "http://" in line]
    assert urls[0] == f"http://127.0.0.1:{port}/", "the chat page comes first"
    assert f"http://127.0.0.1:{port}/docs" in urls
    assert "curl -s" in banner
    assert "conversations are kept in sqlite:///" in banner
