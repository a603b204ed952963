"""Background tools on Celery: :class:`CeleryExecutor` sends each approved call's job to a broker
(Redis by default), and the worker it builds (:meth:`CeleryExecutor.worker_app`, started by
``dcaf-like worker app.py:agent``) hands each job to the agent's
:class:`~dcaf_like.application.tool_jobs.ToolJobs`.

At most once, whatever the broker does: a job carries the call's ids and the approval's
fingerprint, never arguments, and the worker runs it only after claiming the call in the
conversation store with a compare-and-set save. The app is configured for it too: a message is
acknowledged when a worker takes it (``task_acks_late=False``), so a worker killed mid-task leaves no
message to deliver again (its call is settled as interrupted when its lease runs out), and a worker
takes one message at a time (``worker_prefetch_multiplier=1``), so a long tool holds up no other job.
"""

from __future__ import annotations

import logging
from typing import Any

from dcaf_like.application.executors import QUEUE_TTL, InvalidJob, ToolJob
from dcaf_like.application.tool_jobs import ToolJobs
from dcaf_like.concurrency.threads import in_thread
from dcaf_like.extras import missing

try:
    from celery import Celery
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise missing("running tools on a job engine needs celery", "celery", exc) from exc

logger = logging.getLogger("dcaf_like.jobs")

#: The task's name on the broker: one per deployment, whatever the agent.
TASK = "dcaf_like.run_tool_call"
#: The queue jobs go to, and the one ``dcaf-like worker`` consumes.
QUEUE = "dcaf_like.tools"
#: Redis on this machine, database 0.
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"


class CeleryExecutor:
    """Sends the jobs of an agent's background tools to a Celery broker named by URL (``redis://``,
    ``amqp://``, ...); `backend` keeps each job's outcome too (optional: the call's result is in the
    conversation store either way). A job that waits past `queue_ttl` seconds is dropped by the
    worker (Celery's ``expires``), and its call settled as interrupted by the next turn."""

    def __init__(
        self,
        broker: str = DEFAULT_BROKER,
        *,
        backend: str | None = None,
        queue: str = QUEUE,
        queue_ttl: float = QUEUE_TTL,
    ) -> None:
        if not queue_ttl > 0:
            raise ValueError("queue_ttl must be a positive number of seconds")
        self.broker, self.backend, self.queue, self.queue_ttl = broker, backend, queue, queue_ttl
        self.app = _app(broker, backend, queue)

    def submit(self, job: ToolJob) -> None:
        self.app.send_task(TASK, args=[job.to_dict()], queue=self.queue, expires=self.queue_ttl)

    async def asubmit(self, job: ToolJob) -> None:
        await in_thread(self.submit, job)

    async def aping(self) -> None:
        """Connect to the broker once (raises when it cannot be reached): ``GET /ready``'s check."""
        await in_thread(self._ping)

    def _ping(self) -> None:
        with self.app.connection_for_write() as connection:
            connection.connect()

    def worker_app(self, jobs: ToolJobs) -> Celery:
        """A Celery app whose task runs jobs with `jobs` (the agent's: ``agent.jobs``), on this
        executor's broker and queue: what ``dcaf-like worker`` starts."""
        app = _app(self.broker, self.backend, self.queue)

        def run_tool_call(message: Any) -> dict[str, str]:
            try:
                job = ToolJob.of(message)
            except InvalidJob as refused:
                logger.warning("a message that is no job was refused: %s", refused)
                return {"outcome": "refused", "reason": str(refused)}
            outcome = jobs.run(job, continue_run=True)  # then the turn its result is owed
            return {"outcome": outcome.outcome, "reason": outcome.reason}

        app.task(name=TASK, ignore_result=self.backend is None, shared=False)(run_tool_call)
        return app

    def __repr__(self) -> str:
        return f"CeleryExecutor(queue={self.queue!r}, queue_ttl={self.queue_ttl:g})"


def _app(broker: str, backend: str | None, queue: str) -> Celery:
    app = Celery("dcaf_like", broker=broker, backend=backend, set_as_current=False)
    app.conf.update(
        task_acks_late=False,  # acknowledged when taken: never delivered again after a worker dies
        task_reject_on_worker_lost=False,
        worker_prefetch_multiplier=1,
        task_default_queue=queue,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],  # never pickle: a message is data, not code
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app
