"""Ports: what the application needs from the outside world, in its own types.

A runtime implements one method (``invoke``); the others have defaults. A store implements two
(:class:`ConversationStore`: ``get`` and ``save``, compare-and-set) and declares what it does besides
by subclassing a capability: :class:`AuditTrail`, :class:`CancelFlags`, :class:`Listing`,
:class:`Retention`; :class:`ConversationRepository` is all of them, as the built-in stores are. An
action that needs a capability its store lacks is refused by name (:func:`require`). The sync/async
twins have defaults both ways, so an adapter writes only what its technology offers natively (as
httpx's transports do).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast, runtime_checkable

from dcaf_like.application.context import estimate_tokens
from dcaf_like.application.dto import AgentRequest, AgentResponse
from dcaf_like.application.errors import MissingCapability
from dcaf_like.application.events import StreamEvent
from dcaf_like.application.messages import (
    NO_SETTINGS,
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ModelStreamEvent,
    ReasoningDelta,
    TextDelta,
    ToolSpec,
)
from dcaf_like.application.questions import Answered, UserInputRequired
from dcaf_like.application.retention import expired
from dcaf_like.application.tracing import Tracer
from dcaf_like.application.waiting import WaitingEntry
from dcaf_like.concurrency.bridges import iterate_in_thread
from dcaf_like.domain import (
    MAX_PART_BYTES,
    MAX_PARTS_BYTES,
    ApprovalPolicy,
    Attachment,
    Conversation,
    DecisionRecord,
    Identity,
    PlatformContext,
    Session,
)
from dcaf_like.domain.grant import Grant
from dcaf_like.domain.identity import DepsT
from dcaf_like.domain.question import MAX_TEXT_ANSWER
from dcaf_like.domain.trail import AuditDigest, ChainHead, Trail


class AgentRuntime(ABC):
    """A model behind an agent. Implement :meth:`invoke`; override the others when the SDK streams
    natively or has an async client."""

    #: Shown in responses' metadata and in errors, e.g. ``"bedrock:anthropic.claude-3-haiku"``.
    name: str = "runtime"
    #: The model's context window in tokens when known (``context_window=`` on each runtime; the local
    #: model's is its ``n_ctx``). None: the whole transcript is sent, as the model may take it.
    context_window: int | None = None
    #: The kinds of message parts besides text its model reads (``"image"``, ``"file"``); a message
    #: carrying another kind is refused before the model is called. None by default. A tool's images
    #: and files of a kind it takes reach it in a user's turn after the calls' results (ADR 23).
    accepts: frozenset[str] = frozenset()
    #: Its own model settings (from the runtime string, ``"openai:gpt-4o-mini?temperature=0"``); a
    #: request's settings (the agent's) override them. Read them with :meth:`settings_for`.
    settings: ModelSettings = NO_SETTINGS

    def settings_for(self, request: ModelRequest) -> ModelSettings:
        """The settings a request is answered with: the request's, then this runtime's own."""
        return request.settings.over(self.settings)

    def takes(self, part: Attachment) -> bool:
        """Whether its model reads `part`: whether :attr:`accepts` names its kind. A runtime that reads
        only some parts of a kind (the local model: text files) narrows it; a part it does not take is
        refused before the model is called."""
        return part.kind.value in self.accepts

    def refused_part(self, parts: Sequence[Attachment]) -> tuple[int, str] | None:
        """The first of `parts` its model cannot take, and why, or None when it takes them all.

        `parts` are every attachment a model request of the conversation would carry, in order: the
        earlier messages' and then this turn's, so that a rule on a whole request (at most five
        documents) can be kept as well as one on a part (a format, a size, an image by URL). By
        default a part is refused when :meth:`takes` says no; a runtime whose provider
        has narrower rules says them here, and the turn is refused before anything is saved or sent.
        """
        for i, part in enumerate(parts):
            if not self.takes(part):
                # a kind it takes in other media types is named by this part's media type
                kind = part.media_type if part.kind.value in self.accepts else part.kind.value
                return i, f"it takes no {kind} parts"
        return None

    def count_tokens(self, text: str) -> int:
        """Tokens `text` takes for this model: the runtime's tokenizer where it has one, else the
        estimate of :func:`~dcaf_like.application.context.estimate_tokens` (four characters a token)."""
        return estimate_tokens(text)

    def count_request_tokens(self, request: ModelRequest) -> int | None:
        """Tokens of the whole request as this runtime sends it, when it can tell (a runtime that
        renders its own prompt); None: the context policy goes by :meth:`count_tokens` alone."""
        return None

    @abstractmethod
    def invoke(self, request: ModelRequest) -> ModelResponse:
        """One model call: the conversation so far in, the model's answer out."""

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Deltas as the model produces them, then one :class:`ModelCompleted`."""
        response = self.invoke(request)
        yield from _deltas_of(response)
        yield ModelCompleted(response)

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        return await asyncio.to_thread(self.invoke, request)

    def secret_values(self) -> tuple[str, ...]:
        """Values this runtime holds that no error may show (its API key): the service removes them
        from the text of every failure it reports. Override when the runtime holds one."""
        return ()

    def close(self) -> None:  # noqa: B027  (optional hook: most runtimes hold nothing to release)
        """Release the SDK's connections (a server calls this at shutdown)."""

    async def aclose(self) -> None:  # noqa: B027
        """Release the connections of the asyncio client used by the running event loop."""

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        if type(self).stream is AgentRuntime.stream:
            response = await self.ainvoke(request)
            for delta in _deltas_of(response):
                yield delta
            yield ModelCompleted(response)
            return
        async for event in iterate_in_thread(self.stream(request)):
            yield event


