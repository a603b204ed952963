"""A command agent: the model proposes kubectl commands, a human approves each exact argv, then it runs.

    python examples/command_agent.py          # asks you to approve each command on the terminal
    python examples/command_agent.py --yes    # approves for you (used by the tests)

The agent is served over HTTP on a loopback port and driven by a HelpDesk client (the standard
library's urllib): commands arrive in ``data.cmds``, each decision goes back in ``cmds`` with the
command's id and argv, the output comes back in ``data.executed_cmds``. The commands run against
``examples/bin/kubectl``, a fake kubectl keeping a two-pod cluster in a temporary file, through
``LocalCommandRunner``: no shell, only the programs on its allow-list (here ``kubectl``, which
declares its dry run), in its working directory, within its timeout and output cap. Before you are
asked, a command that changes something is run as its server-side dry run (``--dry-run=server``),
and you are shown what it says: the pod the deletion would remove. The model is scripted, so the
walkthrough always takes the same path, including a program off the allow-list (refused before
anyone is asked).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dcaf_like import Agent, ModelRequest, ModelResponse, ToolResult, create_app
from dcaf_like.commands import LocalCommandRunner, Program, command_tool, kubectl_dry_run
from dcaf_like.testing import FakeRuntime, tool_call, tool_calls

HERE = Path(__file__).resolve().parent


def build_agent(workdir: Path, runtime: Any = None) -> Agent:
    """The agent: one tool, ``run_command``, whose runner runs only ``kubectl`` (the fake one), each
    command that changes something previewed by its server-side dry run."""
    runner = LocalCommandRunner(
        allow=[Program("kubectl", dry_run=kubectl_dry_run)],
        path=str(HERE / "bin"),  # where `kubectl` is looked up: the fake one shipped with the example
        cwd=workdir,
        timeout=10,
        max_output=16 * 1024,
        env={**os.environ, "FAKE_KUBECTL_STATE": str(workdir / "cluster.txt")},
    )
    return Agent(
        tools=[command_tool(runner)],
        system="You operate a Kubernetes cluster with kubectl. Look before you change anything.",
        runtime=runtime or scripted_model(),
        name="kubectl-agent",
    )


def scripted_model() -> FakeRuntime:
    """A model that looks, tries a shell (refused: not on the allow-list), then deletes the pod; it
    stops as soon as the operator rejects a command."""

    def unless_rejected(step: ModelResponse) -> Callable[[ModelRequest], ModelResponse]:
        def answer(request: ModelRequest) -> ModelResponse:
            last = request.messages[-1]
            if isinstance(last, ToolResult) and last.is_error and "Rejected" in last.content:
                return ModelResponse(text=f"I left the cluster alone ({last.content}).")
            return step

        return answer

    return FakeRuntime(
        [
            tool_call("run_command", argv=["kubectl", "get", "pods", "-n", "default"]),
            unless_rejected(
                tool_calls(tool_call("run_command", argv=["sh", "-c", "kubectl delete pod web-2"])).response()
            ),
            tool_call("run_command", argv=["kubectl", "delete", "pod", "web-2", "-n", "default"]),
            unless_rejected(
                ModelResponse(text="web-2 was crash-looping; I deleted it. A fresh one will start.")
            ),
        ]
    )


def serve_in_background(agent: Agent) -> str:
    """The agent's HTTP server on a free loopback port, in a thread; its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(create_app(agent), host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}"


def post(url: str, message: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/api/chat",
        data=json.dumps({"messages": [message]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def converse(url: str, question: str, approve: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """A HelpDesk client: ask, then decide each command the agent proposes until it answers."""
    print(f"you> {question}")
    message = post(url, {"role": "user", "content": question})
    while True:
        data = message["data"]
        for ran in data["executed_cmds"]:
            print(f"  {ran['status']}: {ran['command']}")
            print("\n".join(f"    {line}" for line in ran["output"].splitlines()))
        if not data["cmds"]:
            print(f"agent> {message['content']}")
            return message
        decisions = []
        for command in data["cmds"]:
            print(f"the agent wants to run: $ {command['command']}")
            if command.get("preview") is not None:
                print("  its dry run says:")
                print("\n".join(f"    {line}" for line in command["preview"].splitlines()))
            elif command.get("preview_error"):
                print(f"  (no preview: {command['preview_error']})")
            if approve(command):
                # Bound to the dry run shown: had it changed, the server would refuse this approval.
                shown = {"preview_digest": command["preview_digest"]} if "preview_digest" in command else {}
                decisions.append({"id": command["id"], "argv": command["argv"], "execute": True, **shown})
            else:
                reason = "the operator said no"
                decisions.append({"id": command["id"], "execute": False, "rejection_reason": reason})
        reply_data = {"conversation_id": data["conversation_id"], "cmds": decisions}
        message = post(url, {"role": "user", "content": "", "data": reply_data})


def ask_on_terminal(command: dict[str, Any]) -> bool:
    try:
        answer = input("  approve? [y/N] ")
    except EOFError:
        print("\n  no answer (end of input): rejected")
        return False
    return answer.strip().lower() in ("y", "yes")


def main() -> None:
    approve: Callable[[dict[str, Any]], bool] = (lambda _: True) if "--yes" in sys.argv else ask_on_terminal
    with tempfile.TemporaryDirectory() as workdir:
        (Path(workdir) / "cluster.txt").write_text("web-1 Running\nweb-2 CrashLoopBackOff\n")
        url = serve_in_background(build_agent(Path(workdir)))
        converse(url, "web-2 keeps crashing in default; fix it", approve)
        pods = (Path(workdir) / "cluster.txt").read_text().split()
        print(f"pods now: {pods[::2]}")


if __name__ == "__main__":
    main()
