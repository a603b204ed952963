"""Calling the model for a turn: with the turn's time limit or the agent's own per call, a span saying
whose call it is, a cancel poll (async ports) that stops it when the run is cancelled meanwhile, and a
failure made the runtime's typed, scrubbed error."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from typing import TypeVar

from dcaf_like.application.effects import CANCELLED, TURN_TIMEOUT, CallModel, Stopped
from dcaf_like.application.errors import ModelError, ModelTimeout, scrub_exception
from dcaf_like.application.events import CancelRequested
from dcaf_like.application.hooks import Purpose
from dcaf_like.application.messages import ModelCompleted, ModelResponse, ReasoningDelta, TextDelta
from dcaf_like.application.ports import AgentRuntime, ConversationStore, acancel_requested
from dcaf_like.application.run_state import TurnRun
from dcaf_like.application.tool_execution import CANCEL_POLL, CancelPoll, RunCancelled
from dcaf_like.application.tracing import NO_SPAN, Span, Tracer
from dcaf_like.concurrency.time_limits import OutOfTime, aiterate_within, awithin, iterate_within, within

T = TypeVar("T")


class ModelCalls:
    """The model calls of one agent's turns."""

    def __init__(
        self,
        runtime: AgentRuntime,
        repository: ConversationStore,
        tracer: Tracer,
        *,
        timeout: float | None,
        monotonic: Callable[[], float],
    ) -> None:
        self.runtime, self.repository, self.tracer = runtime, repository, tracer
        #: The agent's own limit per model call (``model_timeout``), None: none.
        self.timeout = timeout
        self.monotonic = monotonic

    async def invoke(
        self, effect: CallModel, run: TurnRun, *, purpose: Purpose = "turn"
    ) -> ModelResponse | Stopped:
        span, seconds, the_turns, poll = self._call(effect, run, purpose)
        try:
            if poll is None:
                invoke, request = self.runtime.invoke, effect.request
                answer = invoke(request) if seconds is None else within(lambda: invoke(request), seconds)
            else:
                asked = self.runtime.ainvoke(effect.request)
                answer = await poll.step(asked if seconds is None else awithin(asked, seconds))
            return _traced(span, answer)
        except Exception as exc:
            return self._stopped(exc, span, seconds, the_turns)
        finally:
            _end(span, poll)

    async def stream(
        self, effect: CallModel, run: TurnRun
    ) -> AsyncGenerator[TextDelta | ReasoningDelta | CancelRequested | ModelResponse | Stopped, None]:
        """The model's deltas as they come, then its response (or why the turn stops waiting, after
        the acknowledgement of a cancel)."""
        span, seconds, the_turns, poll = self._call(effect, run)
        try:
            if poll is None:
                events = self.runtime.stream(effect.request)
                deltas = _each(events if seconds is None else iterate_within(events, seconds))
            else:
                aevents = self.runtime.astream(effect.request)
                deltas = poll.each(aevents if seconds is None else aiterate_within(aevents, seconds))
            async for event in deltas:
                if isinstance(event, ModelCompleted):
                    yield _traced(span, event.response)
                    return
                yield event
        except Exception as exc:
            stopped = self._stopped(exc, span, seconds, the_turns)
            if stopped.reason == CANCELLED and (ack := run.acknowledge_cancel()) is not None:
                yield ack
            yield stopped
            return
        finally:
            _end(span, poll)
        raise ModelError(
            f"{self.runtime.name}: the stream ended without a final response", runtime=self.runtime.name
        )

    def _call(
        self, effect: CallModel, run: TurnRun, purpose: Purpose = "turn"
    ) -> tuple[Span, float | None, bool, CancelPoll | None]:
        """A model call's span, saying whose call it is (the turn's, or the summary's); how long it
        may take, and whether that is what is left of the turn's time; and (async ports) the poll that
        stops it when the turn is cancelled meanwhile."""
        attributes = {"dcaf.runtime": self.runtime.name, "dcaf.purpose": purpose}
        span = self.tracer.start("dcaf.model", attributes, run.span)
        left, own = effect.timeout, self.timeout
        the_turns = left is not None and (own is None or left < own)
        if run.blocking:
            return span, left if the_turns else own, the_turns, None
        conversation_id, since, repository = run.conversation.id, run.started, self.repository
        poll = CancelPoll(
            lambda: acancel_requested(repository, conversation_id, since=since),
            CANCEL_POLL,
            monotonic=self.monotonic,
        )
        return span, left if the_turns else own, the_turns, poll

    def _stopped(self, exc: Exception, span: Span, seconds: float | None, the_turns: bool) -> Stopped:
        """What a model call's failure means: the turn stops there (its time ran out, it was
        cancelled), or the call's typed error raises."""
        name = self.runtime.name
        if isinstance(exc, RunCancelled):
            span.set("dcaf.stop_reason", CANCELLED)
            return Stopped(CANCELLED)
        if isinstance(exc, OutOfTime) and the_turns:
            span.set("dcaf.stop_reason", TURN_TIMEOUT)
            return Stopped(TURN_TIMEOUT)
        if isinstance(exc, OutOfTime):
            failure: ModelError = ModelTimeout(
                f"{name}: no answer within the model-call time limit of {seconds:g} s", runtime=name
            )
        else:
            failure = self._model_failure(exc)
        span.fail(failure)
        if failure is exc:
            raise failure
        raise failure from exc

    def _model_failure(self, exc: Exception) -> ModelError:
        secrets = self.runtime.secret_values()
        if secrets:  # before the span records it
            scrub_exception(exc, secrets)
        if isinstance(exc, ModelError):
            return exc
        name = self.runtime.name
        return ModelError(f"{name} failed: {type(exc).__name__}: {exc}", runtime=name)


async def _each(items: Iterable[T]) -> AsyncIterator[T]:
    """A blocking iterator's items, for the blocking driver (each is read in place)."""
    for item in items:
        yield item


def _end(span: Span, poll: CancelPoll | None) -> None:
    if poll is not None:
        poll.close()
    span.end()


def _traced(span: Span, response: ModelResponse) -> ModelResponse:
    if span is NO_SPAN:  # nothing records it: skip the attributes
        return response
    span.set("dcaf.input_tokens", response.usage.input_tokens)
    span.set("dcaf.output_tokens", response.usage.output_tokens)
    span.set("dcaf.tool_calls", len(response.tool_calls))
    if response.runtime:  # the runtime asked chose another to answer
        span.set("dcaf.answered_by", response.runtime)
    return response
