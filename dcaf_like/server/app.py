"""The FastAPI application that serves an agent over the HelpDesk protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Protocol, runtime_checkable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from dcaf_like.application.dto import AgentRequest, AgentResponse
from dcaf_like.application.events import RunFailed, StreamEvent
from dcaf_like.application.function_agent import FunctionAgent
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.server.audit import audit_routes
from dcaf_like.server.auth import OPEN_PATHS, ApiKeys, AuthMiddleware, Caller, authorized, caller_of
from dcaf_like.server.conversations import conversation_routes
from dcaf_like.server.errors import HttpError, http_error
from dcaf_like.server.middleware import RequestMiddleware, current_request_id, logger
from dcaf_like.server.perimeter import Perimeter
from dcaf_like.server.readiness import Readiness
from dcaf_like.server.runs import Runs
from dcaf_like.server.serving import DEFAULT_MAX_BODY_BYTES
from dcaf_like.server.ui import PAGE_PATHS, ui_routes
from dcaf_like.server.wire import (
    ChatRequest,
    ChatResponse,
    ErrorBody,
    event_lines,
    ndjson,
    request_payload,
)
from dcaf_like.version import __version__

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@runtime_checkable
class ServedAgent(Protocol):
    """What the server needs of an agent. :class:`~dcaf_like.Agent` and
    :class:`~dcaf_like.FunctionAgent` are both one."""

    name: str
    description: str

    async def ahandle(self, request: AgentRequest) -> AgentResponse: ...

    def ahandle_stream(self, request: AgentRequest) -> AsyncIterator[StreamEvent]: ...


def as_served(target: ServedAgent | Callable[..., Any]) -> ServedAgent:
    """An Agent as is; a plain ``(messages, context)`` function wrapped in a FunctionAgent."""
    if isinstance(target, ServedAgent):
        return target
    if callable(target):
        return FunctionAgent(target)
    raise TypeError(f"serve an Agent or an agent function (messages, context), not {type(target).__name__}")


_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "The request is malformed (its body, or the framing of its body); `error.field` names where.",
        403: "A cross-origin request, an edit of a tool that does not allow editing, a call the policy "
        "denies as it would run, or the API key lacks a scope.",
        404: "The tool call was never proposed in this conversation, or the conversation is not yours.",
        409: "Already decided, not the proposal, in another platform context, or a concurrent turn won.",
        410: "The approval window of the call has closed.",
        413: "The body is over the server's limit.",
        415: "The body is not sent as JSON (`Content-Type: application/json`).",
        421: "The `Host` is not one this server answers for (DNS rebinding).",
        422: "The body does not have the protocol's shape, or edited arguments break the tool's schema.",
        500: "The server failed; the log has the details under the request id.",
        502: "The model runtime failed.",
        503: "The model is rate limited, or the conversation store or a toolset (MCP server) is unavailable.",
        504: "The model runtime timed out.",
    }.items()
}


def create_app(
    agent: ServedAgent | Callable[..., Any],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    title: str | None = None,
    api_keys: Mapping[str, str] | None = None,
    ui: bool = True,
    a2a: bool = False,
    mcp: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] | None = None,
    metrics: bool = False,
) -> FastAPI:
    """A FastAPI app serving `agent`: ``POST /api/chat``, ``POST /api/chat-stream``, ``GET /health``,
    and with `ui` the chat page at ``/``. With `api_keys` (``{"<key>": "<identity>"}`` or
    ``{"<key>": "<identity>:<scope>+<scope>"}``, or ``DCAF_API_KEYS``), every route but health, docs and
    the page's files needs an API key (websockets added to the app too), each key sees only its
    identity's conversations (``admin``: all, and ``GET /api/audit``), and the key's identity is
    recorded as whoever decided each tool call.
    With `a2a`, also the A2A protocol (see ``dcaf_like.server.a2a``). With `mcp`, the agent's
    tools that run without approval are also an MCP server at ``/mcp``.
    Every request passes the perimeter first (``perimeter.py``): a `Host` among loopback's names, the
    connection's address and `allowed_hosts` (``DCAF_ALLOWED_HOSTS``); for a change, an `Origin` that
    is the server's own or among `allowed_origins` (``DCAF_ALLOWED_ORIGINS``), and a JSON body."""
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    served = as_served(agent)
    # Every turn runs apart from its request: a client that goes away does not stop it (runs.py).
    runs = Runs()
    endpoint = None
    if mcp:
        from dcaf_like.server.mcp import MCPEndpoint

        endpoint = MCPEndpoint(served)

    @asynccontextmanager
    async def lifespan(running_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as running:
            if endpoint is not None:
                await running.enter_async_context(endpoint.running())
            yield
        await runs.aclose()  # turns under way finish (and save) before the store closes
        a2a_tasks = getattr(running_app.state, "a2a_tasks", None)
        if a2a_tasks is not None:  # A2A runs in progress finish (and save) before the store closes
            await a2a_tasks.aclose()
        # Clients bound to the server's event loop (redis.asyncio, the SDKs' async clients) close with it.
        for resource in (getattr(served, "repository", None), getattr(served, "runtime", None)):
            close = getattr(resource, "aclose", None)
            if close is not None:
                await close()
        for toolset in getattr(served, "toolsets", ()):  # MCP servers' sessions and processes
            await toolset.aclose()

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
        from dcaf_like.telemetry import prometheus

        app.add_middleware(prometheus.HttpMetrics)
        add_tracer = getattr(served, "add_tracer", None)
        if add_tracer is not None:
            add_tracer(prometheus.MetricsTracer)

        @app.get("/metrics", tags=["operations"], response_model=None)
        async def metrics_text(http: Request) -> Response:
            """Prometheus metrics (``admin`` scope when API keys are on)."""
            try:
                caller_of(http).require("admin", "read the metrics")
            except Exception as exc:
                return _failure(exc, None)
            return Response(prometheus.exposition(), media_type=prometheus.CONTENT_TYPE)

    app.state.agent = served
    app.state.runs = runs
    if endpoint is not None:
        app.router.routes.append(Route("/mcp", endpoint.asgi, methods=["GET", "POST", "DELETE"]))

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        first = problems[0] if problems else {"loc": ("body",), "msg": "invalid body"}
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        error = HttpError(422, "invalid_request", f"{first['msg']}{more}", field=_path(first["loc"]))
        return _error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_exception(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        response = _error_response(HttpError(exc.status_code, code, str(exc.detail)))
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of the first route matching the path; a path served by
            # several routes (GET and DELETE of a conversation) allows all of theirs.
            response.headers["Allow"] = ", ".join(_allowed_methods(app, request))
        return response

    @app.exception_handler(Exception)
    async def unforeseen(_: Request, exc: Exception) -> JSONResponse:
        return _failure(exc, None)

    if isinstance(getattr(served, "repository", None), ConversationRepository):
        app.include_router(conversation_routes(lambda: served.repository, _failure, ErrorBody))  # type: ignore[attr-defined]
        app.include_router(audit_routes(lambda: served.repository, _failure, ErrorBody))  # type: ignore[attr-defined]

    if ui:
        app.include_router(ui_routes())
    if a2a:
        from dcaf_like.server.a2a import add_a2a_routes

        add_a2a_routes(app, served)

    @app.get("/health", tags=["operations"])
    async def health() -> dict[str, str]:
        """Liveness: the process serves requests."""
        return {"status": "ok", "agent": served.name, "version": __version__}

    readiness = Readiness(served)

    @app.get("/ready", tags=["operations"], response_model=None)
    async def ready() -> Response:
        """Readiness: the store answers and the model runtime is ready (503 naming the failed check)."""
        return await readiness.response()

    @app.post(
        "/api/chat",
        tags=["helpdesk"],
        response_model=None,
        responses={200: {"model": ChatResponse}, **_ERRORS},
        openapi_extra=_CHAT_BODY,
    )
    async def chat(http: Request) -> Response:
        """One turn: a user message, decisions on pending tool calls, or both. Answers with the
        assistant's message; ``data`` always lists pending and executed calls and the session."""
        body = await _chat_body(http)
        try:
            request = _agent_request(body, caller_of(http), "http")
        except Exception as exc:
            return _failure(exc, None)
        http.state.conversation_id = request.conversation_id  # for the access log
        try:
            response = await runs.watch(runs.start(served.ahandle(request)))
        except Exception as exc:
            return _failure(exc, request.conversation_id)
        http.state.conversation_id = response.conversation_id
        message = response.to_helpdesk_message()
        message["meta"]["request_id"] = current_request_id()
        return JSONResponse(message)

    @app.post(
        "/api/chat-stream",
        tags=["helpdesk"],
        response_model=None,
        responses={
            200: {
                "description": "NDJSON events, one per line, each flushed as it happens.",
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            },
            **_ERRORS,
        },
        openapi_extra=_CHAT_BODY,
    )
    async def chat_stream(http: Request) -> Response:
        """The same turn as ``/api/chat``, as NDJSON events. A request the server refuses gets a 4xx
        JSON error before any event (as does a store or an MCP server that is down: 503); a failure
        during the run ends the stream with an ``error`` event."""
        body = await _chat_body(http)
        try:
            request = _agent_request(body, caller_of(http), "stream")
        except Exception as exc:
            return _failure(exc, None)
        http.state.conversation_id = request.conversation_id  # for the access log
        events = runs.stream(served.ahandle_stream(request))
        try:
            first: StreamEvent | None = await anext(events)
        except StopAsyncIteration:
            first = None
        except Exception as exc:
            return _failure(exc, request.conversation_id)
        if isinstance(first, RunFailed):
            error = http_error(first.exception or RuntimeError(first.error), first.conversation_id)
            # Refused, or the store is down before anything happened: a plain HTTP error, no stream.
            if error.is_client_error or error.code in ("store_unavailable", "toolset_unavailable"):
                _log(error, first.exception)
                return _error_response(error)
        lines = _stream_lines(first, events, request.conversation_id)
        return StreamingResponse(lines, media_type="application/x-ndjson", headers=STREAM_HEADERS)

    # Starlette tries routes in order and FastAPI registered its docs first: the routes every turn
    # hits go to the front (about a tenth of the framework's cost of a turn, measured with callgrind).
    app.router.routes.sort(key=lambda route: getattr(route, "path", None) not in _TURN_PATHS)
    _document_chat_body(app)
    return app


# The turn routes read their body themselves (_chat_body) rather than through a FastAPI parameter:
# pydantic parses the JSON text in one call, where FastAPI's dependency machinery cost a tenth of an
# answer's CPU time on the server. The OpenAPI document still describes the body as ChatRequest.
_CHAT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}},
    }
}


