"""Hooks: a team's own code around each model call and each tool run, ``Agent(hooks=[...])``.

A hook is an object with any of :class:`Hook`'s methods (subclass it, or not), each sync or async.
The turn (:mod:`dcaf_like.application.turn`) says when they are called, as an effect like any other;
the one driver calls them in the order the agent was given them. ADR 18 says why objects, not
functions registered per event.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from dcaf_like.application.errors import HookFailed
from dcaf_like.application.messages import ModelRequest, ModelResponse
from dcaf_like.concurrency.bridges import resolve, resolve_sync
from dcaf_like.domain import ToolCall

logger = logging.getLogger("dcaf_like.hooks")

#: Why the model is called: ``"summary"`` for the call that writes a context window's summary,
#: ``"turn"`` for every other (a hook's :attr:`HookContext.purpose`, a model span's ``dcaf.purpose``).
Purpose = Literal["turn", "summary"]


@dataclass(frozen=True, slots=True)
class HookContext:
    """What every hook method is told of the turn: the agent, the conversation and its platform
    context without credentials (read-only), and, at ``before_model`` / ``after_model``, why the model
    is called: ``"summary"`` for the call that writes a context window's summary (its request is the
    summary's instructions and the conversation's older messages as text; its answer is stored as the
    summary and proposes no call), ``"turn"`` for every other call and at every other point."""

    agent: str
    conversation_id: str
    platform_context: Mapping[str, Any]
    purpose: Purpose = "turn"


@dataclass(frozen=True, slots=True)
class ToolCallInfo:
    """A tool call as a hook sees it: approved (``before_tool``), or ``executed`` / ``failed``
    (``after_tool``, with its `output` or `error`). Its `arguments` are the ones it runs with, secret
    ones masked; each read is a fresh copy, so a hook can change nothing that runs."""

    id: str
    name: str
    arguments_json: str
    status: str
    decided_by: str | None = None
    output: str | None = None
    error: str | None = None

    @property
    def arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = json.loads(self.arguments_json)
        return arguments

    @classmethod
    def of(cls, call: ToolCall) -> ToolCallInfo:
        return cls(
            id=call.id.value,
            name=call.name,
            arguments_json=call.shown_json(call.effective_input),
            status=str(call.status),
            decided_by=call.decided_by,
            output=call.result,
            error=call.error,
        )


@dataclass(frozen=True, slots=True)
class Veto:
    """What ``before_tool`` returns to stop an approved call: it does not run, and the model reads
    that the hook refused it, and `reason`."""

    reason: str


class Hook:
    """The methods a hook may have; each does nothing here. Override those you need, sync or async
    (``async def``). A method that raises fails the turn closed: no tool runs after it, the error
    (:class:`~dcaf_like.application.errors.HookFailed`) names the hook, and what happened before is
    saved. `name` names the hook in errors and refusals (by default its class's name)."""

    name: str = ""

    def before_model(
        self, context: HookContext, request: ModelRequest
    ) -> ModelRequest | Awaitable[ModelRequest | None] | None:
        """Before each model call of the turn, with what the model will read; the call that writes a
        context window's summary too (``context.purpose == "summary"``). Return a request to send
        instead (a redacted one, one with a runbook added); the next hook sees it. None sends it as
        it is."""

    def after_model(
        self, context: HookContext, response: ModelResponse
    ) -> ModelResponse | Awaitable[ModelResponse | None] | None:
        """After each model call (a summary's too), with its answer, before any call it proposes is
        looked at. Return an answer to take instead (its text rewritten, say); the next hook sees it.
        A call it proposes goes through the approval gate as any proposal: no hook approves one."""

    def before_tool(self, context: HookContext, call: ToolCallInfo) -> Veto | Awaitable[Veto | None] | None:
        """Before an approved call runs (after the approval gate: a hook sees only calls a human or
        the policy let run). Return a :class:`Veto` to stop it; None lets it run."""

    def after_tool(self, context: HookContext, call: ToolCallInfo) -> Awaitable[None] | None:
        """After a call ran: `call.status` is ``executed`` (`call.output`) or ``failed`` (`call.error`)."""

    def on_error(
        self, context: HookContext, error: Exception
    ) -> FallbackAnswer | Awaitable[FallbackAnswer | None] | None:
        """The turn failed with `error` (a model's, a store's, a hook's). What it raises is logged and
        does not replace `error`. Return a :class:`FallbackAnswer` to answer the user with it instead, when
        the model failed (a :class:`~dcaf_like.application.errors.ModelError`); a refusal (a forged
        approval, a missing scope) and any other failure stay failures, whatever a hook returns."""


POINTS = ("before_model", "after_model", "before_tool", "after_tool", "on_error")


@dataclass(frozen=True, slots=True)
class FallbackAnswer:
    """What ``on_error`` returns to answer the user when the model failed: the turn ends with `text`
    as the assistant's answer (``stop_reason: "fallback"``), saved like any, and the next turn goes
    on."""

    text: str


@dataclass(frozen=True, slots=True)
class Rewritten:
    """The request or answer hooks replaced at a model call (``before_model``, ``after_model``), and
    the names of the hooks that did, in order (the turn's span records them)."""

    value: Any
    by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Refused:
    """A hook's veto of a call, as the driver answers the turn: which hook, and why."""

    hook: str
    reason: str


Method = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Hooks:
    """An agent's hooks by point: the methods they implement, with the name of each hook, in the
    order the hooks were given. A point no hook implements is empty, and the turn skips it."""

    before_model: tuple[tuple[str, Method], ...] = ()
    after_model: tuple[tuple[str, Method], ...] = ()
    before_tool: tuple[tuple[str, Method], ...] = ()
    after_tool: tuple[tuple[str, Method], ...] = ()
    on_error: tuple[tuple[str, Method], ...] = ()

    @classmethod
    def of(cls, hooks: Sequence[object]) -> Hooks:
        if not hooks:
            return NO_HOOKS
        points: dict[str, list[tuple[str, Method]]] = {point: [] for point in POINTS}
        for hook in hooks:
            name = getattr(hook, "name", "") or type(hook).__name__
            found = False
            for point in POINTS:
                method = getattr(hook, point, None)
                if method is None or getattr(type(hook), point, None) is getattr(Hook, point):
                    continue  # absent, or Hook's own, which does nothing
                if not callable(method):
                    raise TypeError(f"hook {name!r}: {point} is not a method")
                points[point].append((name, method))
                found = True
            if not found:
                raise TypeError(f"hook {name!r} has none of the methods of a hook: {', '.join(POINTS)}")
        return cls(**{point: tuple(methods) for point, methods in points.items()})

    async def call(
        self, point: str, arguments: tuple[Any, ...], *, blocking: bool
    ) -> Refused | HookFailed | Rewritten | None:
        """Call the hooks at `point` in order: the first veto (``before_tool``; the hooks after it are
        not asked), the failure of the first that raised (none after it is called), what they
        rewrote (``before_model``: a request, ``after_model``: an answer; each hook is given the one
        before it returned), or None."""
        rewrites = _REWRITES.get(point)
        given, rewritten_by = list(arguments), []
        for name, method in getattr(self, point):
            try:
                value = method(*given)
                answer = resolve_sync(value) if blocking else await resolve(value)
            except Exception as exc:
                return _failed(name, point, exc)
            if answer is None:
                continue
            if point == "before_tool" and isinstance(answer, Veto):
                return Refused(name, answer.reason)
            if rewrites is not None and isinstance(answer, rewrites):
                given[1] = answer
                rewritten_by.append(name)
                continue
            if rewrites is not None:
                wanted = f"a {rewrites.__name__} or None"
            else:
                wanted = "a Veto or None" if point == "before_tool" else "None"
            return _failed(name, point, TypeError(f"it returned {type(answer).__name__}, not {wanted}"))
        return Rewritten(given[1], tuple(rewritten_by)) if rewritten_by else None

    async def failed(
        self, context: HookContext, error: Exception, *, blocking: bool
    ) -> FallbackAnswer | None:
        """Tell every ``on_error`` hook that the turn failed; a failure of one is logged, and the
        others are still told. The first :class:`FallbackAnswer` one returned, if any."""
        fallback: FallbackAnswer | None = None
        for name, method in self.on_error:
            try:
                value = method(context, error)
                answer = resolve_sync(value) if blocking else await resolve(value)
            except Exception:
                logger.exception("the hook %r failed in on_error (the turn had failed already)", name)
                continue
            if isinstance(answer, FallbackAnswer) and fallback is None:
                fallback = answer
            elif answer is not None and not isinstance(answer, FallbackAnswer):
                logger.warning(
                    "the hook %r returned %s from on_error, not a FallbackAnswer or None",
                    name,
                    type(answer).__name__,
                )
        return fallback


NO_HOOKS = Hooks()

#: What a hook may return instead of what it was given, at the points that allow it.
_REWRITES: dict[str, type] = {"before_model": ModelRequest, "after_model": ModelResponse}


def hook_context(agent: str, conversation_id: str, public_context: Mapping[str, Any]) -> HookContext:
    return HookContext(agent, conversation_id, MappingProxyType(dict(public_context)))


def _failed(name: str, point: str, exc: Exception) -> HookFailed:
    failure = HookFailed(name, point, exc)
    failure.__cause__ = exc
    return failure
