"""The run log behind docs/protocol.md, "Resuming a stream": lines kept per run, bounded, each read
once per reader, and the use case's checks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dcaf_like.application.errors import ConversationNotFound, MissingScope
from dcaf_like.application.run_events import EventsExpired, NoRunEvents, ReadRunEvents, RunLines, RunLog
from dcaf_like.domain import Conversation, Identity
from dcaf_like.stores import InMemoryConversationRepository


def line(seq: int) -> dict[str, Any]:
    return {"type": "text_delta", "text": str(seq), "seq": seq}


async def read(lines: Any) -> list[int]:
    return [item["seq"] async for item in lines]


def test_resuming_a_stream_a_reader_gets_the_lines_after_its_seq_then_those_written_until_the_last() -> None:
    async def scenario() -> list[int]:
        lines = RunLines("conv_1", "run-1")
        for seq in range(3):
            lines.append(line(seq))
        reader = asyncio.ensure_future(read(lines.follow(after=0)))
        await asyncio.sleep(0)  # the reader read what there is, and waits
        lines.append(line(3))
        lines.finish()
        return await reader

    assert asyncio.run(scenario()) == [1, 2, 3]


def test_resuming_a_stream_a_run_keeps_a_bounded_number_of_lines_and_refuses_a_resume_from_before_them() -> (
    None
):
    async def scenario() -> None:
        lines = RunLines("conv_1", "run-1", limit=2)
        for seq in range(4):
            lines.append(line(seq))
        lines.finish()
        assert await read(lines.follow(after=1)) == [2, 3]
        with pytest.raises(EventsExpired) as refused:
            await read(lines.follow(after=0))
        assert refused.value.oldest == 2

    asyncio.run(scenario())


def test_a_line_out_of_order_is_refused() -> None:
    lines = RunLines("conv_1", "run-1")
    with pytest.raises(ValueError, match="expects line 0"):
        lines.append(line(1))


def test_resuming_a_stream_the_log_keeps_the_latest_run_of_each_and_drops_a_finished_one_past_its_bound() -> (
    None
):
    log = RunLog(max_runs=2)
    first = log.open("conv_1", "run-1")
    replaced = log.open("conv_1", "run-2")
    assert log.get("conv_1") is replaced
    assert first is not replaced
    running = log.open("conv_2", "run-3")
    log.open("conv_3", "run-4")  # over the bound: nothing finished yet, nothing dropped
    assert log.get("conv_1") is replaced
    assert log.get("conv_2") is running
    replaced.finish()
    log.open("conv_4", "run-5")
    assert log.get("conv_1") is None  # the finished one goes
    assert log.get("conv_2") is running  # a running one stays


def test_resuming_a_stream_reads_only_the_callers_conversation_and_only_its_kept_run() -> None:
    repository = InMemoryConversationRepository()
    conversation = Conversation.start("conv_1", owner="alice")
    conversation.add_user_message("hi")
    repository.save(conversation, 0)
    log = RunLog()
    kept = log.open("conv_1", "run-1")
    kept.append(line(0))
    kept.finish()
    use = ReadRunEvents(repository, log)
    alice = Identity("alice", frozenset({"chat", "read"}))
    bob = Identity("bob", frozenset({"chat", "read"}))
    writer_only = Identity("alice", frozenset({"chat"}))

    async def scenario() -> None:
        assert await read(await use("conv_1", identity=alice)) == [0]
        with pytest.raises(ConversationNotFound):
            await use("conv_1", identity=bob)
        with pytest.raises(MissingScope):
            await use("conv_1", identity=writer_only)
        with pytest.raises(NoRunEvents):
            await use("conv_1", identity=alice, run="run-0")
        with pytest.raises(EventsExpired):
            await use("conv_1", identity=alice, after=-5)

    asyncio.run(scenario())


def test_resuming_a_stream_two_runs_of_one_conversation_each_keep_their_lines() -> None:
    """docs/protocol.md, "Resuming a stream": a team approver's streamed decision in a conversation
    whose owner's run still streams does not take the owner's lines: each resumes its own run by its
    id, and a resume without one reads the latest."""
    log = RunLog()
    owners = log.open("conv_1", "run-owner")
    owners.append(line(0))
    owners.append(line(1))
    approvers = log.open("conv_1", "run-approver")
    approvers.append(line(0))
    approvers.finish()
    owners.finish()

    assert log.get("conv_1", "run-owner") is owners
    assert log.get("conv_1", "run-approver") is approvers
    assert log.get("conv_1") is approvers
    assert asyncio.run(read(owners.follow(0))) == [1]
