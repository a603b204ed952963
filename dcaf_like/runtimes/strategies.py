"""Runtimes made of runtimes: try the next when one fails (fallback), or pick one per request (routing).

Both are ordinary :class:`AgentRuntime`s, so the agent loop, the approval gate and the events do not
change; ``Agent(runtime=FallbackRuntime(["bedrock:...", "openai:..."]))`` is all it takes. Each
response says which of its runtimes answered (``ModelResponse.runtime``): the agent puts it in the
response's meta, the stored message and the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import replace

from dcaf_like.application.errors import ModelError, RuntimeNotConfigured
from dcaf_like.application.messages import (
    NO_SETTINGS,
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
)
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.domain.attachment import Attachment

logger = logging.getLogger("dcaf_like.runtimes")


def _smallest_window(runtimes: Sequence[AgentRuntime]) -> int | None:
    """A request may go to any of them: it must fit the smallest window known."""
    windows = [r.context_window for r in runtimes if r.context_window is not None]
    return min(windows) if windows else None


def _retryable(error: ModelError) -> bool:
    return error.retryable


def _answered(runtime: AgentRuntime, response: ModelResponse) -> ModelResponse:
    """`response` saying which runtime wrote it: `runtime`, or the one it chose (a strategy within a
    strategy names the innermost)."""
    return response if response.runtime else replace(response, runtime=runtime.name)


def _answered_each(runtime: AgentRuntime, event: ModelStreamEvent) -> ModelStreamEvent:
    if isinstance(event, ModelCompleted):
        return ModelCompleted(_answered(runtime, event.response))
    return event


async def _aanswered_each(
    runtime: AgentRuntime, events: AsyncIterator[ModelStreamEvent]
) -> AsyncIterator[ModelStreamEvent]:
    async for event in events:
        yield _answered_each(runtime, event)


def _common_parts(runtimes: list[AgentRuntime]) -> frozenset[str]:
    """The kinds of message parts every one of `runtimes` takes: whichever answers, it reads them."""
    return frozenset.intersection(*(r.accepts for r in runtimes)) if runtimes else frozenset()


def _first_refused(runtimes: list[AgentRuntime], parts: Sequence[Attachment]) -> tuple[int, str] | None:
    """The first of `parts` one of `runtimes` refuses (any of them may answer), its reason naming it."""
    refusals = [(r, r.refused_part(parts)) for r in runtimes]
    found = [(refused[0], f"{r.name}: {refused[1]}") for r, refused in refusals if refused is not None]
    return min(found, default=None)


class FallbackRuntime(AgentRuntime):
    """Tries `runtimes` in order; moves to the next when one fails with an error `fall_back_on`
    accepts (by default a retryable one: rate limit, timeout, server error, connection).

    A stream falls back only before its first event: text already sent cannot be taken back, so a
    failure after that is raised. When every runtime fails, the last error is raised, its message
    naming each failure.
    """

    def __init__(
        self,
        runtimes: Sequence[AgentRuntime | str],
        *,
        fall_back_on: Callable[[ModelError], bool] = _retryable,
    ) -> None:
        from dcaf_like.runtimes import resolve_runtime

        if not runtimes:
            raise ValueError("FallbackRuntime needs at least one runtime")
        self.runtimes = [resolve_runtime(r) for r in runtimes]
        self.fall_back_on = fall_back_on
        self.name = f"fallback({', '.join(r.name for r in self.runtimes)})"
        self.context_window = _smallest_window(self.runtimes)
        self.accepts = _common_parts(self.runtimes)

    def refused_part(self, parts: Sequence[Attachment]) -> tuple[int, str] | None:
        return _first_refused(self.runtimes, parts)

    def takes(self, part: Attachment) -> bool:
        """When every runtime takes it: whichever answers reads it."""
        return all(r.takes(part) for r in self.runtimes)

    def count_tokens(self, text: str) -> int:
        """By the first runtime's tokenizer (the one that answers unless it fails)."""
        return self.runtimes[0].count_tokens(text)

    def count_request_tokens(self, request: ModelRequest) -> int | None:
        return self.runtimes[0].count_request_tokens(request)

    def invoke(self, request: ModelRequest) -> ModelResponse:
        request = passed_on(self, request)
        failures: list[ModelError] = []
        for runtime in self.runtimes:
            try:
                return _answered(runtime, runtime.invoke(request))
            except ModelError as error:
                self._failed(runtime, error, failures)
        raise self._all_failed(failures)

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        request = passed_on(self, request)
        failures: list[ModelError] = []
        for runtime in self.runtimes:
            try:
                return _answered(runtime, await runtime.ainvoke(request))
            except ModelError as error:
                self._failed(runtime, error, failures)
        raise self._all_failed(failures)

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        request = passed_on(self, request)
        failures: list[ModelError] = []
        for runtime in self.runtimes:
            started = False
            try:
                for event in runtime.stream(request):
                    started = True
                    yield _answered_each(runtime, event)
                return
            except ModelError as error:
                if started:
                    raise
                self._failed(runtime, error, failures)
        raise self._all_failed(failures)

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        request = passed_on(self, request)
        failures: list[ModelError] = []
        for runtime in self.runtimes:
            started = False
            try:
                async for event in runtime.astream(request):
                    started = True
                    yield _answered_each(runtime, event)
                return
            except ModelError as error:
                if started:
                    raise
                self._failed(runtime, error, failures)
        raise self._all_failed(failures)

    def secret_values(self) -> tuple[str, ...]:
        return tuple(v for runtime in self.runtimes for v in runtime.secret_values())

    def close(self) -> None:
        for runtime in self.runtimes:
            runtime.close()

    async def aclose(self) -> None:
        for runtime in self.runtimes:
            await runtime.aclose()

    def _failed(self, runtime: AgentRuntime, error: ModelError, failures: list[ModelError]) -> None:
        failures.append(error)
        if not self.fall_back_on(error) or len(failures) == len(self.runtimes):
            raise self._all_failed(failures) if len(failures) > 1 else error
        logger.warning("%s failed (%s); falling back to the next runtime", runtime.name, error)

    def _all_failed(self, failures: list[ModelError]) -> ModelError:
        last = failures[-1]
        summary = "; ".join(str(f) for f in failures)
        return type(last)(
            f"{self.name}: every runtime tried failed: {summary}", runtime=self.name, retryable=last.retryable
        )


