"""Whether the worker holding a lease is known to be gone (docs/runs.md, "Claims and leases"): only
an exit that is certain settles a call before its lease runs out."""

from __future__ import annotations

import os
import subprocess
import sys

from dcaf_like.application.workers import new_worker_id, worker_gone
from dcaf_like.domain import Conversation, ToolInput

PRINT_ID_AND_WAIT = (
    "from dcaf_like.application.workers import new_worker_id; print(new_worker_id(), flush=True); input()"
)


def test_a_worker_whose_process_exited_is_gone_and_one_still_running_is_not():
    child = subprocess.Popen(
        [sys.executable, "-c", PRINT_ID_AND_WAIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    worker = child.stdout.readline().strip()
    running = worker_gone(worker)
    child.communicate("\n", timeout=30)

    assert running is False
    assert worker_gone(worker) is True


def test_this_worker_is_not_gone():
    assert worker_gone(new_worker_id()) is False


def test_a_pid_now_used_by_another_process_means_its_worker_is_gone():
    host, pid, random, where = new_worker_id().split(":")
    place, _, started = where.partition(".")
    earlier = f"{host}:{pid}:{random}:{place}.{int(started) - 1}"  # this PID, held before by another

    assert worker_gone(earlier) is True


def test_a_worker_of_another_host_namespace_or_format_is_never_said_gone():
    host, _, random, where = new_worker_id().split(":")
    place, _, started = where.partition(".")
    dead_pid = _a_pid_no_process_has()

    assert worker_gone(f"elsewhere:{dead_pid}:{random}:{place}.{started}") is False
    assert worker_gone(f"{host}:{dead_pid}:{random}:000000000000.{started}") is False
    assert worker_gone(f"{host}:{dead_pid}:{random}") is False  # an id written before ids said where
    assert worker_gone("my-own-worker-name") is False


def test_a_call_leased_by_a_gone_worker_is_settled_before_its_lease_runs_out():
    conversation = Conversation.start("conv_w", at=0.0)
    conversation.add_user_message("restart web", at=0.0)
    conversation.add_assistant_message("", at=0.0)
    call = conversation.request_tool_call(
        "restart", ToolInput.of({"name": "web"}), requires_approval=True, at=0.0
    )
    conversation.approve_tool_call(call.id.value, by="u", at=0.0)
    conversation.lease_tool_call(call.id.value, "gone-worker", until=600.0)

    assert conversation.settle_abandoned_calls(at=2.0, gone=lambda worker: False) == []
    [settled] = conversation.settle_abandoned_calls(at=2.0, gone=lambda worker: worker == "gone-worker")
    assert settled.status.value == "interrupted"


def _a_pid_no_process_has() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid
