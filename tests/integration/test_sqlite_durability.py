"""SQLite's durability where the gate needs it: the save that claims an approved call is synced to disk
before the tool runs (so a power loss cannot make a call that ran read as waiting for a decision again);
other saves are left to the next checkpoint, as the file's `synchronous = NORMAL` says."""

from __future__ import annotations

import asyncio

from dcaf_like import Agent, SqliteConversationRepository, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call


@tool
def restart(service: str) -> str:
    """Restart a service."""
    return f"restarted {service}"


def synced_commits(statements: list[str]) -> list[str]:
    """The statements run between a switch to FULL and the switch back, in order."""
    synced, inside = [], False
    for statement in statements:
        if statement == "PRAGMA synchronous = FULL":
            inside = True
        elif statement == "PRAGMA synchronous = NORMAL":
            inside = False
        elif inside:
            synced.append(statement.split()[0])
    return synced


def test_only_the_save_that_claims_an_approved_call_is_synced_before_the_tool_runs(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db")
    ran: list[list[str]] = []

    @tool
    def restart_and_look(service: str) -> str:
        """Restart a service."""
        ran.append(synced_commits(statements))  # what was synced before the tool ran
        return f"restarted {service}"

    runtime = FakeRuntime([tool_call("restart_and_look", service="api"), reply("done")])
    agent = Agent(tools=[restart_and_look], runtime=runtime, repository=store)
    statements: list[str] = []
    store._connection().set_trace_callback(statements.append)  # this thread's connection: Agent.run's

    waiting = agent.run("restart the api")
    proposal = synced_commits(statements)
    statements.clear()
    agent.approve(waiting.conversation_id, waiting.pending_tool_calls[0].id)
    approval = synced_commits(statements)

    assert proposal == []
    # One transaction was synced, committed before the tool ran: the claim (the header and the call)
    (claim,) = ran
    assert (claim[0], claim[-1]) == ("BEGIN", "COMMIT")
    assert "UPDATE" in claim
    assert approval == claim  # the save of the result, after the tool, was not synced


async def test_a_claim_saved_while_another_thread_writes_waits_its_turn_instead_of_failing(tmp_path):
    store = SqliteConversationRepository(tmp_path / "c.db")
    runtime = FakeRuntime([tool_call("restart", service="api")])
    agent = Agent(tools=[restart], runtime=runtime, repository=store)
    waiting = await agent.arun("restart the api")
    claimed = store.get(waiting.conversation_id)
    assert claimed is not None
    stored_version = claimed.version
    claimed.approve_tool_call(waiting.pending_tool_calls[0].id, by="alice", at=1.0)
    claimed.lease_tool_call(waiting.pending_tool_calls[0].id, "worker-1", until=2.0)

    # Another thread of this process is in the middle of a write on the shared connection.
    shared = store._connection()
    store._write_lock.acquire()
    shared.execute("BEGIN IMMEDIATE")
    saving = asyncio.create_task(store.asave(claimed, stored_version))
    await asyncio.sleep(0.05)  # let the save reach the lock (it must wait there, not fail)
    shared.execute("COMMIT")
    store._write_lock.release()
    await saving

    stored = store.get(waiting.conversation_id)
    assert stored is not None
    assert stored.tool_call(waiting.pending_tool_calls[0].id).lease_owner == "worker-1"