class RoutingRuntime(AgentRuntime):
    """Sends each request to the runtime `route(request)` names, e.g. a small model for plain chat
    and a large one when tools are offered::

        RoutingRuntime(lambda r: "large" if r.tools else "small",
                       {"small": "openai:gpt-4o-mini", "large": "bedrock:anthropic.claude-3-5-sonnet..."})
    """

    def __init__(
        self, route: Callable[[ModelRequest], str], runtimes: Mapping[str, AgentRuntime | str]
    ) -> None:
        from dcaf_like.runtimes import resolve_runtime

        if not runtimes:
            raise ValueError("RoutingRuntime needs at least one runtime")
        self.route = route
        self.runtimes = {key: resolve_runtime(r) for key, r in runtimes.items()}
        self.name = f"router({', '.join(f'{k}={r.name}' for k, r in self.runtimes.items())})"
        self.context_window = _smallest_window(list(self.runtimes.values()))
        self.accepts = _common_parts(list(self.runtimes.values()))

    def refused_part(self, parts: Sequence[Attachment]) -> tuple[int, str] | None:
        return _first_refused(list(self.runtimes.values()), parts)

    def takes(self, part: Attachment) -> bool:
        """When every runtime takes it: whichever the route chooses reads it."""
        return all(r.takes(part) for r in self.runtimes.values())

    def choose(self, request: ModelRequest) -> AgentRuntime:
        key = self.route(request)
        try:
            return self.runtimes[key]
        except KeyError:
            known = ", ".join(sorted(self.runtimes))
            raise RuntimeNotConfigured(
                f"{self.name}: the route chose {key!r}; the runtimes are {known}"
            ) from None

    def invoke(self, request: ModelRequest) -> ModelResponse:
        request = passed_on(self, request)
        runtime = self.choose(request)
        return _answered(runtime, runtime.invoke(request))

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        request = passed_on(self, request)
        runtime = self.choose(request)
        return _answered(runtime, await runtime.ainvoke(request))

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        request = passed_on(self, request)
        runtime = self.choose(request)
        return (_answered_each(runtime, event) for event in runtime.stream(request))

    def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        request = passed_on(self, request)
        runtime = self.choose(request)
        return _aanswered_each(runtime, runtime.astream(request))

    def secret_values(self) -> tuple[str, ...]:
        return tuple(v for runtime in self.runtimes.values() for v in runtime.secret_values())

    def close(self) -> None:
        for runtime in self.runtimes.values():
            runtime.close()

    async def aclose(self) -> None:
        for runtime in self.runtimes.values():
            await runtime.aclose()


def passed_on(strategy: AgentRuntime, request: ModelRequest) -> ModelRequest:
    """`request` as a strategy passes it on: with the strategy's own model settings (from its runtime
    string) filled in where the request's leave one unset, so the runtime that answers honours them."""
    if strategy.settings is NO_SETTINGS:
        return request
    return replace(request, settings=strategy.settings_for(request))
