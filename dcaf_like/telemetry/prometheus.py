"""Prometheus metrics (``pip install "dcaf-like[metrics]"``): ``serve(agent, metrics=True)``.

The application knows nothing of Prometheus: it reports turns, model calls, tools and decisions as
spans to its :class:`~dcaf_like.application.tracing.Tracer` port. :class:`MetricsTracer` wraps the
agent's tracer (OpenTelemetry keeps its spans) and counts what the spans say as they end; without
metrics the tracer is untouched, so a turn pays nothing. :class:`HttpMetrics` counts HTTP requests by
route template and status.

Several workers (``dcaf-like serve --workers N --metrics``): the CLI sets ``PROMETHEUS_MULTIPROC_DIR``
to a fresh temporary directory before the workers start, every worker writes its values there, and
``/metrics`` (whichever worker answers) sums them all (prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import multiprocess as _multiprocess

from dcaf_like.application.tracing import NO_SPAN, Span, Tracer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TURNS = Counter(
    "dcaf_turns", "Turns, by outcome (completed, awaiting_approval, failed, interrupted).", ["outcome"]
)
MODEL_CALLS = Counter(
    "dcaf_model_calls",
    "Model calls, by the runtime that answered and outcome (ok, error).",
    ["runtime", "outcome"],
)
MODEL_SECONDS = Histogram("dcaf_model_call_seconds", "Time a model call took, by runtime.", ["runtime"])
MODEL_TOKENS = Counter(
    "dcaf_model_tokens",
    "Tokens the model read (input) and wrote (output), by runtime.",
    ["runtime", "direction"],
)
TOOLS = Counter(
    "dcaf_tool_executions",
    "Tool executions, by tool and outcome (ok, error, timeout, cancelled, interrupted).",
    ["tool", "outcome"],
)
JOBS = Counter(
    "dcaf_jobs",
    "Jobs of background tools a worker took, by outcome (executed, failed, asked, refused, lost, error).",
    ["outcome"],
)
REFUSED = Counter(
    "dcaf_refused_requests",
    "Requests refused before or as their turn began (a forged decision, a missing scope, pending calls), "
    "by the refusal's error; they are not failed turns.",
    ["error"],
)
DECISIONS = Counter(
    "dcaf_decisions",
    "Decisions on tool calls, by kind (approve, reject, refused) and entrance (http, stream, a2a, ...).",
    ["kind", "entrance"],
)
DECISION_WAIT = Histogram(
    "dcaf_decision_wait_seconds",
    "Time from a tool call's proposal to its decision.",
    buckets=(1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600, float("inf")),
)
HTTP_REQUESTS = Counter(
    "dcaf_http_requests", "HTTP requests, by route template and status.", ["route", "status"]
)


def exposition() -> bytes:
    """The metrics in the Prometheus text format: this process's, or every worker's in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(REGISTRY)


class MetricsTracer:
    """A tracer that counts what the application's spans report, and passes them to `inner`."""

    def __init__(self, inner: Tracer) -> None:
        self.inner = inner

    def start(self, name: str, attributes: dict[str, Any], parent: Span | None = None) -> Span:
        inner_parent = parent.inner if isinstance(parent, _MetricSpan) else parent
        inner = self.inner.start(name, attributes, inner_parent)
        return _MetricSpan(self, name, dict(attributes), parent, inner)


class _MetricSpan:
    __slots__ = ("attributes", "failed", "inner", "name", "parent", "started", "tracer")

    def __init__(
        self, tracer: MetricsTracer, name: str, attributes: dict[str, Any], parent: Span | None, inner: Span
    ) -> None:
        import time

        self.tracer = tracer
        self.name = name
        self.attributes = attributes
        self.parent = parent
        self.inner = inner
        self.failed = False
        self.started = time.perf_counter()

    def set(self, key: str, value: str | int | float | bool) -> None:
        self.attributes[key] = value
        if self.inner is not NO_SPAN:
            self.inner.set(key, value)

    def fail(self, error: BaseException | str) -> None:
        self.failed = True
        self.inner.fail(error)

    def end(self) -> None:
        import time

        try:
            _RECORD.get(self.name, _ignore)(self, time.perf_counter() - self.started)
        finally:
            self.inner.end()


def _ignore(span: _MetricSpan, seconds: float) -> None:
    return None


def _turn(span: _MetricSpan, seconds: float) -> None:
    a = span.attributes
    if refused := a.get("dcaf.refused"):
        REFUSED.labels(str(refused)).inc()
        return
    if span.failed:
        TURNS.labels("failed").inc()
        return
    if "dcaf.pending_approvals" not in a:  # ended without its answer: a shutdown stopped it
        TURNS.labels("interrupted").inc()
        return
    pending = int(a.get("dcaf.pending_approvals", 0))
    TURNS.labels("awaiting_approval" if pending else "completed").inc()


def _model(span: _MetricSpan, seconds: float) -> None:
    a = span.attributes
    runtime = str(a.get("dcaf.answered_by") or a.get("dcaf.runtime", ""))  # who answered, when it chose
    MODEL_CALLS.labels(runtime, "error" if span.failed else "ok").inc()
    MODEL_SECONDS.labels(runtime).observe(seconds)
    for direction in ("input", "output"):
        if tokens := int(a.get(f"dcaf.{direction}_tokens", 0) or 0):
            MODEL_TOKENS.labels(runtime, direction).inc(tokens)


def _tool(span: _MetricSpan, seconds: float) -> None:
    outcome = span.attributes.get("dcaf.outcome") or ("error" if span.failed else "ok")
    TOOLS.labels(str(span.attributes.get("dcaf.tool", "")), str(outcome)).inc()


def _job(span: _MetricSpan, seconds: float) -> None:
    JOBS.labels("error" if span.failed else str(span.attributes.get("dcaf.job.outcome", "error"))).inc()


def _decision(span: _MetricSpan, seconds: float) -> None:
    a = span.attributes
    parent = span.parent
    entrance = parent.attributes.get("dcaf.entrance", "") if isinstance(parent, _MetricSpan) else ""
    kind = "refused" if span.failed else str(a.get("dcaf.decision", ""))
    DECISIONS.labels(kind, str(entrance)).inc()
    if not span.failed and "dcaf.waited_seconds" in a:
        DECISION_WAIT.observe(float(a["dcaf.waited_seconds"]))


_RECORD: dict[str, Callable[[_MetricSpan, float], None]] = {
    "dcaf.turn": _turn,
    "dcaf.model": _model,
    "dcaf.tool": _tool,
    "dcaf.job": _job,
    "dcaf.decision": _decision,
}


class HttpMetrics:
    """ASGI middleware: every HTTP request counted by its route template (``/api/conversations/{id}``,
    never the id itself) and status; a path no route serves counts as ``unmatched``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            HTTP_REQUESTS.labels(route, str(status or 500)).inc()