def _deltas_of(response: ModelResponse) -> Iterator[ModelStreamEvent]:
    if response.reasoning:
        yield ReasoningDelta(response.reasoning)
    if response.text:
        yield TextDelta(response.text)


#: Reads :meth:`Listing.aget_many` runs at once by default.
READ_CONCURRENCY = 8


_DIGESTS_FIX = "implement append_digest and audit_tip (docs/operations.md, 'Proving the trail')"
_INBOX_FIX = "implement list_waiting, indexing waiting calls as it saves (docs/approvals.md, 'One inbox')"


class ConversationStore(ABC):
    """Where conversations live between turns: the part every store implements, and all a turn needs.

    Two methods are required: :meth:`get` and :meth:`save`. :meth:`save` is a compare-and-set on
    :attr:`Conversation.version`: it writes only if the stored version is still `expected_version`
    (0 for a conversation that must not exist yet), and raises
    :class:`~dcaf_like.application.errors.ConcurrencyConflict` otherwise, writing nothing. The
    others have defaults. What a store does besides is a capability it declares by also subclassing
    it (:class:`AuditTrail`, :class:`CancelFlags`, :class:`Listing`, :class:`Retention`); an action
    that needs one a store lacks is refused with
    :class:`~dcaf_like.application.errors.MissingCapability` naming it (:func:`require`).
    :class:`ConversationRepository` declares them all, as the built-in stores do.
    """

    #: What this part of a store lets an agent do, and how a store gains it: the words of
    #: :class:`~dcaf_like.application.errors.MissingCapability` when a store lacks it.
    ability: ClassVar[str] = "keep conversations"
    fix: ClassVar[str] = "implement get and save"

    @abstractmethod
    def get(self, conversation_id: str) -> Conversation | None: ...

    @abstractmethod
    def save(self, conversation: Conversation, expected_version: int) -> None: ...

    def get_recent(self, conversation_id: str) -> Conversation | None:
        """The conversation as a turn needs it (ADR 22): its header, and its messages and calls from
        :meth:`Conversation.window_start` on, which the store recorded with its last save: every call
        not settled yet, and every message a context window may still send the model (the stored
        summary stands for those before). The conversation says what it leaves out
        (:attr:`~Conversation.message_offset`, :attr:`~Conversation.call_offset`), and a save of it
        writes its changes like any other's.

        This default reads the whole conversation, which is also a correct answer: stores whose
        records can be read from a position on override it, so that a turn on a long conversation
        reads what it needs rather than all of it."""
        return self.get(conversation_id)

    def ping(self) -> None:
        """One cheap round trip to the store (a readiness probe); raises if it does not answer.
        This default reads a conversation that does not exist; stores override it with their
        cheapest request."""
        self.get("dcaf-ping")

    async def aping(self) -> None:
        """:meth:`ping` without blocking the event loop (stores with an async client override it)."""
        await asyncio.to_thread(self.ping)

    # Stores whose I/O blocks override these with a native async client.
    async def aget(self, conversation_id: str) -> Conversation | None:
        return self.get(conversation_id)

    async def aget_recent(self, conversation_id: str) -> Conversation | None:
        """:meth:`get_recent` on the event loop. This default is :meth:`aget` for a store without a
        windowed read of its own, else its :meth:`get_recent`, in place (as :meth:`aget` reads)."""
        if type(self).get_recent is ConversationStore.get_recent:
            return await self.aget(conversation_id)
        return self.get_recent(conversation_id)

    async def asave(self, conversation: Conversation, expected_version: int) -> None:
        self.save(conversation, expected_version)

    async def aclose(self) -> None:  # noqa: B027  (optional hook: a store with an asyncio client closes it)
        """Close the asyncio client of the running event loop (a server does this at shutdown)."""


