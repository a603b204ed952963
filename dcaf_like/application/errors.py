"""Typed errors of the application layer. Adapters map them to HTTP statuses or CLI messages."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import suppress

from dcaf_like.domain.audit import DecisionRecord
from dcaf_like.domain.context import scrub
from dcaf_like.domain.errors import DomainError


class ApplicationError(Exception):
    """Base of the errors a use case reports."""


class InvalidRequest(ApplicationError):
    """The caller sent something malformed. `field` names where, as a path like ``messages[2].data``."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class UnsupportedPart(ApplicationError):
    """The runtime cannot take a part of the user's message (an image, a file): the turn is refused
    before anything is saved or sent. `index` is the part's place among the message's attachments;
    `reason` is the runtime's (``AgentRuntime.refused_part``), by default that it takes no such kind."""

    def __init__(self, index: int, part: str, kind: str, runtime: str, reason: str | None = None) -> None:
        self.index = index
        self.runtime = runtime
        self.reason = reason or f"it takes no {kind} parts"
        super().__init__(
            f"attachment {index} ({part}): the runtime {runtime!r} cannot take it: {self.reason} "
            "(send it as the runtime takes it, to an agent whose runtime does, or leave it out)"
        )


class InvalidToolArguments(ApplicationError):
    """Arguments that do not satisfy a tool's schema."""

    def __init__(self, tool_name: str, detail: str) -> None:
        self.tool_name = tool_name
        self.detail = detail
        super().__init__(f"invalid arguments for tool {tool_name!r}: {detail}")


class ToolDefinitionError(ApplicationError, TypeError):
    """A tool that cannot be described to a model, found when it is defined. `parameter` names the
    argument at fault when one is (None for the tool as a whole)."""

    def __init__(self, tool_name: str, parameter: str | None, problem: str) -> None:
        self.tool_name = tool_name
        self.parameter = parameter
        self.problem = problem
        where = f"tool {tool_name!r}" + (f", parameter {parameter!r}" if parameter else "")
        super().__init__(f"{where}: {problem}")


class UnknownTool(ApplicationError):
    def __init__(self, tool_name: str, known: list[str]) -> None:
        self.tool_name = tool_name
        self.known = known
        super().__init__(f"unknown tool {tool_name!r}; this agent has: {', '.join(known) or 'no tools'}")


class ConcurrencyConflict(ApplicationError):
    """A save lost a race: the stored conversation changed since it was read. Nothing was written."""

    def __init__(self, conversation_id: str, expected_version: int, actual_version: int | None) -> None:
        self.conversation_id = conversation_id
        self.expected_version = expected_version
        self.actual_version = actual_version
        super().__init__(
            f"conversation {conversation_id} changed concurrently "
            f"(expected version {expected_version}, found {actual_version}); retry with its latest state"
        )


class NotStorable(InvalidRequest):
    """The request carries a value no conversation can keep (a number that is not finite): HTTP 422
    naming where, as a body of the wrong shape is."""


class MissingScope(ApplicationError):
    """The caller's API key lacks a scope the action needs (HTTP 403 ``missing_scope``). `refused`: the
    audit records of the decisions it refuses, for the entrance to append to the trail."""

    def __init__(self, scope: str, doing: str, refused: Sequence[DecisionRecord] = ()) -> None:
        super().__init__(f"this API key may not {doing}: it needs the {scope!r} scope")
        self.scope = scope
        self.refused = tuple(refused)


class ConversationNotFound(ApplicationError):
    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"no conversation {conversation_id}")


class MissingCapability(ApplicationError):
    """A store lacks what an action needs (a store of your own that keeps no audit digests, say):
    refused where it is needed, naming the store and the capability, rather than failing later."""

    def __init__(self, store: str, capability: str, fix: str) -> None:
        self.store = store
        self.capability = capability
        super().__init__(f"{store} cannot {capability}: {fix}")


class StoreUnavailable(ApplicationError):
    """The conversation store could not be reached or answered with an error."""


class StoredConversationUnreadable(StoreUnavailable):
    """The store answered, but one conversation's record cannot be read back (damaged, or written by
    an unknown format). The others may be fine: a listing reports this one and goes on."""

    def __init__(self, conversation_id: str, reason: str) -> None:
        self.conversation_id = conversation_id
        self.reason = reason
        super().__init__(f"stored conversation {conversation_id} cannot be read ({reason})")


class RuntimeNotConfigured(ApplicationError):
    """An agent was built without a model runtime, or with a runtime name nobody provides."""


class ModelError(ApplicationError):
    """The model runtime failed. `retryable` when trying again (or another runtime) may succeed.

    Adapters raise subclasses with the provider's own words in the message; credentials never.
    """

    retryable: bool = False

    def __init__(self, message: str, *, runtime: str = "", retryable: bool | None = None) -> None:
        self.runtime = runtime
        if retryable is not None:
            self.retryable = retryable
        super().__init__(message)


class ModelTimeout(ModelError):
    retryable = True


class ModelRateLimited(ModelError):
    retryable = True


class ModelAccessDenied(ModelError):
    pass


class ModelRequestInvalid(ModelError):
    pass


class ToolsetUnavailable(ApplicationError):
    """A source of tools the agent needs (an MCP server) could not be reached or started. Raised before
    the model is called; `toolset` names the source."""

    def __init__(self, toolset: str, reason: str) -> None:
        self.toolset = toolset
        self.reason = reason
        super().__init__(f"toolset {toolset!r} is unavailable: {reason}")


class HookFailed(ApplicationError):
    """A hook (``Agent(hooks=[...])``) raised: the turn stopped there, failed closed (no tool ran
    after it). `hook` and `point` name it and where (``before_tool``...); `error` is what it raised,
    also the exception's ``__cause__``. The message names its class only: a hook's own words may hold
    anything, and go to the log, not to a client."""

    def __init__(self, hook: str, point: str, error: Exception) -> None:
        self.hook = hook
        self.point = point
        self.error = error
        what = type(error).__name__
        super().__init__(
            f"the hook {hook!r} failed in {point} ({what}); the turn stopped, no tool ran after it"
        )


def scrub_exception(exc: BaseException, secrets: Collection[str]) -> None:
    """Remove each of `secrets` from the text of `exc` and of the exceptions it was raised from (its
    arguments and the message attributes adapters read), so no report, log line or traceback of it
    shows one. The exception is changed in place: it is the one already on its way up."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.args = tuple(scrub(a, secrets) if isinstance(a, str) else a for a in current.args)
        for name in ("message", "reason", "detail"):
            value = getattr(current, name, None)
            if isinstance(value, str):
                with suppress(AttributeError):  # a read-only property
                    setattr(current, name, scrub(value, secrets))
        current = current.__cause__ or current.__context__


#: What the caller caused (HTTP 4xx): a refusal, counted apart from a turn that failed.
REFUSALS: tuple[type[Exception], ...] = (
    DomainError,
    InvalidRequest,
    MissingScope,
    InvalidToolArguments,
    UnsupportedPart,
    UnknownTool,
    ConcurrencyConflict,
    ConversationNotFound,
)
