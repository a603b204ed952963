"""Messages into a running run (docs/runs.md, "A message into a running run"): a plain message for a
conversation whose turn runs in this process waits for that turn's next model step, and is answered
at once with ``stop_reason: "queued"``; what the turn did not read when it ended is queued on the
conversation, for the next turn."""

from __future__ import annotations

import threading
from collections.abc import Callable

from dcaf_like.application.dto import AgentRequest, AgentResponse
from dcaf_like.application.effects import QUEUED
from dcaf_like.domain import Conversation


class Arrivals:
    """Messages sent to one running turn, until it reads them; a lock, as a blocking turn runs on a
    thread of its own while the server queues on its event loop."""

    __slots__ = ("_lock", "_messages", "_open", "owner")

    def __init__(self, owner: str | None) -> None:
        self.owner = owner
        self._lock = threading.Lock()
        self._messages: list[tuple[str, float]] = []
        self._open = True

    def add(self, text: str, at: float) -> bool:
        """Keep a message for the turn; False once the turn ended."""
        with self._lock:
            if self._open:
                self._messages.append((text, at))
            return self._open

    def take(self) -> list[tuple[str, float]]:
        with self._lock:
            taken, self._messages = self._messages, []
            return taken

    def close(self) -> list[tuple[str, float]]:
        with self._lock:
            self._open = False
            taken, self._messages = self._messages, []
            return taken


class RunningTurns:
    """The turns running in this process, by conversation: where a message sent meanwhile waits."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._running: dict[str, Arrivals] = {}

    def queue(self, request: AgentRequest, runtime: str) -> AgentResponse | None:
        """A plain message (text only) for a conversation whose turn runs here, from whoever may use
        it: kept for that turn, and answered at once (``stop_reason: "queued"``). None: the request is
        a turn of its own."""
        conversation_id = request.conversation_id
        if conversation_id is None or not request.text:
            return None
        if request.decisions or request.answers or request.attachments:
            return None
        arrivals = self._running.get(conversation_id)
        if arrivals is None:
            return None
        if request.owner is not None and not request.sees_all and arrivals.owner != request.owner:
            return None  # another's: the turn's own checks refuse it
        if not arrivals.add(request.text, self._clock()):
            return None  # the turn just ended: the request is a turn of its own
        return AgentResponse(conversation_id, stop_reason=QUEUED, runtime=runtime)

    def start(self, conversation: Conversation) -> Arrivals:
        """The turn on `conversation` begins: messages sent to it from now on wait for it."""
        return self._running.setdefault(conversation.id, Arrivals(conversation.owner))

    def take(self, conversation_id: str) -> list[tuple[str, float]]:
        """The messages that arrived for the turn on the conversation since it last looked."""
        arrivals = self._running.get(conversation_id)
        return [] if arrivals is None else arrivals.take()

    def stop(self, conversation: Conversation, arrivals: Arrivals | None) -> None:
        """The turn ends: messages sent to it from now on are turns of their own; those that arrived
        and were not read are queued on the conversation (saved with it, read by the next turn)."""
        if arrivals is None:
            return
        if self._running.get(conversation.id) is arrivals:
            del self._running[conversation.id]
        for text, at in arrivals.close():
            conversation.queue_user_message(text, at=at)
