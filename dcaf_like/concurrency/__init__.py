"""The ground floor: plumbing between blocking and asyncio code, which knows nothing of agents.

Below ``application/`` in the layers contract (docs/architecture.md), beside ``domain/``: any layer
may use it, and it imports nothing of the package.

- :mod:`~dcaf_like.concurrency.bridges`: a coroutine run from blocking code and back, one way to hand
  items from a thread or a loop to another, and :class:`~dcaf_like.concurrency.bridges.PerLoop` (what
  an asyncio client opens once per event loop).
- :mod:`~dcaf_like.concurrency.portal`: an event loop in a thread of its own (ADK, MCP).
- :mod:`~dcaf_like.concurrency.threads`: a blocking call made from the event loop, in threads of our own.
- :mod:`~dcaf_like.concurrency.time_limits`: a call or an iterator within a time limit.
- :mod:`~dcaf_like.concurrency.ticker`: the one timer of an event loop's periodic jobs.
"""
