"""Tools: plain typed functions an agent may call, each with its schema and its approval flag."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import inspect
import json
import os
import sys
import typing
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from dcaf_like.application.messages import ToolSpec
from dcaf_like.application.ports import ToolContext, ToolOutput
from dcaf_like.concurrency.threads import in_thread
from dcaf_like.tools._injected import IDENTITY_OR_NONE, injected_kind

if TYPE_CHECKING:
    from dcaf_like.domain import Approvers
    from dcaf_like.tools.schema import ArgumentSchema

_NO_SECRETS: frozenset[str] = frozenset()
#: Seconds a tool's preview may take unless it says (``@tool(preview=..., preview_timeout=...)``).
DEFAULT_PREVIEW_TIMEOUT = 10.0


class Unauthenticated(PermissionError):
    """A tool that takes an :class:`~dcaf_like.Identity` was called in a run nobody authenticated:
    the call fails rather than run for an unknown caller."""


class UndocumentedToolWarning(UserWarning):
    """A tool that needs approval has no docstring and no ``description=``: whoever approves its calls
    sees only its name, and the model is told no more."""


class Tool:
    """A function the agent can call.

    ``requires_approval`` defaults to True: a tool runs without a human only when its author says so.
    ``editable`` lets the approver change the arguments before approving (validated against the schema).
    ``secret`` names arguments whose values responses, logs and approvers see masked as ``***``; the
    tool still gets them as the model proposed them (an approver can replace one, never read it).
    ``schema`` is a JSON schema dict or a pydantic model; without it the signature is the schema.
    Parameters annotated ``Session``, ``PlatformContext``, ``ToolContext`` (or ``ToolContext[MyDeps]``),
    ``Identity`` or ``Identity | None`` are filled in by the framework and hidden from the model.
    ``Identity`` is who the server authenticated (never something the client wrote): a bare
    ``Identity`` parameter fails the call when nobody was (no API keys), ``Identity | None`` gets None.
    ``companions`` are tools an agent given this one gets too (a remote agent's tool comes with the
    approval-gated tool that forwards decisions to it).
    The function returns its result (text, or anything :func:`render` writes as text), or a
    :class:`~dcaf_like.application.ports.ToolOutput` whose images and files the model is shown besides
    the text, as an MCP tool's.
    ``approvers`` says who must approve a call of it (``approvers(2, "sre")``: two distinct members
    of the group ``sre``, not the requester; docs/approvals.md, "Approvals by teams").
    ``risk`` says what a call may do to the world: ``"read"``, ``"reversible"``, ``"irreversible"``
    or a level of your own; approvers see it on every call, and an irreversible call is never
    approved in bulk on the chat page without its own confirmation (docs/approvals.md, "What the
    approver sees").
    ``preview`` is a read-only function of the same arguments (and injected parameters) returning what
    a call would do: a unified diff, JSON (a dict or a list) or text. It runs when the call is
    proposed, within ``preview_timeout`` seconds, never as an execution; its approver sees it, and a
    decision that echoes another preview than the call's is refused (ADR 38). With ``recheck=True``
    the preview runs again just before the call would run: if it says something else, the call is not
    run and waits again for an approval of the new preview. ``recheck`` with ``background`` is
    refused (ValueError): the check would run when the call is queued, not when it runs.
    ``timeout`` is how many seconds a run may take: past it the model gets an error naming the limit;
    an ``async def`` tool is cancelled, a plain ``def`` one (in a thread, which cannot be stopped) is
    left to finish and its late result is logged, never used.
    ``background`` sends its approved calls to the agent's executor (a job engine's worker) instead
    of running them in the turn: the turn does not wait for them (docs/runs.md, "Tools on a job
    engine").
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool = True,
        editable: bool = False,
        schema: Mapping[str, Any] | type | None = None,
        secret: Iterable[str] = (),
        timeout: float | None = None,
        approvers: Approvers | None = None,
        risk: str | None = None,
        preview: Callable[..., Any] | None = None,
        preview_timeout: float = DEFAULT_PREVIEW_TIMEOUT,
        recheck: bool = False,
        background: bool = False,
    ) -> None:
        from dcaf_like.domain.risk import checked_risk
        from dcaf_like.tools import schema as _schema

        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ValueError(f"tool {name or func.__name__!r}: timeout must be a positive number of seconds")
        self.timeout: float | None = timeout
        #: Its approved calls run on the agent's executor, not in the turn.
        self.background = background
        self.func = func
        self.name = name or func.__name__
        self.requires_approval = requires_approval
        if approvers is not None and not requires_approval:
            raise ValueError(
                f"tool {self.name!r}: approvers= names who approves a tool that requires approval"
            )
        #: Who must approve a call of it (``approvers(2, "sre")``); None: today's one approver.
        self.approvers: Approvers | None = approvers
        #: What a call of it may do: ``"read"``, ``"reversible"``, ``"irreversible"`` or a level of
        #: your own (None: undeclared); shown to whoever approves it.
        self.risk: str | None = None if risk is None else checked_risk(risk)
        self.editable = editable
        self.companions: tuple[Tool, ...] = ()
        if not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"tool name {self.name!r} may hold only letters, digits, '_' and '-'")
        facts = _facts(func)
        self.description = description or facts.summary or self.name.replace("_", " ")
        self.is_async = facts.is_async
        self._arguments: ArgumentSchema
        if schema is None:
            self._arguments = _schema.from_signature(self.name, func)
        elif isinstance(schema, Mapping):
            self._arguments = _schema.from_dict(self.name, schema)
        elif isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            self._arguments = _schema.from_model(self.name, schema, func)
        else:
            raise TypeError(f"tool {self.name!r}: schema must be a dict or a pydantic model, not {schema!r}")
        self._injected = facts.injected
        self.secret_arguments: frozenset[str] = _NO_SECRETS
        if secret:
            self.secret_arguments = frozenset([secret] if isinstance(secret, str) else secret)
            unknown = self.secret_arguments.difference(self._arguments.json_schema.get("properties", ()))
            if unknown:
                listed = ", ".join(sorted(unknown))
                raise ValueError(f"tool {self.name!r}: no argument {listed} to mark secret")
        #: What a call would do, run when it is proposed and shown to its approver (None: no preview).
        self.preview: Tool | None = None
        #: Run the preview again just before a call runs: a call whose preview changed since it was
        #: approved is not run, and waits again with the new one (Terraform's stale plan).
        self.recheck = recheck
        if recheck and preview is None:
            raise ValueError(f"tool {self.name!r}: recheck=True runs the preview again; give preview=")
        if recheck and background:
            raise ValueError(
                f"tool {self.name!r}: recheck=True cannot be combined with background=True: the preview would"
                " run again when the call is queued, not just before a worker runs it"
            )
        if preview is not None:
            if not requires_approval:
                raise ValueError(f"tool {self.name!r}: a preview is shown to approvers; this tool needs none")
            if not (isinstance(preview_timeout, int | float) and preview_timeout > 0):
                raise ValueError(f"tool {self.name!r}: preview_timeout must be a positive number of seconds")
            self.preview = Tool(
                preview,
                name=f"{self.name}_preview",
                description=f"the preview of {self.name}",
                requires_approval=False,
                schema=self.input_schema,  # the tool's own: its arguments are validated once
                timeout=preview_timeout,
            )
        self.__doc__ = func.__doc__
        self.__name__ = self.name
        self.__wrapped__ = func
        if requires_approval and not description and not facts.summary:
            warnings.warn(
                f"tool {self.name!r} requires approval but has no docstring (or description=): the approver "
                f"will see no description of it, only {self.description!r}",
                UndocumentedToolWarning,
                stacklevel=_outside_the_package(),
            )

    @property
    def input_schema(self) -> dict[str, Any]:
        return self._arguments.json_schema

    @property
    def schema(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._arguments.validate(arguments)

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext[Any]) -> str | ToolOutput:
        if self.is_async:
            from dcaf_like.concurrency.bridges import run_sync

            return run_sync(self.ainvoke(arguments, context))
        return render(self.func(**self._kwargs(arguments, context)))

    async def ainvoke(self, arguments: Mapping[str, Any], context: ToolContext[Any]) -> str | ToolOutput:
        kwargs = self._kwargs(arguments, context)
        if self.is_async:
            return render(await self.func(**kwargs))
        return render(await in_thread(self.func, **kwargs))

    def _kwargs(self, arguments: Mapping[str, Any], context: ToolContext[Any]) -> dict[str, Any]:
        kwargs = self._arguments.bind(arguments)
        if not self._injected:
            return kwargs
        values = {
            "session": context.session,
            "platform_context": context.platform_context,
            "context": context,
            "identity": context.identity,
            IDENTITY_OR_NONE: context.identity,
        }
        for param, kind in self._injected.items():
            if kind == "identity" and context.identity is None:
                raise Unauthenticated(
                    f"tool {self.name!r} needs an authenticated caller (its parameter {param!r} is an "
                    "Identity) and nobody was authenticated: serve it with API keys (DCAF_API_KEYS), "
                    "or annotate the parameter 'Identity | None' to run for anonymous callers too"
                )
            kwargs[param] = values[kind]
        return kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, as if it were not a tool (handy in tests)."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        approval = "requires approval" if self.requires_approval else "runs without approval"
        return f"<Tool {self.name}: {approval}>"


