"""Stores of any size (issue 40, item 2; docs/stores.md, "Stores of any size"): what the operations a
user waits on cost when a store holds 100,000 conversations, against the same store holding 100.

    .venv/bin/python benchmarks/store_scale.py            # every store reachable: 100, 1,100, 100,000
    .venv/bin/python benchmarks/store_scale.py --quick    # 100, 300 and 1,000: checks that it runs
    .venv/bin/python benchmarks/store_scale.py --stores sqlite,postgres

One store is filled in steps and measured at each size (the median of `--repeats` runs of each
operation, through the use cases the HTTP routes call, without HTTP):

- a turn: ``Agent.run`` continuing a stored conversation (its read, an answer from an instant model,
  the compare-and-set save), a different conversation each run;
- the conversation list's first page and a page from the middle (50 each: the cursor of
  ``GET /api/conversations``, built for the conversation saved halfway);
- the first page of a caller who sees only its own conversations (an API key's): the first 100
  are theirs, then one in a hundred;
- the read of one conversation (``GET /api/conversations/{id}``'s);
- retention's prune, a dry run that finds the 10 oldest conversations (``dcaf-like prune --dry-run``);
- a page of the approvals inbox (50 of the waiting calls, an approver in ``sre``).

Conversations 0 to 99 are answered, 100 to 1,099 each wait for two SREs' approval, the rest are
answered: the inbox is compared at the same 1,000 waiting calls (1,100 conversations against
100,000), as its cost follows the waiting calls by design; the rest against 100. A conversation is
saved at time n (the store's clock is set), so the list's order is known without reading it.

DynamoDB runs on moto's emulator, whose ``Query`` walks every item of the table in Python: its growth
is the emulator's, and AWS reads only the items a query returns. Past the steps that save through the
store, its conversations are copies of one the store wrote (``BatchWriteItem``; a save on moto costs
about 15 ms, 25 minutes for 100,000).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import inbox
import stores as store_benchmarks

from dcaf_like import Agent, ModelResponse
from dcaf_like.application.conversations import ListConversations, ReadConversation
from dcaf_like.application.cursors import make_cursor
from dcaf_like.application.inbox import ListWaitingApprovals
from dcaf_like.application.messages import ModelRequest
from dcaf_like.application.ports import AgentRuntime, ConversationRepository
from dcaf_like.domain import Conversation, Identity

APPROVER = Identity("alice", frozenset({"approve"}))
#: An API key's caller who sees only its own conversations: the first 100, then one in a hundred.
OWNER = Identity("dana", frozenset({"read"}))
GROUPS = {"sre": frozenset({"alice", "bob"})}
#: The goal: each operation at 100,000 conversations within this much of the same at the baseline.
GOAL = 1.5
PAGE = 50
#: Conversations the prune's dry run finds (the oldest: saved at 0 to PRUNED - 1, never touched).
PRUNED = 10


class Answering(AgentRuntime):
    """An instant model that answers every question."""

    name = "instant"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="web-2 is running again.")


def owned(n: int) -> bool:
    return n < 100 or n % 100 == 0


def conversation(n: int, *, waiting: bool) -> Conversation:
    """Conversation n, saved at time n, as benchmarks/inbox.py makes them (OWNER's if `owned`)."""
    return inbox.conversation(n, waiting=waiting, owner=OWNER.name if owned(n) else None)


class Scale:
    """One store, filled in steps, its clock set by the benchmark."""

    def __init__(self, name: str, store: ConversationRepository, waiting: range) -> None:
        self.name, self.store, self.waiting = name, store, waiting
        self.now = 0.0
        store.clock = lambda: self.now  # type: ignore[attr-defined]  # every built-in store has one
        self.held = 0
        self.turns = 0
        self.loop = asyncio.new_event_loop()
        # DynamoDB: the items its queries read (their ScannedCount), what AWS's time and bill follow.
        self.scanned: list[int] | None = None
        self.items_read: dict[int, dict[str, int]] = {}
        if hasattr(store, "client"):
            self.scanned = [0]
            query = store.client.query

            def counted(**request: Any) -> Any:
                answer = query(**request)
                assert self.scanned is not None
                self.scanned[0] += int(answer.get("ScannedCount", 0))
                return answer

            store.client.query = counted

    def close(self) -> None:
        """The store's asyncio client of this loop closed, then the loop."""
        self.loop.run_until_complete(self.store.aclose())
        self.loop.close()

    def fill(self, size: int, *, copies_from: int | None = None) -> None:
        """Save conversations up to `size` (past `copies_from`, DynamoDB's are copies)."""
        if copies_from is not None and self.held >= copies_from:
            copy_dynamodb_items(self.store, self.held, size)
            self.held = size
            return
        for n in range(self.held, size):
            self.now = float(n)
            self.store.save(conversation(n, waiting=n in self.waiting), 0)
        self.held = size

    def measure(self, repeats: int) -> dict[str, float]:
        """Milliseconds of each operation, the median of `repeats` runs (and on DynamoDB, the items
        its queries read, in :attr:`items_read`)."""
        self.now = 10.0**9 + self.turns  # later than every save: a turn's conversation moves to the front
        store = self.store
        agent = Agent(runtime=Answering(), repository=store)
        listing, reading = ListConversations(store), ReadConversation(store)
        inbox = ListWaitingApprovals(store, GROUPS, lambda: self.now)
        middle = self.held // 2
        expected = min(PAGE, len(range(self.waiting.start, min(self.waiting.stop, self.held))))
        cursor = make_cursor([float(middle), f"conv-{middle:07d}"])
        answered = range(70, 100)  # a turn's: answered, newer than the first size's middle and the prune's

        def turn() -> None:
            self.turns += 1
            self.now += 1.0
            n = answered[self.turns % len(answered)]
            agent.run([{"role": "user", "content": "and now?"}], conversation_id=f"conv-{n:07d}")

        def first_page() -> None:
            listed = self.loop.run_until_complete(listing(identity=None, limit=PAGE))
            assert len(listed.conversations) == PAGE

        def middle_page() -> None:
            listed = self.loop.run_until_complete(listing(identity=None, limit=PAGE, cursor=cursor))
            assert len(listed.conversations) == PAGE

        def owners_page() -> None:
            listed = self.loop.run_until_complete(listing(identity=OWNER, limit=PAGE))
            assert len(listed.conversations) == PAGE

        def read() -> None:
            self.loop.run_until_complete(reading(f"conv-{middle:07d}", identity=None))

        def prune() -> None:
            found = store.prune(self.now - PRUNED, now=self.now, dry_run=True)
            assert found == PRUNED, found

        def inbox_page() -> None:
            assert len(inbox.blocking(identity=APPROVER, limit=PAGE).items) == expected

        operations: dict[str, Callable[[], None]] = {
            "a turn": turn,
            "the list's first page": first_page,
            "a middle page of the list": middle_page,
            "an owner's first page (theirs: 1 in 100)": owners_page,
            "one conversation read": read,
            "retention's prune (dry run)": prune,
            "a page of the approvals inbox": inbox_page,
        }
        figures = {name: timed(run, repeats) for name, run in operations.items()}
        if self.scanned is not None:
            self.items_read[self.held] = {name: self.items_of(run) for name, run in operations.items()}
        return figures

    def items_of(self, run: Callable[[], None]) -> int:
        assert self.scanned is not None
        self.scanned[0] = 0
        run()
        return self.scanned[0]


def timed(run: Callable[[], None], repeats: int) -> float:
    """The median of `repeats` runs after a first (a first read of the index, a statement prepared),
    or of 3 when one takes seconds (an owner's page on moto reads 5,000 conversations)."""
    started = time.perf_counter()
    run()
    slow = time.perf_counter() - started > 0.5
    return inbox.timed(run, min(repeats, 3) if slow else repeats)


def copy_dynamodb_items(store: Any, start: int, end: int) -> None:
    """Conversations `start` to `end` - 1 as the items the store's own save would put (built by it,
    saved at time n), 25 to a BatchWriteItem: moto takes minutes to save 100,000 one by one."""
    from dcaf_like.stores._codec import encode_header
    from dcaf_like.stores.dynamodb import _all_pages

    for first in range(start, end, 25):
        requests = []
        for n in range(first, min(first + 25, end)):
            c = conversation(n, waiting=False)
            header = zlib.compress(encode_header(c).encode("utf-8"))
            item = store._put(c, 0, header, _all_pages(c), None, float(n))["Item"]
            requests.append({"PutRequest": {"Item": item}})
        store.client.batch_write_item(RequestItems={store.table: requests})


def report(
    sizes: Sequence[int],
    waiting: range,
    repeats: int,
    only: set[str] | None = None,
    read: list[tuple[str, dict[int, dict[str, int]]]] | None = None,
) -> list[tuple[str, dict[int, dict[str, float]]]]:
    """Each store's figures by size; the items DynamoDB's queries read are appended to `read`."""
    results = []
    read = [] if read is None else read
    with store_benchmarks.every_store() as found:
        for name, store in found:
            key = name.split(" ")[0].lower()
            if key == "in" or (only is not None and key not in only):
                continue  # the in-memory store walks its list: it is not for 100,000 conversations
            scale = Scale(name, store, waiting)
            figures = {}
            try:
                for size in sizes:
                    scale.fill(size, copies_from=sizes[1] if key == "dynamodb" else None)
                    figures[size] = scale.measure(repeats)
                    print(f"  {name} at {size:,}: done", file=sys.stderr, flush=True)
            finally:
                scale.close()
            results.append((name, figures))
            print(markdown([(name, figures)]), file=sys.stderr, flush=True)  # a long run's figures so far
            if scale.items_read:
                read.append((name, scale.items_read))
    return results


def markdown(results: list[tuple[str, dict[int, dict[str, float]]]]) -> str:
    if not results:
        return "Stores of any size: no store reachable."
    sizes = list(results[0][1])
    head = " | ".join(f"{size:,}, ms" for size in sizes)
    lines = [
        f"| Store | Operation | {head} | {sizes[-1]:,} against {sizes[0]:,} ({sizes[1]:,} for the inbox) | "
        f"within {GOAL}x |",
        "|---|---|" + "---|" * len(sizes) + "---|---|",
    ]
    for name, figures in results:
        for operation in figures[sizes[0]]:
            base = sizes[1] if "inbox" in operation else sizes[0]
            ratio = figures[sizes[-1]][operation] / figures[base][operation]
            cells = " | ".join(f"{figures[size][operation]:.2f}" for size in sizes)
            met = "yes" if ratio <= GOAL else "no"
            lines.append(f"| {name} | {operation} | {cells} | {ratio:.2f}x | {met} |")
    return "\n".join(lines)


def items_markdown(read: list[tuple[str, dict[int, dict[str, int]]]]) -> str:
    """The items each operation's queries read on DynamoDB, by size."""
    lines = []
    for name, by_size in read:
        sizes = list(by_size)
        lines += [
            f"| {name}: items its queries read | " + " | ".join(f"{size:,}" for size in sizes) + " |",
            "|---|" + "---|" * len(sizes),
        ]
        for operation in by_size[sizes[0]]:
            lines.append(
                f"| {operation} | " + " | ".join(str(by_size[size][operation]) for size in sizes) + " |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="100, 300 and 1,000 conversations, 200 waiting")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--stores", help="a comma-separated subset of sqlite,redis,postgresql,dynamodb")
    args = parser.parse_args()
    only = None if args.stores is None else set(args.stores.replace("postgres,", "postgresql,").split(","))
    read: list[tuple[str, dict[int, dict[str, int]]]] = []
    if args.quick:
        results = report((100, 300, 1000), range(100, 300), 3, only, read)
    else:
        results = report((100, 1100, 100_000), range(100, 1100), args.repeats, only, read)
    print(markdown(results))
    if read:
        print("\n" + items_markdown(read))


if __name__ == "__main__":
    main()
