"""The lines of each conversation's latest streamed run, kept so a client whose stream dropped can read
on from the last ``seq`` it saw (``GET /api/conversations/{id}/events?after=N``, docs/protocol.md,
"Resuming a stream").

The entrance writes a run's lines once, as the run produces them, into a :class:`RunLines`; its own
stream and every resumed one read from there, so a line is written once and read by each reader at
most once. A line is the JSON object the entrance sent (opaque here), carrying its ``seq``.

The lines are kept in the server process (ADR 36): a bounded number of lines per run
(:data:`MAX_LINES`), of at most :data:`MAX_RUNS` runs, running ones never dropped (a resume without
a run id reads the conversation's latest). A resume that reaches another worker finds nothing kept
(:class:`NoRunEvents`), and reads the conversation instead.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from dcaf_like.application.conversations import ReadConversation
from dcaf_like.application.errors import ApplicationError
from dcaf_like.application.ports import ConversationStore
from dcaf_like.domain import Identity

#: Lines kept of one run: a resume from before the oldest kept is refused (:class:`EventsExpired`).
MAX_LINES = 10_000
#: Runs kept; past it the least recently started finished run goes.
MAX_RUNS = 1_000


class NoRunEvents(ApplicationError):
    """This server keeps no streamed run of the conversation (it ran on another worker, or went out
    of the buffer, or the conversation was never streamed): read the conversation instead."""

    def __init__(self, conversation_id: str, run: str | None = None) -> None:
        self.conversation_id = conversation_id
        which = f"the run {run}" if run else "a streamed run"
        super().__init__(
            f"this server keeps no lines of {which} of conversation {conversation_id} (it ran on another "
            "worker, or ended long ago): read the conversation (GET /api/conversations/{id})"
        )


class EventsExpired(ApplicationError):
    """The lines after `after` are no longer all kept: the oldest kept is `oldest`."""

    def __init__(self, conversation_id: str, after: int, oldest: int) -> None:
        self.conversation_id = conversation_id
        self.after, self.oldest = after, oldest
        super().__init__(
            f"the lines after seq {after} of conversation {conversation_id}'s run are no longer kept (the "
            f"oldest kept is {oldest}): read the conversation (GET /api/conversations/{{id}})"
        )


class RunLines:
    """The lines of one streamed run, in ``seq`` order from 0; the run's writer appends them and ends
    them with :meth:`finish`; any number of readers :meth:`follow` them."""

    def __init__(self, conversation_id: str, run: str, *, limit: int = MAX_LINES) -> None:
        self.conversation_id, self.run = conversation_id, run
        self._lines: deque[dict[str, Any]] = deque(maxlen=limit)
        self._next = 0  # the seq of the next line
        self.finished = False
        self._changed = asyncio.Event()

    def append(self, line: dict[str, Any]) -> None:
        """Keep `line`, numbered by its writer with the next ``seq``."""
        if line.get("seq") != self._next:
            raise ValueError(f"line {line.get('seq')!r} of a run that expects line {self._next}")
        self._lines.append(line)
        self._next += 1
        self._wake()

    def finish(self) -> None:
        """The run wrote its last line: readers end after it."""
        self.finished = True
        self._wake()

    @property
    def oldest(self) -> int:
        return self._next - len(self._lines)

    async def follow(self, after: int = -1) -> AsyncIterator[dict[str, Any]]:
        """The lines whose ``seq`` is above `after`, as they come, until the run's last. Raises
        :class:`EventsExpired` when some of them are no longer kept (a reader that fell behind too)."""
        seq = after + 1
        while True:
            if seq < self.oldest:
                raise EventsExpired(self.conversation_id, after, self.oldest)
            while seq < self._next:
                line = self._lines[seq - self.oldest]
                seq += 1
                yield line
            if self.finished:
                return
            changed = self._changed
            await changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class RunLog:
    """The streamed runs this server ran, by conversation and run (bounded, see the module): every
    run still in progress, and the latest finished ones. Two runs of one conversation at once (its
    owner's, and a team approver's decision) each keep their own lines."""

    def __init__(self, *, max_runs: int = MAX_RUNS, max_lines: int = MAX_LINES) -> None:
        if max_runs < 1 or max_lines < 1:
            raise ValueError("a run log keeps at least one run and one line")
        self.max_runs, self.max_lines = max_runs, max_lines
        self._runs: OrderedDict[tuple[str, str], RunLines] = OrderedDict()
        self._latest: dict[str, RunLines] = {}

    def open(self, conversation_id: str, run: str) -> RunLines:
        """The lines of a run starting on `conversation_id`: from now on its latest run."""
        lines = RunLines(conversation_id, run, limit=self.max_lines)
        self._runs[(conversation_id, run)] = lines
        self._latest[conversation_id] = lines
        if len(self._runs) > self.max_runs:  # the least recently started finished run goes
            for key, kept in self._runs.items():
                if kept.finished:
                    del self._runs[key]
                    if self._latest.get(kept.conversation_id) is kept:
                        del self._latest[kept.conversation_id]
                    break
        return lines

    def get(self, conversation_id: str, run: str | None = None) -> RunLines | None:
        """The lines of `run` (None: of the conversation's latest streamed run), if kept."""
        if run is None:
            return self._latest.get(conversation_id)
        return self._runs.get((conversation_id, run))


@dataclass(frozen=True, slots=True)
class ReadRunEvents:
    """The lines of a conversation's latest streamed run after a ``seq``, as the caller may read them:
    the id well formed, the ``read`` scope, the conversation the caller's (as
    :class:`~dcaf_like.application.conversations.ReadConversation` checks)."""

    repository: ConversationStore
    log: RunLog

    async def __call__(
        self, conversation_id: str, *, identity: Identity | None, after: int = -1, run: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The lines above `after` (-1: every line kept), following the run until its last line.
        `run`, when given, is the run the caller read (its ``run_started`` line's ``request_id``).
        Raises, before any line: InvalidRequest, MissingScope, ConversationNotFound (as reading it
        would), :class:`NoRunEvents` (none kept here, or not `run`), :class:`EventsExpired`."""
        await ReadConversation(self.repository)(conversation_id, identity=identity)
        lines = self.log.get(conversation_id, run)
        if lines is None:
            raise NoRunEvents(conversation_id, run)
        if after + 1 < lines.oldest:
            raise EventsExpired(conversation_id, after, lines.oldest)
        return lines.follow(after)