@overload
def tool(func: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = True,
    editable: bool = False,
    schema: Mapping[str, Any] | type | None = None,
    secret: Iterable[str] = (),
    timeout: float | None = None,
    approvers: Approvers | None = None,
    risk: str | None = None,
    preview: Callable[..., Any] | None = None,
    preview_timeout: float = DEFAULT_PREVIEW_TIMEOUT,
    recheck: bool = False,
    background: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = True,
    editable: bool = False,
    schema: Mapping[str, Any] | type | None = None,
    secret: Iterable[str] = (),
    timeout: float | None = None,
    approvers: Approvers | None = None,
    risk: str | None = None,
    preview: Callable[..., Any] | None = None,
    preview_timeout: float = DEFAULT_PREVIEW_TIMEOUT,
    recheck: bool = False,
    background: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a :class:`Tool`: ``@tool`` or ``@tool(requires_approval=False, ...)``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            requires_approval=requires_approval,
            editable=editable,
            schema=schema,
            secret=secret,
            timeout=timeout,
            approvers=approvers,
            risk=risk,
            preview=preview,
            preview_timeout=preview_timeout,
            recheck=recheck,
            background=background,
        )

    return wrap(func) if func is not None else wrap


def create_tool(
    func: Tool | Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = True,
    editable: bool = False,
    schema: Mapping[str, Any] | type | None = None,
    secret: Iterable[str] = (),
    timeout: float | None = None,
) -> Tool:
    """A :class:`Tool` of `func` without the decorator (the seed's ``create_tool(delete_pod)``): a
    function becomes a tool with these options; a tool is returned as it is (give no options: to
    change one, build the tool from its function, ``create_tool(t.func, ...)``)."""
    if isinstance(func, Tool):
        given = (name, description, schema, timeout) != (None, None, None, None) or secret
        if given or not requires_approval or editable:
            raise TypeError(f"{func.name!r} is already a tool; build it again from its function to change it")
        return func
    return Tool(
        func,
        name=name,
        description=description,
        requires_approval=requires_approval,
        editable=editable,
        schema=schema,
        secret=secret,
        timeout=timeout,
    )


