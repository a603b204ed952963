"""`dcaf-like prune`: forgets, in a store named by URL as `serve --store` names it, the conversations
kept past their retention; `--dry-run` only counts them (issue 26)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dcaf_like import ConversationRepository, open_store
from dcaf_like.domain import Conversation, ToolInput

ROOT = Path(__file__).resolve().parents[2]
COMMAND = str(Path(sys.executable).parent / "dcaf-like")
DAY = 86_400.0


def prune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, "prune", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
    )  # fmt: skip


def save_at(store: ConversationRepository, days_ago: float, *, waits_days: float | None = None) -> str:
    """A conversation last saved `days_ago`; with `waits_days`, a call waits that long for approval."""
    at = time.time() - days_ago * DAY
    store.clock = lambda: at  # type: ignore[attr-defined]
    c = Conversation.start(at=at)
    c.add_user_message("delete web-1", at=at)
    if waits_days is not None:
        c.add_assistant_message("", at=at)
        c.request_tool_call(
            "delete_pod", ToolInput.of({"name": "web-1"}), requires_approval=True,
            approval_ttl=waits_days * DAY, at=at,
        )  # fmt: skip
    store.save(c, 0)
    return c.id


def three_conversations(store: ConversationRepository) -> dict[str, str]:
    return {
        "old": save_at(store, 40),
        "waiting": save_at(store, 40, waits_days=60),
        "recent": save_at(store, 2),
    }


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'c.sqlite3'}"
    return f"{request.getfixturevalue('redis_url')}?prefix={request.getfixturevalue('redis_prefix')}"


def opened(url: str) -> ConversationRepository:
    return open_store(url, namespace="ops")


def test_prune_counts_with_dry_run_then_forgets_past_the_default_30_days(store_url: str) -> None:
    store = opened(store_url)
    ids = three_conversations(store)

    counted = prune("--store", store_url, "--namespace", "ops", "--dry-run")
    after_dry_run = sorted(store.list_ids())
    pruned = prune("--store", store_url, "--namespace", "ops")

    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.startswith("would forget 1 conversation of ")
    assert "last saved over 30 days ago" in counted.stdout
    assert after_dry_run == sorted(ids.values())
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith("forgot 1 conversation of ")
    assert store.get(ids["old"]) is None
    assert store.get(ids["waiting"]) is not None  # its approval window is still open
    assert sorted(store.list_ids()) == sorted([ids["waiting"], ids["recent"]])
    store.close()  # type: ignore[attr-defined]


def test_prune_forgets_the_standing_grants_that_ended_past_the_retention(store_url: str) -> None:
    """docs/approvals.md, "Grants": an ended grant approves nothing; prune forgets it with the
    conversations (the audit trail keeps its making and its revocation)."""
    from dcaf_like.domain.grant import Grant

    store = opened(store_url)
    now = time.time()
    ended = Grant.new(
        tool="restart_pod", requester="alice", granted_by="bob", at=now - 40 * DAY, duration=3600
    )
    in_force = Grant.new(tool="restart_pod", requester="alice", granted_by="bob", at=now, duration=3600)
    for grant in (ended, in_force):
        store.add_grant(grant)  # type: ignore[attr-defined]

    counted = prune("--store", store_url, "--namespace", "ops", "--dry-run")
    pruned = prune("--store", store_url, "--namespace", "ops")

    assert counted.returncode == 0, counted.stderr
    assert "would forget 1 standing grant that ended over 30 days ago" in counted.stdout
    assert pruned.returncode == 0, pruned.stderr
    assert "forgot 1 standing grant that ended over 30 days ago" in pruned.stdout
    assert [g.id for g in store.list_grants()] == [in_force.id]  # type: ignore[attr-defined]
    store.close()  # type: ignore[attr-defined]


def test_a_shorter_retention_or_the_urls_ttl_forgets_more(store_url: str) -> None:
    store = opened(store_url)
    ids = three_conversations(store)
    separator = "&" if "?" in store_url else "?"

    by_ttl = prune("--store", f"{store_url}{separator}ttl={DAY:g}&namespace=ops", "--dry-run")
    by_days = prune("--store", store_url, "--namespace", "ops", "--retention-days", "1")

    assert by_ttl.stdout.startswith("would forget 2 conversations"), by_ttl.stdout + by_ttl.stderr
    assert "last saved over 1 day ago" in by_ttl.stdout
    assert by_days.stdout.startswith("forgot 2 conversations")
    assert store.list_ids() == [ids["waiting"]]
    store.close()  # type: ignore[attr-defined]


def test_prune_refuses_a_store_it_cannot_open_and_a_retention_that_keeps_everything() -> None:
    unknown = prune("--store", "mysql://user:hunter2@db/convs")
    zero = prune("--store", "sqlite:///x.db", "--retention-days", "0")
    negative = prune("--store", "sqlite:///x.db", "--retention-days", "-3")

    assert unknown.returncode == 2
    assert "no store for" in unknown.stderr
    assert "hunter2" not in unknown.stderr
    assert zero.returncode == 2
    assert "keeps every conversation" in zero.stderr
    assert negative.returncode == 2
    assert "0 or more" in negative.stderr
