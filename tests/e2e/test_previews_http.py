"""docs/approvals.md, "What the approver sees": previews bound to approvals, over a real server process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
from _helpdesk import approve, user
from _server import dcaf_like_serve

PREVIEWING = "tests/e2e/previewing_agent.py:make_agent"


def chat(url: str, message: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/api/chat", json={"messages": [message]}, timeout=10)


def test_approving_after_the_preview_changed_is_refused_with_409_and_the_current_preview(tmp_path: Path):
    cluster = tmp_path / "cluster"
    cluster.write_text("api 2\n")
    env = {**{k: v for k, v in os.environ.items() if k != "DCAF_STORE"}, "DCAF_TEST_CLUSTER": str(cluster)}
    with dcaf_like_serve(PREVIEWING, "--factory", "--port", "0", env=env) as served:
        proposed = chat(served.url, user("scale api to 5"))
        assert proposed.status_code == 200, proposed.text
        conversation_id = proposed.json()["data"]["conversation_id"]
        [shown] = proposed.json()["data"]["tool_calls"]
        assert (shown["preview_kind"], shown["risk"]) == ("diff", "reversible")
        assert "-replicas: 2\n+replicas: 5" in shown["preview"]

        cluster.write_text("api 3\n")  # someone scaled it since the approver looked
        stale = chat(served.url, user(conversation_id=conversation_id, tool_calls=[approve(shown)]))
        assert stale.status_code == 200, stale.text
        [again] = stale.json()["data"]["tool_calls"]  # not run: it waits again, with the new preview
        assert again["id"] == shown["id"]
        assert "-replicas: 3\n+replicas: 5" in again["preview"]

        replayed = chat(served.url, user(conversation_id=conversation_id, tool_calls=[approve(shown)]))
        assert replayed.status_code == 409, replayed.text
        error = replayed.json()["error"]
        assert (error["code"], error["call_id"]) == ("preview_changed", shown["id"])
        assert error["preview"]["preview"] == again["preview"]
        assert error["preview"]["preview_digest"] == again["preview_digest"]

        taken = chat(served.url, user(conversation_id=conversation_id, tool_calls=[approve(again)]))
        assert taken.status_code == 200, taken.text
        assert taken.json()["content"] == "Done: api scaled to 5"

        # docs/approvals.md, "What the approver sees": the call that went stale is in the audit trail,
        # `stale` by `system`, between the approval it voided and the next; so is the refused replay.
        trail = httpx.get(f"{served.url}/api/audit", params={"conversation_id": conversation_id}, timeout=10)
        assert trail.status_code == 200, trail.text
        records = [r for r in reversed(trail.json()["records"]) if r["call_id"] == shown["id"]]
        assert [r["outcome"] for r in records] == ["approved", "stale", "refused", "approved"], records
        assert records[1]["decided_by"] == "system"
        assert records[1]["reason"].startswith("not run: ")
        assert {r["entrance"] for r in records} == {"http"}
    assert cluster.read_text() == "api 3\napi 5\n"  # ran once, after the approval of what it did