async def _chat_body(http: Request) -> ChatRequest:
    """The request's body as a ChatRequest; a RequestValidationError (the 422 every route gives for a
    bad body, naming the field) if it is not one."""
    try:
        return ChatRequest.model_validate_json(await http.body())
    except ValidationError as exc:
        problems = [
            {**problem, "loc": ("body", *problem["loc"])} for problem in exc.errors(include_url=False)
        ]
        raise RequestValidationError(problems) from None


def _document_chat_body(app: FastAPI) -> None:
    """Put ChatRequest (and the models it uses) in the OpenAPI document's components."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()  # FastAPI keeps it as app.openapi_schema
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            chat = ChatRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(chat.pop("$defs", {}))
            schemas["ChatRequest"] = chat
            return document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


_TURN_PATHS = frozenset({"/api/chat", "/api/chat-stream"})


def _agent_request(body: ChatRequest, caller: Caller, entrance: str) -> AgentRequest:
    payload = request_payload(body)
    request = AgentRequest.from_messages(
        payload["messages"],
        conversation_id=payload.get("conversation_id"),
        platform_context=payload.get("platform_context"),
        user=caller.name,
    )
    return authorized(request, caller, entrance)


async def _stream_lines(
    first: StreamEvent | None, events: AsyncIterator[StreamEvent], conversation_id: str | None
) -> AsyncIterator[bytes]:
    request_id = current_request_id()
    try:
        event = first
        while event is not None:
            if isinstance(event, RunFailed):
                yield ndjson(_error_event(event, request_id))
                return
            for line in event_lines(event, request_id):
                yield ndjson(line)
            try:
                event = await anext(events)
            except StopAsyncIteration:
                event = None
    except Exception as exc:
        error = http_error(exc, conversation_id)
        _log(error, exc)
        yield ndjson({"type": "error", "status": error.status, **error.body(request_id)})
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


def _error_event(failed: RunFailed, request_id: str) -> dict[str, Any]:
    error = http_error(failed.exception or RuntimeError(failed.error), failed.conversation_id)
    _log(error, failed.exception)
    return {"type": "error", "status": error.status, **error.body(request_id)}


def _failure(exc: Exception, conversation_id: str | None) -> JSONResponse:
    error = http_error(exc, conversation_id)
    _log(error, exc)
    return _error_response(error)


def _error_response(error: HttpError) -> JSONResponse:
    return JSONResponse(error.body(current_request_id()), status_code=error.status)


def _log(error: HttpError, exc: BaseException | None) -> None:
    request_id = current_request_id()
    if error.status == 500:
        logger.error("request %s failed", request_id, exc_info=exc, extra={"request_id": request_id})
    elif error.status >= 500:
        logger.warning("request %s: %s: %s", request_id, error.code, error.message)
    else:
        logger.info("request %s refused: %s: %s", request_id, error.code, error.message)


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