class Listing(ConversationStore):
    """A store that lists, reads in batches and forgets conversations: the conversation list and
    ``DELETE /api/conversations/{id}`` need it. Implement :meth:`list_ids` and :meth:`delete`."""

    ability = "list or delete conversations"
    fix = "subclass Listing and implement list_ids and delete (docs/stores.md)"

    @abstractmethod
    def delete(self, conversation_id: str) -> bool:
        """Remove a conversation; False if there was none."""

    @abstractmethod
    def list_ids(self, limit: int = 100) -> list[str]:
        """Ids of stored conversations, most recently updated first."""

    def get_many(self, conversation_ids: Sequence[str]) -> list[Conversation | None]:
        """Several conversations at once, in the order asked (None for one that is gone): a page of
        the conversation list. Stores with a batch read (Redis: one pipelined round trip) override it."""
        return [self.get(i) for i in conversation_ids]

    async def aget_many(self, conversation_ids: Sequence[str]) -> list[Conversation | None]:
        """:meth:`get_many` on the event loop: at most :data:`READ_CONCURRENCY` reads at once, so a
        page of 500 never asks a client's connection pool for 500 connections."""
        limit = asyncio.Semaphore(READ_CONCURRENCY)

        async def one(conversation_id: str) -> Conversation | None:
            async with limit:
                return await self.aget(conversation_id)

        return list(await asyncio.gather(*(one(i) for i in conversation_ids)))


class Retention(Listing):
    """A store that forgets conversations whose retention has passed (``dcaf-like prune``)."""

    ability = "forget conversations past their retention"
    fix = "subclass Retention (a Listing store: prune has a default) (docs/stores.md)"

    def prune(self, retention: float, *, now: float | None = None, dry_run: bool = False) -> int:
        """Forget the conversations whose retention has passed (see
        :mod:`dcaf_like.application.retention`: `retention` seconds after the last save, a waiting one
        not before its approval window closes); return how many (with `dry_run`, would be, and
        nothing is deleted). This default reads every conversation (the in-memory store and DynamoDB,
        whose own TTL forgets as it goes, use it); SQLite and Redis check and delete atomically."""
        now = time.time() if now is None else now
        gone = 0
        for conversation_id in self.list_ids(sys.maxsize):
            conversation = self.get(conversation_id)
            if conversation is not None and expired(conversation, retention, now):
                gone += 1 if dry_run else int(self.delete(conversation_id))
        return gone


