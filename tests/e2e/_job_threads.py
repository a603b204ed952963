"""A job engine in threads, for tests over HTTP of what a background tool's watchers see: the API's
agent hands each job over, and a worker agent on the same store runs it on a thread of its own, then
the turn its result is owed, as ``dcaf-like worker`` does (docs/runs.md, "Tools on a job engine")."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from dcaf_like import Agent, AgentRuntime, ToolJob
from dcaf_like.stores.sqlite import SqliteConversationRepository


class JobThreads:
    """Runs each job with the worker agent's jobs, on a thread of its own. The API's agent and the
    worker's share nothing but the store (a SQLite file), as two processes would."""

    queue_ttl = 600.0

    def __init__(self) -> None:
        self.worker: Agent | None = None
        self.threads: list[threading.Thread] = []

    def submit(self, job: ToolJob) -> None:
        assert self.worker is not None, "no worker agent"
        thread = threading.Thread(target=self.worker.jobs.run, args=(job,), kwargs={"continue_run": True})
        thread.start()
        self.threads.append(thread)

    async def asubmit(self, job: ToolJob) -> None:
        self.submit(job)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(60)


def api_and_worker(
    tools: list[Any], api_model: AgentRuntime, worker_model: AgentRuntime, store: Path
) -> tuple[Agent, JobThreads]:
    """The API's agent, whose background calls go to a worker agent on the SQLite file `store`."""
    engine = JobThreads()
    engine.worker = Agent(
        tools=tools,
        runtime=worker_model,
        executor=engine,
        repository=SqliteConversationRepository(store, namespace="agent"),
        lease_ttl=3,  # renewed every second: each renewal saves the tool's latest progress report
    )
    api = Agent(
        tools=tools,
        runtime=api_model,
        executor=engine,
        repository=SqliteConversationRepository(store, namespace="agent"),
        name="ops",
    )
    return api, engine
