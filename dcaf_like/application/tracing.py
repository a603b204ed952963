"""Tracing port: spans for a turn, each model call, each tool execution and each approval decision.

Spans are started and ended explicitly, with an explicit parent, never made "current": a turn is a
generator that may resume in another thread or context, where context-bound spans would detach
wrongly. The default records nothing; ``dcaf_like.telemetry.otel`` sends spans to OpenTelemetry.
"""

from __future__ import annotations

from typing import Any, Protocol


class Span(Protocol):
    def set(self, key: str, value: str | int | float | bool) -> None: ...

    def fail(self, error: BaseException | str) -> None:
        """Mark the span as failed, with what went wrong."""

    def end(self) -> None: ...


class Tracer(Protocol):
    def start(self, name: str, attributes: dict[str, Any], parent: Span | None = None) -> Span: ...


class _NoSpan:
    def set(self, key: str, value: str | int | float | bool) -> None:
        return None

    def fail(self, error: BaseException | str) -> None:
        return None

    def end(self) -> None:
        return None


NO_SPAN = _NoSpan()


class NoTracer:
    """Records nothing, at no cost."""

    def start(self, name: str, attributes: dict[str, Any], parent: Span | None = None) -> Span:
        return NO_SPAN