class AuditTrail(ConversationStore):
    """A store that keeps the audit trail: :meth:`save` appends the conversation's
    :attr:`~Conversation.unsaved_decisions` with it (in the same write where the store allows) and
    empties that list once written. Decision records are never rewritten and never deleted with their
    conversation; they may expire by an `audit_ttl` of their own. ``GET /api/audit`` and
    ``dcaf-like verify`` need it; a store without it keeps no decision records.
    Implement :meth:`record_decisions` and :meth:`decision_records`."""

    ability = "keep the audit trail"
    fix = "subclass AuditTrail and implement record_decisions and decision_records (docs/stores.md)"

    @abstractmethod
    def record_decisions(self, records: Sequence[DecisionRecord]) -> None:
        """Append decision records no save carries (decisions that were refused)."""

    @abstractmethod
    def decision_records(self, conversation_id: str | None = None, limit: int = 100) -> list[DecisionRecord]:
        """The audit trail, newest first: one conversation's records, or every conversation's."""

    async def arecord_decisions(self, records: Sequence[DecisionRecord]) -> None:
        self.record_decisions(records)

    async def adecision_records(
        self, conversation_id: str | None = None, limit: int = 100
    ) -> list[DecisionRecord]:
        return self.decision_records(conversation_id, limit)

    # The tamper-evident trail (ADR 34). A store links each record it appends to the one before, in
    # the write that appends it, so that two workers never fork the chain; these defaults suit a
    # store that keeps no chain of its own (its trail verifies as records written before the chain).
    def audit_trail(self) -> Trail:
        """The whole trail as stored: every record in the order appended, the digests, the head."""
        records = self.decision_records(None, sys.maxsize)
        return Trail(sorted(records, key=lambda r: (r.seq, r.at)))

    def audit_tip(self) -> tuple[ChainHead, AuditDigest | None]:
        """The chain's head and the latest digest (None: none yet): what the next digest follows."""
        return ChainHead(), None

    @property
    def keeps_digests(self) -> bool:
        """Whether this store writes signed digests of its trail (:meth:`append_digest`)."""
        return type(self).append_digest is not AuditTrail.append_digest

    def append_digest(self, digest: AuditDigest) -> bool:
        """Write `digest` unless one with its number exists (another worker wrote it first): False then.
        A store that keeps no digests refuses (:class:`MissingCapability`)."""
        raise MissingCapability(type(self).__name__, "keep signed audit digests", _DIGESTS_FIX)


class WaitingIndex(ConversationStore):
    """A store that indexes the calls waiting for approval, for the inbox (docs/approvals.md, "One
    inbox"). The built-in stores keep it; without it the inbox is refused by name."""

    ability: ClassVar[str] = "list the calls waiting for approval"
    fix: ClassVar[str] = _INBOX_FIX

    # The inbox (docs/approvals.md, "One inbox"): the calls waiting for approval, indexed as each save
    # writes them (:func:`~dcaf_like.application.waiting.index_changes`) and dropped with their
    # conversation, so that reading them costs what they hold, not what every conversation does.
    @property
    def keeps_waiting_index(self) -> bool:
        """Whether this store indexes the calls waiting for approval (:meth:`list_waiting`)."""
        return type(self).list_waiting is not WaitingIndex.list_waiting

    def list_waiting(self) -> list[WaitingEntry]:
        """Every call waiting for approval in this store, in no particular order (the inbox sorts,
        filters and pages them). A store without the index refuses (:class:`MissingCapability`)."""
        raise MissingCapability(type(self).__name__, "list the calls waiting for approval", _INBOX_FIX)

    async def alist_waiting(self) -> list[WaitingEntry]:
        """:meth:`list_waiting` without blocking the event loop."""
        if not self.keeps_waiting_index:
            return self.list_waiting()  # refused at once: nothing to wait for
        return await asyncio.to_thread(self.list_waiting)


class CancelFlags(ConversationStore):
    """A store that keeps cancel requests: a mark per conversation that any worker may set, read by
    the worker running the conversation's turn (docs/runs.md). A store several processes share keeps
    it where they all see it. ``POST /api/conversations/{id}/cancel`` needs it; on a store without it
    a turn is never asked to stop. Implement :meth:`request_cancel` and :meth:`cancel_requested`."""

    ability = "keep cancel requests"
    fix = "subclass CancelFlags and implement request_cancel and cancel_requested (docs/stores.md)"

    @abstractmethod
    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        """Ask the turn running on this conversation (if any, on any worker) to stop."""

    @abstractmethod
    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        """True if a cancel of this conversation was requested at `since` or later."""

    async def arequest_cancel(self, conversation_id: str, *, at: float) -> None:
        self.request_cancel(conversation_id, at=at)

    async def acancel_requested(self, conversation_id: str, *, since: float) -> bool:
        return self.cancel_requested(conversation_id, since=since)


class GrantStore(ConversationStore):
    """A store that keeps standing grants (docs/approvals.md, "Grants"): the approvals given ahead of
    time that every worker's turns read as they begin. The in-memory and SQLite stores keep them;
    ``/api/grants`` on a store without them is refused by name (HTTP 501).
    Implement :meth:`add_grant`, :meth:`revoke_grant` and :meth:`list_grants`."""

    ability = "keep standing grants"
    fix = "subclass GrantStore and implement add_grant, revoke_grant and list_grants (docs/approvals.md)"

    @abstractmethod
    def add_grant(self, grant: Grant) -> None:
        """Keep a new grant."""

    @abstractmethod
    def revoke_grant(self, grant_id: str, *, by: str, at: float) -> Grant | None:
        """Revoke the grant `grant_id` (one revoked already stays as it was): the grant as it is now,
        or None if there is none by that id."""

    @abstractmethod
    def list_grants(self) -> list[Grant]:
        """Every grant kept, expired and revoked ones included, in no particular order."""

    async def alist_grants(self) -> list[Grant]:
        """:meth:`list_grants` without blocking the event loop."""
        return await asyncio.to_thread(self.list_grants)


