"""What a client that reads a conversation over HTTP sees of a background tool (docs/runs.md, "Tools
on a job engine"): the latest progress report its job saved on the call while it runs, read from the
store by an API server that neither ran the turn nor the job; then, without another message, the turn
the job's end started."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _helpdesk import approve, user
from _job_threads import api_and_worker
from _server import serving

from dcaf_like import Agent, ToolContext, create_app, tool
from dcaf_like.stores.sqlite import SqliteConversationRepository
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


def wait_for(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + 60
    while not (seen := condition()):  # a bounded wait for what the store shows, not a measure of time
        assert time.monotonic() < deadline, f"{what}: not seen in time"
        time.sleep(0.02)
    return seen


def test_a_reader_on_another_api_server_sees_a_jobs_progress_then_the_turn_its_end_started(
    tmp_path: Path,
) -> None:
    """docs/runs.md, "Tools on a job engine": progress reports and the run going on by itself."""
    reports: queue.Queue[tuple[str, float | None] | None] = queue.Queue()

    @tool(background=True)
    def snapshot_volume(volume_id: str, context: ToolContext) -> str:
        """Snapshot a volume."""
        while (report := reports.get(timeout=60)) is not None:  # each report when the test says
            context.progress(report[0], fraction=report[1])
        return f"{volume_id} saved as snap-1"

    store = tmp_path / "conversations.sqlite3"
    proposing = FakeRuntime([tool_calls(tool_call("snapshot_volume", volume_id="vol-7"))])
    api, engine = api_and_worker([snapshot_volume], proposing, FakeRuntime([reply("vol-7 is saved.")]), store)
    reader = Agent(runtime=FakeRuntime([]), repository=SqliteConversationRepository(store, namespace="agent"))
    try:
        with serving(create_app(api)) as client, serving(create_app(reader)) as other:
            asked = client.post("/api/chat", json={"messages": [user("snapshot vol-7")]}).json()["data"]
            [pending] = asked["tool_calls"]
            conversation_id = asked["conversation_id"]
            approval = {"messages": [user(conversation_id=conversation_id, tool_calls=[approve(pending)])]}
            decided = client.post("/api/chat", json=approval).json()
            assert decided["meta"]["stop_reason"] == "running_in_background"

            def call() -> dict[str, Any]:
                return read(other, conversation_id)["tool_calls"][0]

            reports.put(("copying blocks", 0.4))
            running = wait_for(lambda: (c := call())["progress"] and c, "the first report")
            assert running["status"] == "approved"
            assert running["progress"] == {"message": "copying blocks", "fraction": 0.4}
            reports.put(("waiting for the provider", None))
            wait_for(
                lambda: call()["progress"] == {"message": "waiting for the provider", "fraction": None},
                "the latest",
            )

            reports.put(None)
            answered = wait_for(
                lambda: (
                    (c := read(other, conversation_id))["messages"][-1]["content"] == "vol-7 is saved." and c
                ),
                "the turn the job's end started",
            )
            [done] = answered["tool_calls"]
            assert (done["status"], done["output"], done["progress"]) == (
                "executed",
                "vol-7 saved as snap-1",
                None,
            )
    finally:
        reports.put(None)
        engine.join()


def read(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    response = client.get(f"/api/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body
