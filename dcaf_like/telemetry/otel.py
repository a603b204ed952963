"""OpenTelemetryTracer: dcaf_like's spans through ``opentelemetry-api`` (to whatever SDK you configured).

Used automatically by ``Agent`` when ``opentelemetry`` is installed; without an SDK configured the API
is a no-op. Span names: ``dcaf.turn``, ``dcaf.model``, ``dcaf.tool``, ``dcaf.decision``.
"""

from __future__ import annotations

import os
from typing import Any

from dcaf_like.application.tracing import NO_SPAN, Span


class OpenTelemetryTracer:
    def __init__(self, tracer_provider: Any = None) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._provider = tracer_provider
        self._tracer = trace.get_tracer("dcaf_like", tracer_provider=tracer_provider)
        self._configured = tracer_provider is not None
        # Until a provider is set, the API reads os.environ on every look; the module's own global says
        # the same without that, where this version of the API has it.
        self._unset_global = hasattr(trace, "_TRACER_PROVIDER") and not os.environ.get(
            "OTEL_PYTHON_TRACER_PROVIDER"
        )

    def start(self, name: str, attributes: dict[str, Any], parent: Span | None = None) -> Span:
        # A span under one that was not recorded is not recorded either: no orphans, and one look at
        # the global provider per turn rather than per span.
        if parent is NO_SPAN or not self._recording():
            return NO_SPAN  # no SDK configured (yet): nothing would be recorded, so build nothing
        context = None
        if isinstance(parent, _OtelSpan):
            context = self._trace.set_span_in_context(parent.span)
        clean = {k: v for k, v in attributes.items() if v is not None}
        return _OtelSpan(self._tracer.start_span(name, context=context, attributes=clean), self._trace)

    def _recording(self) -> bool:
        if self._configured:
            return True
        if self._unset_global and self._trace._TRACER_PROVIDER is None:
            return False
        if isinstance(self._trace.get_tracer_provider(), self._trace.ProxyTracerProvider):
            return False
        self._configured = True  # OpenTelemetry sets the global provider once, for good
        return True


class _OtelSpan:
    def __init__(self, span: Any, trace: Any) -> None:
        self.span = span
        self._trace = trace

    def set(self, key: str, value: str | int | float | bool) -> None:
        self.span.set_attribute(key, value)

    def fail(self, error: BaseException | str) -> None:
        description = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))

    def end(self) -> None:
        self.span.end()


_DEFAULT: list[Any] = []


def default_tracer() -> Any:
    """An OpenTelemetryTracer (for the global tracer provider) when opentelemetry is installed, else
    None. Made once per process."""
    if not _DEFAULT:
        import importlib.util

        _DEFAULT.append(OpenTelemetryTracer() if importlib.util.find_spec("opentelemetry") else None)
    return _DEFAULT[0]
