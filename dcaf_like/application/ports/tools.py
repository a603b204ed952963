"""What the service runs as a tool (:class:`ExecutableTool`), what a running tool sees
(:class:`ToolContext`) and what it may return besides text (:class:`ToolOutput`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, cast, runtime_checkable

from dcaf_like.application.messages import (
    ToolSpec,
)
from dcaf_like.application.questions import Answered, UserInputRequired
from dcaf_like.domain import (
    MAX_PART_BYTES,
    MAX_PARTS_BYTES,
    Attachment,
    Identity,
    PlatformContext,
    Session,
)
from dcaf_like.domain.identity import DepsT
from dcaf_like.domain.question import MAX_TEXT_ANSWER


class ToolCancelled(Exception):
    """Raised by :meth:`ToolContext.check_cancelled` in a tool whose run was asked to stop."""


class NoPreview(Exception):
    """Raised by a tool's preview that has nothing to show for this call (a command whose program has
    no dry run): the call waits with the reason as its ``preview_error``, and no failure is logged."""


class CancelSignal:
    """A :class:`threading.Event` for a call's cancel (``is_set``, ``set``, ``wait``), whose event is
    built only when a tool first waits on it: most tools never wait, and every call has one
    (docs/benchmarks.md, "Figures behind the code's choices")."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        event = self._event  # read after the flag is written: a waiter that made it sees the flag
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False if `timeout` (seconds) passed first."""
        if self._set:
            return True
        with _FIRST_WAIT:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if self.is_set():  # set before the event existed: it saw none to set
            event.set()
        return event.wait(timeout)

    def __repr__(self) -> str:
        return f"CancelSignal(set={self._set})"


_FIRST_WAIT = threading.Lock()


@dataclass(frozen=True, slots=True)
class ToolContext(Generic[DepsT]):
    """What a running tool may see besides its arguments, and how it reports its progress.

    `session` and `platform_context` are what the client sent (it writes both): never authority.
    `identity` is who the server authenticated (None without API keys) and `deps` the agent's
    dependencies (``Agent(deps=...)``): no client sets either. ``ToolContext[MyDeps]`` types `deps`."""

    conversation_id: str
    call_id: str
    platform_context: PlatformContext
    session: Session
    identity: Identity | None = None
    deps: DepsT = field(default=cast(Any, None), repr=False, compare=False)
    #: Where :meth:`progress` goes: the stream of the run, when someone reads one.
    on_progress: Callable[[str, float | None], None] | None = field(default=None, repr=False, compare=False)
    #: The questions this call asked the user that were answered, for a run after the answer.
    answers: tuple[Answered, ...] = ()
    #: Set once the run is asked to stop while this call runs (docs/runs.md, "Stopping a running
    #: tool"); read it through :attr:`cancelled` or :meth:`check_cancelled`.
    cancel_signal: CancelSignal = field(default_factory=CancelSignal, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        """True once someone asked the run to stop while this call runs: a ``def`` tool that works in
        steps (pod after pod) looks between them and stops cleanly."""
        return self.cancel_signal.is_set()

    def check_cancelled(self) -> None:
        """Raise :class:`ToolCancelled` if the run was asked to stop: the call is then settled as
        failed, stopped by a human, with what the tool said it had done so far."""
        if self.cancel_signal.is_set():
            raise ToolCancelled("the run was cancelled while this tool ran")

    def ask(
        self,
        question: str,
        *,
        kind: str = "text",
        options: Sequence[str] | None = None,
        max_length: int = MAX_TEXT_ANSWER,
    ) -> str | bool:
        """The user's answer to `question`: when this call asked it and it was answered, the answer (a
        bool for ``kind="confirmation"``, one of `options` for a selection, else text); otherwise raises
        :class:`UserInputRequired`, the run suspends until the user answers, and the tool is run again.
        Ask before acting: everything the tool did before asking is done again on that run."""
        error = UserInputRequired(question, kind=kind, options=options, max_length=max_length)
        for answered in self.answers:
            if answered.answers(error.kind, question, error.options):
                return answered.value
        raise error

    def progress(self, message: str, *, fraction: float | None = None) -> None:
        """Tell whoever follows the run how far the tool got (``"3/10 pods restarted"``, ``fraction=0.3``):
        a ``tool_progress`` event on the stream; nothing when nobody streams. Safe from any thread."""
        if not isinstance(message, str):
            raise TypeError(f"progress takes a message string, not {type(message).__name__}")
        if fraction is not None and not (isinstance(fraction, int | float) and 0 <= fraction <= 1):
            raise ValueError(f"fraction must be between 0 and 1, not {fraction!r}")
        if self.on_progress is not None:
            self.on_progress(message, None if fraction is None else float(fraction))


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result with images or files besides its text (an MCP tool's ``ImageContent``, or what
    a ``@tool`` function returns: ``ToolOutput("the panel", (attachment("image", ...),))``).
    They are kept with the call, as a message's attachments are with it, and shown to the model if
    its runtime takes their kind (:attr:`~dcaf_like.application.ports.AgentRuntime.accepts`);
    otherwise the model reads a note naming what was left out. They are kept within
    :data:`~dcaf_like.domain.MAX_PART_BYTES` each and :data:`~dcaf_like.domain.MAX_PARTS_BYTES` in
    all; one past a limit is left out and named in the text (:meth:`within_limits`)."""

    text: str
    attachments: tuple[Attachment, ...] = ()

    def within_limits(self) -> ToolOutput:
        """Itself with each attachment past a limit left out and named in its text, as an MCP tool's
        are. Raises TypeError when its text is not a string or an attachment not an :class:`Attachment`
        (build one with :func:`~dcaf_like.domain.attachment`)."""
        text: object = self.text  # what a tool's author wrote: checked, as the types are not at runtime
        parts: object = self.attachments
        if not isinstance(text, str):
            raise TypeError(f"ToolOutput's text is a string, not {type(text).__name__}")
        if not isinstance(parts, tuple | list):
            raise TypeError(
                f"ToolOutput's attachments are a tuple of Attachments, (image,), not {type(parts).__name__}"
            )
        kept: list[Attachment] = []
        notes: list[str] = []
        total = 0
        for part in parts:
            if not isinstance(part, Attachment):
                raise TypeError(
                    f"ToolOutput's attachments are Attachments (made with attachment(...)), not "
                    f"{type(part).__name__}"
                )
            if part.size > MAX_PART_BYTES:
                kind = part.kind.value
                notes.append(
                    f"[{kind} {part.name or part.media_type} of {part.size} bytes left out: "
                    f"{kind} part: larger than {MAX_PART_BYTES} bytes]"
                )
            elif total + part.size > MAX_PARTS_BYTES:
                notes.append(
                    f"[{part.describe()} of {part.size} bytes left out: with it the result's images "
                    f"and files come to more than {MAX_PARTS_BYTES} bytes]"
                )
            else:
                kept.append(part)
                total += part.size
        if not notes and isinstance(parts, tuple):
            return self
        return ToolOutput("\n".join([self.text, *notes] if self.text else notes), tuple(kept))


@runtime_checkable
class ExecutableTool(Protocol):
    """A tool the service can offer to a model, validate arguments for, and run. It returns its
    result's text, or a :class:`ToolOutput` when the result also holds images or files."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def requires_approval(self) -> bool: ...
    @property
    def editable(self) -> bool: ...
    @property
    def secret_arguments(self) -> frozenset[str]: ...
    @property
    def is_async(self) -> bool: ...

    def spec(self) -> ToolSpec: ...

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments checked (and coerced) against the schema; raises InvalidToolArguments."""

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext[Any]) -> str | ToolOutput: ...

    async def ainvoke(self, arguments: Mapping[str, Any], context: ToolContext[Any]) -> str | ToolOutput: ...
