"""What one inbox costs (issue 38 item 5; docs/approvals.md, "One inbox"): the median time of a page of
``GET /api/approvals``'s use case (:class:`~dcaf_like.application.inbox.ListWaitingApprovals`, 50 calls,
an approver in ``sre``) on a store holding N conversations of which W wait for approval, against what
finding them without the index costs (reading every conversation, as the page's list does). The index
is read whatever N is: its time should follow W, not N.

    python benchmarks/inbox.py                  # SQLite: 1,000 and 100,000 conversations, 1,000 waiting
    python benchmarks/inbox.py --quick          # 200 and 2,000 conversations, 100 waiting
    python benchmarks/inbox.py --store "postgresql://postgres@127.0.0.1:5432/postgres?table=bench_inbox"
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from dcaf_like.application.inbox import ListWaitingApprovals
from dcaf_like.domain import Conversation, Identity, ToolInput, approvers
from dcaf_like.stores import open_store

APPROVER = Identity("alice", frozenset({"approve"}))
GROUPS = {"sre": frozenset({"alice", "bob"})}


def conversation(n: int, *, waiting: bool, owner: str | None = None) -> Conversation:
    """Conversation n, at time n: a call waiting for two SREs, or a question and its answer."""
    c = Conversation.start(f"conv-{n:07d}", at=float(n), owner=owner)
    c.add_user_message(f"check pod web-{n}", at=float(n))
    if waiting:
        c.add_assistant_message(f"deleting web-{n}", at=float(n))
        call = c.request_tool_call(
            "delete_pod",
            ToolInput.of({"name": f"web-{n}", "namespace": "prod"}),
            requires_approval=True,
            approval_reason="prod needs two SREs",
            requested_by="carol",
            at=float(n),
        )
        call.approvers = approvers(2, "sre")
    else:
        c.add_assistant_message(f"web-{n} is running.", at=float(n))
    return c


def fill(store: Any, conversations: int, waiting: int, *, start: int = 0) -> None:
    """Save conversations `start` to `conversations` - 1: the first `waiting` of all wait."""
    for n in range(start, conversations):
        store.save(conversation(n, waiting=n < waiting), 0)


def timed(run: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def measure(store: Any, repeats: int) -> tuple[float, float, int]:
    """(ms for a page of the inbox, ms for finding the waiting calls by reading every conversation,
    how many the inbox found in all)."""
    inbox = ListWaitingApprovals(store, GROUPS, time.time)

    def page() -> Any:
        return inbox.blocking(identity=APPROVER, limit=50)

    def scan() -> int:
        ids = store.list_ids(sys.maxsize)
        found = 0
        for first in range(0, len(ids), 500):
            for c in store.get_many(ids[first : first + 500]):
                found += 0 if c is None else len(c.pending_tool_calls)
        return found

    found, cursor = 0, None
    while True:
        result = inbox.blocking(identity=APPROVER, cursor=cursor, limit=200)
        found += len(result.items)
        if (cursor := result.next_cursor) is None:
            break
    return timed(page, repeats), timed(scan, max(1, repeats // 5)), found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", help="a store URL (default: a SQLite file in a temporary folder)")
    parser.add_argument("--quick", action="store_true", help="200 and 2,000 conversations, 100 waiting")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    sizes, waiting = ((200, 2000), 100) if args.quick else ((1000, 100_000), 1000)
    with tempfile.TemporaryDirectory() as folder:
        url = args.store or f"sqlite:///{Path(folder) / 'inbox.sqlite3'}"
        store = open_store(url, namespace=f"bench-inbox-{uuid.uuid4().hex[:8]}")
        print(f"Store: {url.split('?')[0].split('://')[0]}; {waiting} conversations wait for approval.\n")
        print("| conversations | a page of the inbox (ms) | reading every conversation (ms) | found |")
        print("|---|---|---|---|")
        held = 0
        try:
            for size in sizes:
                fill(store, size, waiting, start=held)
                held = size
                page_ms, scan_ms, found = measure(store, 3 if args.quick else args.repeats)
                if found != waiting:
                    raise SystemExit(f"the inbox found {found} waiting calls, not {waiting}")
                print(f"| {size:,} | {page_ms:.2f} | {scan_ms:.1f} | {found} |", flush=True)
        finally:
            for n in range(held if args.store else 0):  # a shared store's; a temporary file goes whole
                store.delete(f"conv-{n:07d}")
            close = getattr(store, "close", None)
            if close is not None:
                close()


if __name__ == "__main__":
    main()
