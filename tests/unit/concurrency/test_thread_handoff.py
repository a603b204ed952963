"""`in_thread` keeps `asyncio.to_thread`'s contract (docs/architecture.md, "Performance budget"): each
property is checked on both, so the fast path cannot drift from the plain code it stands for."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from dcaf_like.concurrency.threads import MAX_THREADS, in_thread

HANDOFFS = pytest.mark.parametrize("handoff", [asyncio.to_thread, in_thread], ids=["to_thread", "in_thread"])

who = contextvars.ContextVar("who", default="nobody")


@HANDOFFS
def test_the_call_gets_its_arguments_and_its_result_comes_back(handoff):
    def scale(name: str, *, replicas: int) -> str:
        return f"{name} scaled to {replicas}"

    async def main() -> str:
        return await handoff(scale, "web", replicas=3)

    assert asyncio.run(main()) == "web scaled to 3"


@HANDOFFS
def test_the_call_runs_in_another_thread_than_the_loop(handoff):
    async def main() -> tuple[int, int]:
        return threading.get_ident(), await handoff(threading.get_ident)

    loop_thread, call_thread = asyncio.run(main())

    assert loop_thread != call_thread


@HANDOFFS
def test_the_call_sees_the_callers_context_variables_and_cannot_change_them(handoff):
    def read_and_set() -> str:
        seen = who.get()
        who.set("the tool")
        return seen

    async def main() -> tuple[str, str]:
        who.set("ops@example.com")
        seen = await handoff(read_and_set)
        return seen, who.get()

    assert asyncio.run(main()) == ("ops@example.com", "ops@example.com")


@HANDOFFS
def test_what_the_call_raises_is_raised_to_the_caller(handoff):
    def fail() -> None:
        raise PermissionError("kubectl: forbidden")

    async def main() -> None:
        await handoff(fail)

    with pytest.raises(PermissionError, match="kubectl: forbidden"):
        asyncio.run(main())


@HANDOFFS
def test_a_cancelled_caller_does_not_stop_the_call_and_its_outcome_is_dropped(handoff):
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        finished.set()
        return "done"

    async def main() -> bool:
        waiting = asyncio.ensure_future(handoff(slow))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        return waiting.cancelled()

    assert asyncio.run(main())
    assert finished.wait(10)


@HANDOFFS
def test_blocking_calls_run_side_by_side(handoff):
    together = threading.Barrier(4, timeout=10)  # broken (an error) unless all four wait at once

    async def main() -> list[int]:
        return list(await asyncio.gather(*(handoff(together.wait) for _ in range(4))))

    assert sorted(asyncio.run(main())) == [0, 1, 2, 3]


def test_calls_beyond_the_threads_wait_in_line_and_all_finish():
    release = threading.Event()

    def held(i: int) -> int:
        release.wait(10)
        return i

    async def main() -> list[int]:
        calls = [asyncio.ensure_future(in_thread(held, i)) for i in range(MAX_THREADS + 3)]
        await asyncio.sleep(0)
        release.set()
        return list(await asyncio.gather(*calls))

    assert asyncio.run(main()) == list(range(MAX_THREADS + 3))
