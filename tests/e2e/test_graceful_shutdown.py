"""SIGTERM to a real ``dcaf-like serve`` process during a slow tool: the server drains, then stops.

While it drains, a new turn gets 503 with ``Retry-After`` and ``/ready`` says 503, so a load balancer
sends the traffic elsewhere; the turn under way finishes and its answer reaches its client; then the
process exits on its own. A turn that outlives the grace period does not keep the process alive
(docs/deployment.md, "Restarts and deploys").
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
from _server import dcaf_like_serve, until

from dcaf_like import SqliteConversationRepository
from dcaf_like.domain import ToolCallStatus

AGENT = """
import asyncio
from pathlib import Path

from dcaf_like import Agent, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call

HERE = Path(__file__).parent


@tool(requires_approval=False)
async def drain_node(name: str) -> str:
    \"\"\"Move the workloads off a node (slow).\"\"\"
    (HERE / "started").write_text(name)
    while not (HERE / "release").exists():
        await asyncio.sleep(0.02)
    return f"{name} drained"


agent = Agent(
    tools=[drain_node],
    runtime=FakeRuntime([tool_call("drain_node", name="node-1"), reply("node-1 is drained.")] * 2),
)
"""


def served(tmp_path: Path, grace: str):
    (tmp_path / "slow_agent.py").write_text(AGENT)
    return dcaf_like_serve(
        f"{tmp_path}/slow_agent.py:agent", "--port", "0", "--no-ui", "--shutdown-grace", grace,
        "--store", f"sqlite:///{tmp_path}/conversations.db",
    )  # fmt: skip


def start_turn(url: str, answers: list[httpx.Response]) -> threading.Thread:
    body = {"messages": [{"role": "user", "content": "drain node-1"}]}
    thread = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{url}/api/chat", json=body, timeout=60)), daemon=True
    )
    thread.start()
    return thread


# uvicorn, having shut down gracefully on a signal, raises it again with the default handler back:
# the process ends "killed by SIGTERM" as an unhandled SIGTERM would, after everything was settled.
STOPPED = -signal.SIGTERM


def wait_for(predicate, what: str) -> None:
    until(predicate, what)


def draining(url: str) -> bool:
    return httpx.get(f"{url}/ready", timeout=5).status_code == 503


def test_sigterm_refuses_new_turns_lets_the_running_one_finish_then_exits(tmp_path):
    with served(tmp_path, "60") as server:
        answers: list[httpx.Response] = []
        running = start_turn(server.url, answers)
        wait_for((tmp_path / "started").exists, "the slow tool started")

        server.process.send_signal(signal.SIGTERM)
        wait_for(lambda: draining(server.url), "/ready says 503")

        refused = httpx.post(
            f"{server.url}/api/chat", json={"messages": [{"role": "user", "content": "hello"}]}, timeout=10
        )
        assert refused.status_code == 503
        assert refused.headers["Retry-After"].isdigit()
        assert refused.json()["error"]["code"] == "shutting_down"
        ready = httpx.get(f"{server.url}/ready", timeout=5).json()
        assert ready["checks"]["accepting_turns"]["ok"] is False
        assert server.process.poll() is None  # still serving: the turn under way is not done

        (tmp_path / "release").write_text("")
        running.join(30)
        [answer] = answers
        assert answer.status_code == 200
        assert answer.json()["content"] == "node-1 is drained."
        assert server.process.wait(timeout=30) == STOPPED  # drained: it stops on its own
    assert "SIGTERM: draining: 1 turn(s) under way" in server.log


def test_a_turn_that_outlives_the_grace_period_does_not_keep_the_server_up(tmp_path):
    with served(tmp_path, "0.5") as server:
        answers: list[httpx.Response] = []
        start_turn(server.url, answers)
        wait_for((tmp_path / "started").exists, "the slow tool started")

        server.process.send_signal(signal.SIGTERM)

        assert server.process.wait(timeout=30) == STOPPED  # the tool never finished; it stopped anyway

    # The call it stopped is settled at once, not left approved until its lease runs out.
    store = SqliteConversationRepository(tmp_path / "conversations.db", namespace="agent")  # its name
    [conversation_id] = store.list_ids()
    conversation = store.get(conversation_id)
    assert conversation is not None
    [call] = conversation.tool_calls.values()
    assert call.status is ToolCallStatus.INTERRUPTED
    assert "the worker running this call stopped it" in (call.error or "")


def test_with_nothing_running_sigterm_stops_at_once(tmp_path):
    with served(tmp_path, "60") as server:
        assert httpx.get(f"{server.url}/ready", timeout=5).status_code == 200

        server.process.send_signal(signal.SIGTERM)

        assert server.process.wait(timeout=30) == STOPPED
    assert "SIGTERM: draining: 0 turn(s) under way" in server.log


def test_a_second_sigterm_stops_at_once_and_settles_the_running_call(tmp_path):
    """docs/deployment.md, "Restarts and deploys": "A second `SIGTERM` stops at once" (the grace
    period here, 60 s, is longer than the bound of the wait)."""
    with served(tmp_path, "60") as server:
        answers: list[httpx.Response] = []
        running = start_turn(server.url, answers)
        wait_for((tmp_path / "started").exists, "the slow tool started")
        server.process.send_signal(signal.SIGTERM)
        wait_for(lambda: draining(server.url), "/ready says 503")

        server.process.send_signal(signal.SIGTERM)

        assert server.process.wait(timeout=30) == STOPPED
        running.join(30)

    store = SqliteConversationRepository(tmp_path / "conversations.db", namespace="agent")
    [conversation_id] = store.list_ids()
    conversation = store.get(conversation_id)
    assert conversation is not None
    [call] = conversation.tool_calls.values()
    assert call.status is ToolCallStatus.INTERRUPTED
    [answer] = answers
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "shutting_down"
