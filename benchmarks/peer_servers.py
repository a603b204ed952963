"""Our HTTP server against the peers' own: Agno's AgentOS app and Google ADK's `api_server` app.

Every server runs alone in its own process, one uvicorn worker, the agent on an instant scripted model
(one tool call, its result, then the answer: the same turn as benchmarks/peers.py), each turn in a new
session, keeping its sessions in memory. The load comes from this process over keep-alive
connections, as in benchmarks/http_load.py, so the server and the load each have a core.

    .venv/bin/python benchmarks/peer_servers.py            # prints the table
    .venv/bin/python benchmarks/peer_servers.py --quick    # a fraction of a second per server

What a request is, per server (all answer with JSON):
- dcaf_like: `POST /api/chat`, a HelpDesk message without a conversation id (a new conversation).
- Agno: `POST /agents/ops/runs`, form fields `message` and `stream=false` (no `session_id`: a new one).
- ADK: `POST /run`, a `RunAgentRequest` naming a session id never used before, with the app built by
  `get_fast_api_app(auto_create_session=True)` (the session is created by that request).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("AGNO_TELEMETRY", "false")

QUESTION = "which pods run?"
ANSWER = "web-1 is running."

ADK_AGENT = """
from peers import instant_adk_model, list_pods
from google.adk.agents import LlmAgent

root_agent = LlmAgent(name="ops", model=instant_adk_model(), tools=[list_pods])
"""


# -- the servers (run with --serve KIND) ---------------------------------------------------------------


def dcaf_app() -> Any:
    import http_load

    from dcaf_like import create_app

    return create_app(http_load.instant_agent(None))


def agno_app() -> Any:
    from agno.agent import Agent as AgnoAgent
    from agno.os import AgentOS
    from peers import InstantAgnoModel, list_pods

    agent = AgnoAgent(
        id="ops", name="ops", model=InstantAgnoModel(id="instant"), tools=[list_pods], telemetry=False
    )
    return AgentOS(agents=[agent], telemetry=False).get_app()


def adk_app(directory: str, session_service_uri: str = "memory://", agent: str = ADK_AGENT) -> Any:
    """ADK's `api_server` app of one agent (the source of its ``agent.py``), written into `directory`."""
    from google.adk.cli.fast_api import get_fast_api_app

    package = Path(directory) / "bench_app"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("from . import agent\n")
    (package / "agent.py").write_text(agent)
    return get_fast_api_app(
        agents_dir=directory,
        session_service_uri=session_service_uri,
        artifact_service_uri="memory://",
        memory_service_uri="memory://",
        use_local_storage=False,
        web=False,
        auto_create_session=True,
    )


def serve_app(build: Callable[[str], Any], port: int, **options: Any) -> None:
    """Serve the app `build` makes (given a temporary folder) under uvicorn on `port`, until stopped:
    every server of the benchmarks, ours and the peers', the same way."""
    import logging
    import warnings

    import uvicorn

    from dcaf_like.server.serving import settle_heap

    logging.getLogger("google_adk").setLevel(logging.ERROR)  # "missing token usage" per instant turn
    warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")  # ADK's, once per app
    with tempfile.TemporaryDirectory() as directory:
        app = build(directory)
        settle_heap()  # as serve() does; the peers get it too
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **options)


def serve(kind: str, port: int) -> None:
    builders: dict[str, Callable[[str], Any]] = {
        "dcaf_like": lambda _: dcaf_app(),
        "agno": lambda _: agno_app(),
        "adk": adk_app,
    }
    serve_app(builders[kind], port)


