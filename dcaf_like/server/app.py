"""``create_app(agent)``: the FastAPI application that serves an agent.

The routes live in their modules: the HelpDesk turns (``chat.py``), conversations
(``conversations.py``), the audit trail (``audit.py``), the probes (``readiness.py``), the chat page
(``ui.py``), A2A (``a2a.py``) and MCP (``mcp.py``). This module puts them together behind the
perimeter, the body limit and the API keys, and says how failures are answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from dcaf_like.application.ports import ConversationStore, ServedAgent, ToolProvider
from dcaf_like.application.tracing import Tracer
from dcaf_like.domain.trail import DigestKey
from dcaf_like.helpdesk.function_agent import as_served
from dcaf_like.server._turn_dispatch import dispatch_turns_plainly
from dcaf_like.server.approvals import approval_routes
from dcaf_like.server.audit import audit_routes, signing
from dcaf_like.server.auth import OPEN_PATHS, ApiKeys, AuthMiddleware, caller_of
from dcaf_like.server.chat import TURN_PATHS, add_chat_routes, document_chat_body
from dcaf_like.server.conversations import conversation_routes
from dcaf_like.server.detached import SHUTDOWN_GRACE, Runs, drain_on_sigterm
from dcaf_like.server.errors import HttpError
from dcaf_like.server.escalations import sweep_period, sweeping
from dcaf_like.server.failures import error_response, failure
from dcaf_like.server.grants import grant_routes
from dcaf_like.server.middleware import DEFAULT_MAX_BODY_BYTES, RequestMiddleware
from dcaf_like.server.perimeter import Perimeter
from dcaf_like.server.readiness import probe_routes
from dcaf_like.server.run_events import run_event_routes
from dcaf_like.server.store_choice import Store, configured
from dcaf_like.server.ui import PAGE_PATHS, ui_routes
from dcaf_like.signing import checked_signing_key, signing_key
from dcaf_like.version import __version__


def create_app(
    agent: ServedAgent | Callable[..., Any],
    *,
    store: Store | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    title: str | None = None,
    api_keys: Mapping[str, str] | None = None,
    ui: bool = True,
    a2a: bool = False,
    mcp: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] | None = None,
    metrics: bool = False,
    shutdown_grace: float = SHUTDOWN_GRACE,
    audit_key: DigestKey | None = None,
    escalation_sweep: float | None = None,
) -> FastAPI:
    """The FastAPI app serving `agent` (an Agent, or a ``(messages, context)`` function), for users
    who mount it in their own app or run it under their own server (``uvicorn --factory``, workers):
    ``POST /api/chat``, ``POST /api/chat-stream``, ``GET /health``, ``GET /ready``, the conversation
    routes, and with `ui` the chat page at ``/``.

    Several workers must share a store: pass `store` (a repository or a URL) or set ``DCAF_STORE``
    (see ``store_choice.py``). With `api_keys` (``{"<key>": "<identity>"}`` or ``{"<key>":
    "<identity>:<scope>+<scope>"}``, or ``DCAF_API_KEYS``), every route but health, docs and the page's
    files needs an API key (websockets added to the app too), each key sees only its identity's
    conversations (``admin``: all, and ``GET /api/audit``), and the key's identity is recorded as
    whoever decided each tool call. With `a2a`, the agent also speaks the A2A protocol (needs ``pip
    install "dcaf-like[a2a]"``). With `mcp`, the agent's tools that run without approval are an MCP
    server at ``/mcp`` too (streamable HTTP; docs/mcp.md). With `metrics`, ``GET /metrics``.

    On SIGTERM the server drains for up to `shutdown_grace` seconds before it shuts down: new turns
    get 503 with ``Retry-After``, ``/ready`` 503, the turns under way go on (``detached.py``).

    With `audit_key` (else ``DCAF_AUDIT_KEY``), the server signs the audit trail's head every so many
    records or minutes (docs/operations.md, "Proving the trail"); without one the trail is chained but
    unsigned.

    Every request passes the perimeter first (``perimeter.py``): a `Host` among loopback's names, the
    connection's address and `allowed_hosts` (``DCAF_ALLOWED_HOSTS``); for a change, an `Origin` that
    is the server's own or among `allowed_origins` (``DCAF_ALLOWED_ORIGINS``), and a JSON body; see
    the threat model in docs/operations.md."""
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    # The agent served: built on the chosen store, its turns observed by the metrics (ADR 44).
    served, _ = configured(
        as_served(agent), store, default=None, tracer=_metrics_tracer() if metrics else None
    )
    key = checked_signing_key(audit_key) if audit_key is not None else signing_key()
    sweep_every = sweep_period(escalation_sweep)
    # Every turn runs apart from its request: a client that goes away does not stop it (detached.py).
    runs = Runs(grace=shutdown_grace)
    # What the server's shutdown waits for, in this order, before the agent lets go of its clients.
    closing: list[Callable[[], Awaitable[None]]] = [runs.aclose]
    endpoint = None
    if mcp:
        from dcaf_like.server.mcp import MCPEndpoint

        endpoint = MCPEndpoint(served)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        runs.open()
        drain_on_sigterm(runs)
        async with signing(lambda: served.repository, key):  # its last digest after the last save
            async with AsyncExitStack() as running:
                if endpoint is not None:
                    await running.enter_async_context(endpoint.running())
                app.state.escalations = await running.enter_async_context(sweeping(served, sweep_every))
                yield
            for close in closing:  # turns and A2A runs under way finish (and save) before the store closes
                await close()
        # Clients bound to the server's event loop (redis.asyncio, the SDKs' async clients, MCP sessions).
        await served.aclose()

    app = FastAPI(
        lifespan=lifespan,
        title=title or f"{served.name} (dcaf_like)",
        version=__version__,
        description=served.description or "An agent served over the HelpDesk protocol.",
    )
    keys = ApiKeys(api_keys) if api_keys is not None else ApiKeys.from_environment()
    if keys is not None:
        open_paths = OPEN_PATHS | PAGE_PATHS if ui else OPEN_PATHS
        app.add_middleware(AuthMiddleware, keys=keys, open_paths=open_paths)
    perimeter = Perimeter(allowed_hosts, allowed_origins)
    app.add_middleware(RequestMiddleware, max_bytes=max_body_bytes, perimeter=perimeter)
    if metrics:
        _add_metrics(app, served)
    app.state.agent = served
    app.state.runs = runs
    if endpoint is not None:
        app.router.routes.append(Route("/mcp", endpoint.asgi, methods=["GET", "POST", "DELETE"]))
    _add_error_handlers(app)

    if (kept := served.repository) is not None:

        def repository() -> ConversationStore:
            """The served agent's store (chosen when it was built: it does not change)."""
            return kept

        app.include_router(conversation_routes(repository, lambda: served.clock()))
        app.include_router(run_event_routes(repository, runs.log))
        app.include_router(audit_routes(repository))
        groups = served.approval_policy.groups if isinstance(served, ToolProvider) else {}
        app.include_router(approval_routes(repository, groups, lambda: served.clock()))
        app.include_router(grant_routes(repository, lambda: served.clock()))
    if ui:
        app.include_router(ui_routes())
    if a2a:
        from dcaf_like.server.a2a import add_a2a_routes

        closing.append(add_a2a_routes(app, served, runs).aclose)
    app.include_router(probe_routes(served, runs))
    add_chat_routes(app, served, runs)
    dispatch_turns_plainly(app, TURN_PATHS)
    document_chat_body(app)
    return app