def as_tool(value: Tool | Callable[..., Any]) -> Tool:
    """A Tool as is; a plain function becomes a tool that requires approval."""
    return value if isinstance(value, Tool) else Tool(value)


def render(value: Any) -> str | ToolOutput:
    """A tool's return value as the text the model reads, or a :class:`ToolOutput` as it is (its
    images and files within their limits, :meth:`ToolOutput.within_limits`).

    ``None`` is empty; text is itself; bytes are decoded as UTF-8 (an invalid byte becomes U+FFFD); an
    enum member is its value; a pydantic model is its ``model_dump_json()``; anything else is JSON,
    where a dataclass is a dict, a set a list, a date or time its ISO form, a nested model its JSON
    form, and what JSON cannot hold its ``str()``. A value JSON refuses (a circular list) is its repr.
    """
    if value is None:
        return ""
    if isinstance(value, ToolOutput):
        return value.within_limits()
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    dump = getattr(value, "model_dump_json", None)
    if callable(dump) and not isinstance(value, type):
        return str(dump())
    try:
        return json.dumps(_jsonable(value), ensure_ascii=False, default=_jsonable)
    except (TypeError, ValueError):
        return repr(value)


def _jsonable(value: Any) -> Any:
    """`value` in a form ``json.dumps`` takes, for the kinds it does not know."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    if isinstance(value, str | int | float | bool | list | tuple | dict) or value is None:
        return value
    return str(value)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _outside_the_package() -> int:
    """The ``stacklevel`` of the first caller outside dcaf_like (the line defining the tool), counted
    from the function that calls this one."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


@dataclass(frozen=True, slots=True)
class _Facts:
    """What a tool reads off its function: the same every time, so read once per function."""

    summary: str
    is_async: bool
    injected: dict[str, str]


_FACTS: weakref.WeakKeyDictionary[Callable[..., Any], _Facts] = weakref.WeakKeyDictionary()


def _facts(func: Callable[..., Any]) -> _Facts:
    try:
        return _FACTS[func]
    except (KeyError, TypeError):
        pass
    hints = typing.get_type_hints(func)
    facts = _Facts(
        summary=_first_paragraph(func),
        is_async=inspect.iscoroutinefunction(func),
        injected={
            p.name: kind
            for p in inspect.signature(func).parameters.values()
            if (kind := injected_kind(hints.get(p.name))) is not None
        },
    )
    with contextlib.suppress(TypeError):  # not weakly referenceable: read it each time
        _FACTS[func] = facts
    return facts


def _first_paragraph(func: Callable[..., Any]) -> str:
    doc = inspect.getdoc(func) or ""
    return doc.split("\n\n", 1)[0].strip().replace("\n", " ")