CapabilityT = TypeVar("CapabilityT", bound=ConversationStore)


def require(store: ConversationStore, capability: type[CapabilityT]) -> CapabilityT:
    """`store` as a `capability` it declares (a subclass of :class:`ConversationStore`); raises
    :class:`~dcaf_like.application.errors.MissingCapability` naming the store and the capability when
    it does not: what an action that needs it calls first."""
    if isinstance(store, capability):
        return store
    named = f"{capability.ability} ({capability.__name__})"
    raise MissingCapability(type(store).__name__, named, capability.fix)


# What a turn asks of a store's capabilities when it has them, and does without when it has not.
def record_decisions(store: ConversationStore, records: Sequence[DecisionRecord]) -> None:
    """Append refused decisions to `store`'s audit trail; nothing for a store that keeps none."""
    if isinstance(store, AuditTrail):
        store.record_decisions(records)


async def arecord_decisions(store: ConversationStore, records: Sequence[DecisionRecord]) -> None:
    """:func:`record_decisions` on the event loop."""
    if isinstance(store, AuditTrail):
        await store.arecord_decisions(records)


def grants_in_force(store: ConversationStore, now: float) -> tuple[Grant, ...]:
    """The grants a turn beginning at `now` may approve calls by; none for a store that keeps none."""
    if not isinstance(store, GrantStore):
        return ()
    return tuple(g for g in store.list_grants() if g.is_active(now))


async def agrants_in_force(store: ConversationStore, now: float) -> tuple[Grant, ...]:
    """:func:`grants_in_force` on the event loop."""
    if not isinstance(store, GrantStore):
        return ()
    return tuple(g for g in await store.alist_grants() if g.is_active(now))


def cancel_requested(store: ConversationStore, conversation_id: str, *, since: float) -> bool:
    """Whether a cancel of the conversation was asked at `since` or later; False for a store that
    keeps no cancel requests (no one can ask)."""
    return isinstance(store, CancelFlags) and store.cancel_requested(conversation_id, since=since)


async def acancel_requested(store: ConversationStore, conversation_id: str, *, since: float) -> bool:
    """:func:`cancel_requested` on the event loop."""
    return isinstance(store, CancelFlags) and await store.acancel_requested(conversation_id, since=since)


class ConversationRepository(Retention, AuditTrail, CancelFlags, WaitingIndex):
    """A store with every capability (:class:`ConversationStore` and :class:`Listing`,
    :class:`Retention`, :class:`AuditTrail`, :class:`CancelFlags`): what the built-in stores are, and
    what a store of your own subclasses to be one. Required: :meth:`get`, :meth:`save`, :meth:`delete`,
    :meth:`list_ids`, :meth:`record_decisions` and :meth:`decision_records`; the rest have defaults.

    Its cancel requests default to this process's memory only (correct for one process); a store
    several processes share overrides :meth:`request_cancel` and :meth:`cancel_requested`."""

    ability = "keep conversations, their list, the audit trail and cancel requests"
    fix = "subclass ConversationRepository"

    def ping(self) -> None:
        """One cheap round trip to the store; this default lists one id."""
        self.list_ids(1)

    def request_cancel(self, conversation_id: str, *, at: float) -> None:
        """Ask the turn running on this conversation to stop (this default: in this process only)."""
        _local_cancels(self)[conversation_id] = at

    def cancel_requested(self, conversation_id: str, *, since: float) -> bool:
        """True if a cancel of this conversation was requested at `since` or later."""
        at = _local_cancels(self).get(conversation_id)
        return at is not None and at >= since


_CANCELS: weakref.WeakKeyDictionary[ConversationRepository, dict[str, float]] = weakref.WeakKeyDictionary()


def _local_cancels(store: ConversationRepository) -> dict[str, float]:
    """The in-process cancel marks of a store that keeps none of its own, kept beside it (never on it)."""
    with _CANCELS_LOCK:
        return _CANCELS.setdefault(store, {})


