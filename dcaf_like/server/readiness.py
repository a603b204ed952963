"""The probes: ``GET /health`` (the process answers) and ``GET /ready`` (it can take a turn now).

Each check is one cheap look, bounded by :data:`CHECK_TIMEOUT`: the store answers one round trip
(``aping``), the agent has a runtime and, for one that loads a model (``LocalRuntime``), the model is
loaded (the first probe starts loading it in the background), and the job engine of its background
tools, if it has one that can tell (a broker), answers. The body names every check with ``ok``
and ``latency_ms``; a failed check says only the exception's class, never its text (which may name
a host or a path).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.responses import JSONResponse

from dcaf_like.application.executors import ReachableExecutor
from dcaf_like.application.ports import AgentRuntime, ServedAgent
from dcaf_like.server.detached import Runs
from dcaf_like.version import __version__

CHECK_TIMEOUT = 2.0


def probe_routes(served: ServedAgent, runs: Runs | None = None) -> APIRouter:
    router = APIRouter(tags=["operations"])
    readiness = Readiness(served, runs)

    @router.get("/health")
    async def health() -> dict[str, str]:
        """Liveness: the process serves requests."""
        return {"status": "ok", "agent": served.name, "version": __version__}

    @router.get("/ready", response_model=None)
    async def ready() -> Response:
        """Readiness: the store answers, the model runtime is ready and the job engine of background
        tools answers (503 naming the failed check)."""
        return await readiness.response()

    return router


class Readiness:
    def __init__(self, served: ServedAgent, runs: Runs | None = None, timeout: float = CHECK_TIMEOUT) -> None:
        self.served = served
        self.runs = runs
        self.timeout = timeout
        self._loading: asyncio.Task[Any] | None = None

    async def response(self) -> JSONResponse:
        checks: dict[str, dict[str, Any]] = {}
        if self.runs is not None and self.runs.draining:  # shutting down: send traffic elsewhere
            checks["accepting_turns"] = {"ok": False, "error": "shutting down", "latency_ms": 0.0}
        repository = self.served.repository
        if repository is not None:
            checks["store"] = await self._timed(repository.aping())
        runtime = self.served.runtime
        if runtime is not None:
            checks["runtime"] = self._runtime(runtime)
        executor = getattr(self.served, "executor", None)  # an Agent's; a function agent has none
        if isinstance(executor, ReachableExecutor):
            checks["job_engine"] = await self._timed(executor.aping())
        ready = all(check["ok"] for check in checks.values())
        body = {"status": "ready" if ready else "unavailable", "checks": checks}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def _timed(self, probe: Any) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            await asyncio.wait_for(probe, self.timeout)
        except TimeoutError:
            return _failed(started, "timed out")
        except Exception as exc:
            return _failed(started, type(exc).__name__)
        return {"ok": True, "latency_ms": _ms(started)}

    def _runtime(self, runtime: AgentRuntime) -> dict[str, Any]:
        """Ready, unless it is a runtime that loads its model (``LocalRuntime``) and has not yet."""
        started = time.perf_counter()
        if getattr(runtime, "loaded", True) is False:
            load = getattr(runtime, "load", None)
            if load is not None and (self._loading is None or self._loading.done()):
                self._loading = asyncio.ensure_future(asyncio.to_thread(load))
                self._loading.add_done_callback(_consume)
            return _failed(started, "model loading")
        return {"ok": True, "latency_ms": _ms(started)}


def _consume(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # a failed load is retried by the next probe; the turn reports its error


def _failed(started: float, error: str) -> dict[str, Any]:
    return {"ok": False, "latency_ms": _ms(started), "error": error}


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
