"""FakeRuntime: answers each model call with the next step of a script."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcaf_like.application.errors import ModelError
from dcaf_like.application.messages import (
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ModelToolCall,
    ReasoningDelta,
    TextDelta,
    Usage,
)
from dcaf_like.application.ports import AgentRuntime


class ScriptExhausted(ModelError):
    """The runtime was called more times than its script has steps."""


@dataclass(frozen=True)
class Step:
    """One scripted model answer. `chunks` is how its text streams; `error` is raised instead."""

    text: str = ""
    calls: tuple[ModelToolCall, ...] = ()
    chunks: tuple[str, ...] | None = None
    reasoning: str = ""
    usage: Usage = field(default_factory=lambda: Usage(10, 5))
    error: Exception | None = None

    def response(self) -> ModelResponse:
        return ModelResponse(
            text=self.text,
            tool_calls=self.calls,
            usage=self.usage,
            stop_reason="tool_use" if self.calls else "end_turn",
            reasoning=self.reasoning,
            model="fake",
        )


_ids = itertools.count(1)


def reply(text: str, *, chunks: Sequence[str] | None = None, reasoning: str = "") -> Step:
    """The model answers with text. `chunks` (joined, they must equal `text`) sets how it streams."""
    if chunks is not None and "".join(chunks) != text:
        raise ValueError("the chunks of a reply must add up to its text")
    return Step(text=text, chunks=None if chunks is None else tuple(chunks), reasoning=reasoning)


def tool_call(name: str, arguments: dict[str, Any] | None = None, /, **kwargs: Any) -> ModelToolCall:
    """A call the model proposes: ``tool_call("delete_pod", name="web-1")``."""
    return ModelToolCall(f"fake_call_{next(_ids)}", name, {**(arguments or {}), **kwargs})


def tool_calls(*calls: ModelToolCall | str, text: str = "") -> Step:
    """The model proposes these calls (a bare name means no arguments), with optional text."""
    return Step(text=text, calls=tuple(tool_call(c) if isinstance(c, str) else c for c in calls))


def fail(error: Exception) -> Step:
    """The model call raises `error` (e.g. a ModelRateLimited, to test error handling)."""
    return Step(error=error)


ScriptItem = Step | ModelToolCall | str | Callable[[ModelRequest], ModelResponse]


#: The most steps a script may have: one built from an endless iterator is refused, not read for ever.
MAX_SCRIPT_STEPS = 100_000


def _finite(script: Iterable[ScriptItem]) -> list[ScriptItem]:
    steps = list(itertools.islice(script, MAX_SCRIPT_STEPS + 1))
    if len(steps) > MAX_SCRIPT_STEPS:
        raise ValueError(
            f"FakeRuntime takes a finite script (at most {MAX_SCRIPT_STEPS} steps), answered in order; "
            "for an answer that depends on the request, the same on every call and every worker, use "
            "RulesRuntime(answer)"
        )
    return steps


def _answer(item: ScriptItem | ModelResponse, request: ModelRequest) -> Step | ModelResponse:
    if isinstance(item, ModelResponse):
        return item
    if isinstance(item, str):
        return reply(item)
    if isinstance(item, ModelToolCall):
        return tool_calls(item)
    if isinstance(item, Step):
        if item.error is not None:
            raise item.error
        return item
    return item(request)


class FakeRuntime(AgentRuntime):
    """Scripted per model call, in order. Each item is a :class:`Step`, a bare string (a reply), a
    :class:`ModelToolCall` (one call), or a function of the request (for answers that depend on it).
    Every request is kept in :attr:`requests` for assertions. `accepts` names the kinds of message
    parts it takes besides text (``{"image", "file"}``); none by default, as a text model."""

    name = "fake"

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        context_window: int | None = None,
        accepts: Iterable[str] = (),
    ) -> None:
        self.context_window = context_window
        self.accepts = frozenset(accepts)
        self.script: list[ScriptItem] = _finite(script)
        self.requests: list[ModelRequest] = []

    def then(self, *items: ScriptItem) -> FakeRuntime:
        self.script.extend(items)
        return self

    @property
    def remaining(self) -> int:
        return len(self.script) - len(self.requests)

    def _next(self, request: ModelRequest) -> Step | ModelResponse:
        index = len(self.requests)
        self.requests.append(request)
        if index >= len(self.script):
            raise ScriptExhausted(
                f"FakeRuntime was called {index + 1} times but its script has {len(self.script)} steps",
                runtime=self.name,
            )
        return _answer(self.script[index], request)

    def invoke(self, request: ModelRequest) -> ModelResponse:
        step = self._next(request)
        return step.response() if isinstance(step, Step) else step

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        step = self._next(request)
        if isinstance(step, ModelResponse):
            if step.text:
                yield TextDelta(step.text)
            yield ModelCompleted(step)
            return
        if step.reasoning:
            yield ReasoningDelta(step.reasoning)
        for chunk in step.chunks if step.chunks is not None else ((step.text,) if step.text else ()):
            yield TextDelta(chunk)
        yield ModelCompleted(step.response())


class RulesRuntime(FakeRuntime):
    """Answers every model call with ``answer(request)``: a :class:`Step`, a bare string (a reply), a
    :class:`ModelToolCall` or a ``ModelResponse``, from the request alone. It keeps no place in a
    script, so it answers alike in every worker and process (``dcaf-like serve --workers 2``) and
    after a restart, where each process's FakeRuntime would start its script again::

        def answer(request: ModelRequest) -> ScriptItem:
            last = request.messages[-1]
            if isinstance(last, ToolResult):
                return f"Done: {last.content}"
            return tool_call("delete_pod", name="web-1") if "delete" in last.text else "Nothing to do."

        agent = Agent(tools=[delete_pod], runtime=RulesRuntime(answer))
    """

    name = "rules"

    def __init__(
        self,
        answer: Callable[[ModelRequest], ScriptItem | ModelResponse],
        *,
        context_window: int | None = None,
        accepts: Iterable[str] = (),
    ) -> None:
        super().__init__((), context_window=context_window, accepts=accepts)
        self.answer = answer

    @property
    def remaining(self) -> int:
        return MAX_SCRIPT_STEPS  # it never runs out

    def _next(self, request: ModelRequest) -> Step | ModelResponse:
        self.requests.append(request)
        return _answer(self.answer(request), request)