@contextlib.contextmanager
def server_process(kind: str, arguments: Callable[[int], list[str]]) -> Iterator[tuple[int, int]]:
    """The port and process id of a server this folder's `arguments(port)` start (a script and its
    options), once it accepts connections; stopped afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, *arguments(port)], env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the {kind} server exited with {process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} server did not start in 60 s")
            time.sleep(0.05)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def running(kind: str) -> Iterator[int]:
    with server_process(kind, lambda port: [__file__, "--serve", kind, "--port", str(port)]) as (port, _):
        yield port


# -- the requests ---------------------------------------------------------------------------------------


def _request(port: int, path: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def requests_for(kind: str, port: int) -> Callable[[], bytes]:
    """A function giving the next request's bytes (a new session each time where the id is ours)."""
    if kind == "dcaf_like":
        turn = _request(port, "/api/chat", "application/json", json.dumps({"messages": [
            {"role": "user", "content": QUESTION}]}).encode())  # fmt: skip
        return lambda: turn
    if kind == "agno":
        form = f"message={QUESTION.replace(' ', '+').replace('?', '%3F')}&stream=false".encode()
        turn = _request(port, "/agents/ops/runs", "application/x-www-form-urlencoded", form)
        return lambda: turn

    def adk() -> bytes:
        body = {
            "app_name": "bench_app",
            "user_id": "u",
            "session_id": uuid.uuid4().hex,
            "new_message": {"role": "user", "parts": [{"text": QUESTION}]},
        }
        return _request(port, "/run", "application/json", json.dumps(body).encode())

    return adk


def answer_text(kind: str, body: Any) -> str:
    """The agent's final text in a server's answer, to check each server ran the whole turn."""
    if kind == "dcaf_like":
        return str(body["content"])
    if kind == "agno":
        return str(body["content"])
    texts = [
        p["text"] for event in body for p in (event.get("content") or {}).get("parts", []) if p.get("text")
    ]
    return texts[-1] if texts else ""


async def one_answer(kind: str, port: int) -> str:
    import http_load

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return answer_text(
            kind, json.loads(await http_load.exchange(reader, writer, requests_for(kind, port)()))
        )
    finally:
        writer.close()
        await writer.wait_closed()


async def load(kind: str, port: int, seconds: float, warmup: float) -> dict[str, float]:
    import http_load

    return await http_load.load_with(port, requests_for(kind, port), seconds, warmup)


# -- the report -----------------------------------------------------------------------------------------

ROWS = {
    "dcaf_like": "dcaf_like `serve()`: `POST /api/chat`",
    "agno": "Agno AgentOS: `POST /agents/{id}/runs`",
    "adk": "Google ADK `api_server`: `POST /run`",
}


def report(quick: bool) -> dict[str, Any]:
    import http_load

    seconds, warmup = (0.5, 0.2) if quick else (5.0, 1.0)
    results: dict[str, Any] = {"settings": {"connections": http_load.CONCURRENCY, "seconds": seconds}}
    for kind in ROWS:
        try:
            with running(kind) as port:
                text = asyncio.run(one_answer(kind, port))
                if text != ANSWER:
                    raise RuntimeError(f"answered {text!r}, not {ANSWER!r}")
                results[kind] = asyncio.run(load(kind, port, seconds, warmup))
        except (ImportError, RuntimeError) as exc:  # a peer not installed, or broken by a new release
            results[kind] = f"not measured: {exc}"
    return results


def markdown(results: dict[str, Any]) -> str:
    ours = results["dcaf_like"]
    rows = [
        f"| Servers, one uvicorn worker each, instant model, tool call + answer, new session per turn, "
        f"{results['settings']['connections']} keep-alive connections | requests/s | p50 ms | p99 ms "
        "| dcaf_like's requests/s ÷ this |",
        "|---|---|---|---|---|",
    ]
    for kind, name in ROWS.items():
        figures = results[kind]
        if isinstance(figures, str):
            rows.append(f"| {name} | {figures} | | | |")
            continue
        ratio = f"{ours['rps'] / figures['rps']:.1f}x" if isinstance(ours, dict) else ""
        rows.append(
            f"| {name} | {figures['rps']:.0f} | {figures['p50']:.2f} | {figures['p99']:.2f} | {ratio} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    print(markdown(report(args.quick)))


if __name__ == "__main__":
    main()
