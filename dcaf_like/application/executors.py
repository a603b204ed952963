"""Where an approved call runs: the executor port and the job it is handed.

A tool marked ``@tool(background=True)`` (or every tool of ``Agent(executor=..., background=True)``)
is not run by the turn that approved it: the turn queues the call (a lease whose owner is
:data:`LEASED_TO_QUEUE`), saves it, and hands its :class:`ToolJob` to the agent's :class:`ToolExecutor`, then
ends without waiting (``stop_reason: "running_in_background"``). A job names the call, never its
arguments: whatever receives it (:class:`~dcaf_like.application.tool_jobs.ToolJobs`, in this process
or in a job engine's worker) runs the call's stored arguments, once (docs/runs.md, "Tools on a job
engine").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

#: The lease owner of a call waiting in a job engine's queue: approved, claimed by no worker yet.
LEASED_TO_QUEUE = "queued"

#: Seconds a queued call waits for a worker by default: past them the next turn settles it as
#: interrupted, and its job, should it still come, runs nothing.
QUEUE_TTL = 3600.0

_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")


class InvalidJob(ValueError):
    """A message that is not a job this package wrote (a field missing, of the wrong form)."""


@dataclass(frozen=True, slots=True)
class ToolJob:
    """One approved call to run: its conversation, its id, and the fingerprint of what was approved
    (the tool's name and its arguments as approved). No arguments ride along: the worker runs the
    call's stored ones."""

    conversation_id: str
    call_id: str
    fingerprint: str

    def to_dict(self) -> dict[str, str]:
        return {
            "conversation_id": self.conversation_id,
            "call_id": self.call_id,
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def of(cls, message: Any) -> ToolJob:
        """The job a broker's message carries; :class:`InvalidJob` for anything else."""
        if not isinstance(message, Mapping):
            raise InvalidJob(f"a job is an object, not {type(message).__name__}")
        conversation_id, call_id, fingerprint = (
            message.get(name) for name in ("conversation_id", "call_id", "fingerprint")
        )
        if not (
            isinstance(conversation_id, str) and isinstance(call_id, str) and isinstance(fingerprint, str)
        ):
            raise InvalidJob("a job names conversation_id, call_id and fingerprint as strings")
        if not _ID.fullmatch(conversation_id) or not _ID.fullmatch(call_id):
            raise InvalidJob("a job's conversation_id or call_id is not an id")
        if not _FINGERPRINT.fullmatch(fingerprint):
            raise InvalidJob("a job's fingerprint is not a SHA-256 in hex")
        return cls(conversation_id, call_id, fingerprint)


@runtime_checkable
class ToolExecutor(Protocol):
    """Where the approved calls of background tools go. The turn that queued a call saves it before
    it submits the job, so whatever runs the job finds the call queued in the store."""

    #: Seconds a job may wait for a worker (the queued call's lease).
    queue_ttl: float

    def submit(self, job: ToolJob) -> None:
        """Hand the job over (blocking ports); raise if it could not be: the call then fails, not run."""

    async def asubmit(self, job: ToolJob) -> None:
        """The async twin of :meth:`submit`."""


@runtime_checkable
class ReachableExecutor(Protocol):
    """An executor that can tell whether its job engine takes jobs now (its broker answers): the
    server's ``GET /ready`` asks it (docs/operations.md, "Health and readiness")."""

    async def aping(self) -> None:
        """Return once the job engine answered; raise if it cannot be reached."""