def _metrics_tracer() -> Callable[[Tracer], Tracer]:
    """What wraps the served agent's tracer so that the metrics count its turns."""
    from dcaf_like.telemetry import prometheus

    return prometheus.MetricsTracer


def _add_metrics(app: FastAPI, served: ServedAgent) -> None:
    from dcaf_like.telemetry import prometheus

    app.add_middleware(prometheus.HttpMetrics)

    @app.get("/metrics", tags=["operations"], response_model=None)
    async def metrics_text(http: Request) -> Response:
        """Prometheus metrics (``admin`` scope when API keys are on)."""
        try:
            caller_of(http).require("admin", "read the metrics")
        except Exception as exc:
            return failure(exc, None)
        return Response(prometheus.exposition(), media_type=prometheus.CONTENT_TYPE)


def _add_error_handlers(app: FastAPI) -> None:
    """Every failure as the JSON error body of ``errors.py``, FastAPI's and Starlette's own included."""

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        first = problems[0] if problems else {"loc": ("body",), "msg": "invalid body"}
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        error = HttpError(422, "invalid_request", f"{first['msg']}{more}", field=_path(first["loc"]))
        return error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_exception(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        response = error_response(HttpError(exc.status_code, code, str(exc.detail)))
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of the first route matching the path; a path served by
            # several routes (GET and DELETE of a conversation) allows all of theirs.
            response.headers["Allow"] = ", ".join(_allowed_methods(app, request))
        return response

    @app.exception_handler(Exception)
    async def unforeseen(_: Request, exc: Exception) -> JSONResponse:
        return failure(exc, None)


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods some route of `app` fully matches for the request's path."""
    return [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in app.routes)
    ]


def _path(loc: Any) -> str:
    """``("body", "messages", 0, "role")`` as ``messages[0].role``; ``("path", "conversation_id")`` as
    ``conversation_id``."""
    parts = [p for p in loc if p not in ("body", "path")] if len(loc) > 1 else list(loc)
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "body"