_CANCELS_LOCK = threading.Lock()


class ToolCancelled(Exception):
    """Raised by :meth:`ToolContext.check_cancelled` in a tool whose run was asked to stop."""


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
    cancel_signal: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

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
    They are kept with the call, as a message's attachments are with it, and shown to the model if its
    runtime takes their kind (:attr:`AgentRuntime.accepts`); otherwise the model reads a note naming
    what was left out. They are kept within :data:`~dcaf_like.domain.MAX_PART_BYTES` each and
    :data:`~dcaf_like.domain.MAX_PARTS_BYTES` in all; one past a limit is left out and named in the
    text (:meth:`within_limits`)."""

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


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """What a synchronous approver is shown about one call: `arguments` as proposed (secret ones
    masked) and `approval_reason`, why it waits (ADR 20)."""

    call_id: str
    tool_name: str
    description: str
    arguments: Mapping[str, Any]
    approval_reason: str
    editable: bool

    @property
    def reason(self) -> str:
        """Deprecated: :attr:`approval_reason`."""
        warnings.warn(
            "PendingApproval.reason is deprecated and goes in the next release; use "
            "PendingApproval.approval_reason",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.approval_reason


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    approved: bool
    reason: str = ""
    edited_arguments: Mapping[str, Any] | None = None


class ApprovalCallback(Protocol):
    """A synchronous approver (a CLI prompt): asked during the run instead of suspending it.
    May be a plain function or a coroutine function."""

    def __call__(self, pending: PendingApproval) -> Any: ...


# -- what the inbound adapters need of an agent ---------------------------------------------------


@runtime_checkable
class ServedAgent(Protocol):
    """An agent as the inbound adapters (the HTTP server, A2A, the terminal chat) use it: turns in,
    typed results out, and what serving it needs besides. :class:`~dcaf_like.Agent` and
    :class:`~dcaf_like.FunctionAgent` are both one."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def repository(self) -> ConversationStore | None:
        """Where its conversations live; None for an agent that keeps none (an agent function): it
        has no conversation routes, no A2A tasks, and takes no store."""

    @property
    def repository_chosen(self) -> bool:
        """Whether its store was chosen (in code, or by :meth:`use_repository`); False: it keeps the
        in-memory store it got by default, and whoever serves it may choose one."""

    @property
    def runtime(self) -> AgentRuntime | None:
        """Its model runtime (a readiness probe looks at it); None for an agent function."""

    @property
    def clock(self) -> Callable[[], float]:
        """Its time, in seconds since the epoch: what its windows are measured by, so an adapter that
        changes a conversation itself (an A2A task canceled) reads the time the agent's turns read."""

    def use_repository(self, repository: ConversationStore | str) -> None:
        """Keep conversations in `repository` (or the store a URL names) from now on; TypeError for
        an agent that keeps none."""

    def add_tracer(self, wrap: Callable[[Tracer], Tracer]) -> None:
        """Wrap the tracer of its turns (``wrap(current) -> new``): how a server's metrics observe them."""

    async def ahandle(self, request: AgentRequest) -> AgentResponse: ...

    def ahandle_stream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]:
        """The turn's events; the last is ``Done`` (with the response) or ``RunFailed``."""

    async def acancel(self, conversation_id: str) -> None:
        """Ask the turn running on the conversation to stop (nothing for an agent that keeps none)."""

    async def aclose(self) -> None:
        """Release what it holds on the running event loop (a server calls this at shutdown): its
        toolsets' sessions, its store's and runtime's asyncio clients (they reopen when used again)."""


@runtime_checkable
class ToolProvider(Protocol):
    """An agent whose tools another protocol may offer (MCP, an A2A card's skills), each call still
    judged by the agent's approval policy. An :class:`~dcaf_like.Agent` is one; an agent function,
    which has no tools of its own, is not."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def approval_policy(self) -> ApprovalPolicy: ...

    @property
    def deps(self) -> Any:
        """The dependencies its tools get (``ToolContext.deps``)."""

    @property
    def tools(self) -> Sequence[ExecutableTool]:
        """The tools it was given (its toolsets' tools are known only once loaded: :meth:`atools`)."""

    async def atools(self) -> list[ExecutableTool]:
        """Every tool the model is offered, by the name it is offered under (toolsets loaded first)."""
