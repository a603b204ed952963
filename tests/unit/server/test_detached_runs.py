"""The server's runs: a turn runs in a task of its own, which the request only waits on, so a request
cancelled (its client went away) never stops the work it started."""

from __future__ import annotations

import asyncio
import inspect
import logging

import pytest

from dcaf_like.server.detached import Runs, ShuttingDown


def test_a_run_gives_its_caller_the_works_result():
    async def work() -> str:
        await asyncio.sleep(0)
        return "restarted"

    async def main() -> str:
        return await Runs().run(work())

    assert asyncio.run(main()) == "restarted"


def test_a_runs_failure_reaches_its_caller_as_raised():
    async def work() -> str:
        raise LookupError("no such deployment")

    async def main() -> None:
        await Runs().run(work())

    with pytest.raises(LookupError, match="no such deployment"):
        asyncio.run(main())


def test_a_caller_cancelled_mid_run_leaves_the_work_going_to_its_end():
    async def main() -> tuple[bool, list[str], int]:
        runs, release, done = Runs(), asyncio.Event(), []

        async def work() -> str:
            await release.wait()
            done.append("restarted")
            return "restarted"

        caller = asyncio.ensure_future(runs.run(work()))
        await asyncio.sleep(0)  # the run has started and waits
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        release.set()
        await runs.aclose()
        return caller.cancelled(), done, len(runs)

    cancelled, done, left = asyncio.run(main())

    assert cancelled
    assert done == ["restarted"]
    assert left == 0


def test_a_run_stopped_by_the_shutdown_tells_its_caller_the_server_is_shutting_down():
    """docs/deployment.md, "Restarts and deploys": the caller answers 503 shutting_down, not 500."""

    async def main() -> None:
        runs, started = Runs(grace=0), asyncio.Event()

        async def work() -> str:
            started.set()
            await asyncio.Event().wait()  # a tool that outlives the grace period
            return "never"

        caller = asyncio.ensure_future(runs.run(work()))
        await started.wait()
        await runs.aclose()
        await caller

    with pytest.raises(ShuttingDown):
        asyncio.run(main())


def test_a_failure_after_its_caller_went_away_is_logged(caplog):
    async def main() -> None:
        runs, release = Runs(), asyncio.Event()

        async def work() -> str:
            await release.wait()
            raise RuntimeError("the store went away")

        caller = asyncio.ensure_future(runs.run(work()))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        release.set()
        await runs.aclose()
        await asyncio.sleep(0)  # the task's done callback

    with caplog.at_level(logging.WARNING, logger="dcaf_like.http"):
        asyncio.run(main())

    assert "a run whose client had gone away failed: RuntimeError: the store went away" in caplog.text


def test_a_draining_server_refuses_a_new_run_and_leaves_no_coroutine_unawaited():
    async def work() -> str:
        return "never"

    async def main() -> object:
        runs = Runs()
        runs.begin_drain()
        pending = work()
        with pytest.raises(ShuttingDown):
            await runs.run(pending)
        return pending

    pending = asyncio.run(main())

    assert inspect.getcoroutinestate(pending) == inspect.CORO_CLOSED
