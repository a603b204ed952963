"""The HelpDesk protocol's turn routes: ``POST /api/chat`` and ``POST /api/chat-stream``.

A body is validated once: pydantic checks its shape (``wire.ChatRequest``, strict), then
:func:`agent_request` applies the protocol's rules to the typed body and builds the AgentRequest the
agent takes. The answer is written by ``dcaf_like.helpdesk.protocol``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from dcaf_like.application.dto import AgentRequest, QuestionView
from dcaf_like.application.errors import InvalidRequest
from dcaf_like.application.events import RunFailed, RunStarted, StreamEvent
from dcaf_like.application.ports import ServedAgent
from dcaf_like.application.run_events import RunLines
from dcaf_like.application.tasks import answered_by_text
from dcaf_like.domain import OpenQuestions, QuestionKind
from dcaf_like.helpdesk.protocol import (
    Stamps,
    assistant_message,
    event_lines,
    request_of,
)
from dcaf_like.helpdesk.wire import ChatRequest, ChatResponse, ErrorBody
from dcaf_like.server.auth import Caller, caller_of, decisions_checked
from dcaf_like.server.detached import Runs, ShuttingDown
from dcaf_like.server.errors import http_error
from dcaf_like.server.failures import audit_refused, error_response, failure, log_failure
from dcaf_like.server.middleware import current_request_id
from dcaf_like.server.run_events import sent

TURN_PATHS = frozenset({"/api/chat", "/api/chat-stream"})
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "The request is malformed (its body, or the framing of its body); `error.field` names where.",
        403: "A cross-origin request, an edit of a tool that does not allow editing, a call the policy "
        "denies as it would run, or the API key lacks a scope.",
        404: "The tool call was never proposed (or the question never asked) in this conversation, or the "
        "conversation is not yours.",
        409: "Already decided or answered, not the proposal, in another platform context, calls or questions "
        "still waiting, or a concurrent turn won.",
        410: "The approval window of the call has closed.",
        413: "The body is over the server's limit.",
        415: "The body is not sent as JSON (`Content-Type: application/json`).",
        421: "The `Host` is not one this server answers for (DNS rebinding).",
        422: "The body does not have the protocol's shape, edited arguments break the tool's schema, or an "
        "answer is not one the question takes.",
        500: "The server failed; the log has the details under the request id.",
        502: "The model runtime failed.",
        503: "The model is rate limited, or the conversation store or a toolset (MCP server) is unavailable.",
        504: "The model runtime timed out.",
    }.items()
}

# The turn routes read their body themselves (chat_body) rather than through a FastAPI parameter:
# pydantic parses the JSON text in one call, without FastAPI's dependency machinery (its cost is in
# docs/benchmarks.md, "Figures behind the code's choices"). The OpenAPI document still describes the
# body as ChatRequest.
_CHAT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}},
    }
}


def add_chat_routes(app: FastAPI, served: ServedAgent, runs: Runs) -> None:
    """The turn routes of `served`, on `app` itself (not through a router, whose routes FastAPI nests:
    every turn would first be matched against the routes before them); each turn runs in `runs`,
    apart from its request. A plain route before each answers first
    (:mod:`dcaf_like.server._turn_dispatch`)."""

    @app.post(
        "/api/chat",
        tags=["helpdesk"],
        response_model=None,
        responses={200: {"model": ChatResponse}, **ERRORS},
        openapi_extra=_CHAT_BODY,
    )
    async def chat(http: Request) -> Response:
        """One turn: a user message, decisions on pending tool calls, or both. Answers with the
        assistant's message; ``data`` always lists pending and executed calls and the session."""
        body = await chat_body(http)
        try:
            request = agent_request(body, caller_of(http), "http", served.clock())
        except Exception as exc:
            await audit_refused(served, exc)
            return failure(exc, None)
        http.state.conversation_id = request.conversation_id  # for the access log
        try:
            try:
                response = await runs.run(served.ahandle(request))
            except OpenQuestions as waiting:
                answering = await answer_in_text(served, request, waiting)
                if answering is None:
                    raise
                response = await runs.run(served.ahandle(answering))
        except Exception as exc:
            return failure(exc, request.conversation_id)
        http.state.conversation_id = response.conversation_id
        return JSONResponse(assistant_message(response, request_id=current_request_id()))

    @app.post(
        "/api/chat-stream",
        tags=["helpdesk"],
        response_model=None,
        responses={
            200: {
                "description": "NDJSON events, one per line, each flushed as it happens.",
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            },
            **ERRORS,
        },
        openapi_extra=_CHAT_BODY,
    )
    async def chat_stream(http: Request) -> Response:
        """The same turn as ``/api/chat``, as NDJSON events. A request the server refuses gets a 4xx
        JSON error before any event (as does a store or an MCP server that is down: 503); a failure
        during the run ends the stream with an ``error`` event."""
        body = await chat_body(http)
        try:
            request = agent_request(body, caller_of(http), "stream", served.clock())
        except Exception as exc:
            await audit_refused(served, exc)
            return failure(exc, None)
        http.state.conversation_id = request.conversation_id  # for the access log
        try:
            events, first = await _started(runs, served, request)
            if isinstance(first, RunFailed) and isinstance(first.exception, OpenQuestions):
                answering = await answer_in_text(served, request, first.exception)
                if answering is not None:
                    await events.aclose()
                    events, first = await _started(runs, served, answering)
        except Exception as exc:
            return failure(exc, request.conversation_id)
        if isinstance(first, RunFailed):
            error = http_error(first.exception or RuntimeError(first.error), first.conversation_id)
            # Refused, or the store is down before anything happened: a plain HTTP error, no stream.
            if error.is_client_error or error.code in ("store_unavailable", "toolset_unavailable"):
                log_failure(error, first.exception)
                return error_response(error)
        lines = _written(runs, first, events, request.conversation_id)
        return StreamingResponse(sent(lines), media_type="application/x-ndjson", headers=STREAM_HEADERS)


async def _started(
    runs: Runs, served: ServedAgent, request: AgentRequest
) -> tuple[AsyncGenerator[StreamEvent], StreamEvent | None]:
    """The streamed run of `request`, and its first event (None: it had none)."""
    events = runs.stream(served.ahandle_stream(request))
    try:
        return events, await anext(events)
    except StopAsyncIteration:
        return events, None


async def answer_in_text(
    served: ServedAgent, request: AgentRequest, waiting: OpenQuestions
) -> AgentRequest | None:
    """`request`, refused because questions wait (`waiting`), as the answer to the one question its
    conversation waits on, as A2A takes the next message to a task that waits for input: a message of
    text and nothing else (no decisions, answers, images or files) that reads as an answer (``yes`` /
    ``no`` for a confirmation, one of the options for a selection, any text for a text question). The
    answer is then checked, claimed and audited like one sent in ``data.answers``. None when it is
    not one: the message is a new one, and the refusal stands (409 ``questions_open``)."""
    if len(waiting.question_ids) != 1 or request.decisions or request.answers or request.attachments:
        return None
    repository = served.repository
    if not request.text or repository is None or request.conversation_id is None:
        return None
    conversation = await repository.aget(request.conversation_id)  # the refusal: it is the caller's
    question = conversation.questions.get(waiting.question_ids[0]) if conversation is not None else None
    if conversation is None or question is None or not question.is_open:
        return None
    asked_by = conversation.tool_call(question.call_id).name
    try:  # as A2A reads it
        answered = answered_by_text(QuestionView.of(question, asked_by), request.text)
    except InvalidRequest:
        return None  # neither yes nor no
    if question.kind is QuestionKind.SELECTION and answered.value not in question.options:
        return None
    return replace(request, text="", answers=(answered,))


async def chat_body(http: Request) -> ChatRequest:
    """The request's body as a ChatRequest; a RequestValidationError (the 422 every route gives for a
    bad body, naming the field) if it is not one."""
    try:
        return ChatRequest.model_validate_json(await http.body())
    except ValidationError as exc:
        problems = [
            {**problem, "loc": ("body", *problem["loc"])} for problem in exc.errors(include_url=False)
        ]
        raise RequestValidationError(problems) from None


def agent_request(body: ChatRequest, caller: Caller, entrance: str, at: float | None = None) -> AgentRequest:
    """The turn a validated body asks for (the protocol's one reader, :func:`request_of`), as `caller`
    may ask it: its decisions checked against the key's scopes (a refusal audited), and who is asking
    taken from the key alone."""
    request = request_of(body, user=caller.name)
    chats = bool(request.text or request.answers)
    decisions_checked(caller, request.decisions, request.conversation_id, entrance, at, chats=chats)
    return replace(
        request,
        owner=caller.owner,
        sees_all=caller.sees_all,
        entrance=entrance,
        identity=caller.identity,
    )


def document_chat_body(app: FastAPI) -> None:
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


def _written(
    runs: Runs, first: StreamEvent | None, events: AsyncGenerator[StreamEvent], conversation_id: str | None
) -> RunLines:
    """The lines of the streamed run, written as the run produces them by a task of their own (the
    server waits for it at shutdown), whether its client reads them or went away: kept in the
    server's run log under the run's conversation, so a client whose stream dropped reads on from the
    last ``seq`` it saw (docs/protocol.md, "Resuming a stream")."""
    request_id = current_request_id()
    if isinstance(first, RunStarted):
        lines = runs.log.open(first.conversation_id, request_id)
    else:  # refused or failed before the turn began: nothing to resume
        lines = RunLines(conversation_id or "", request_id)
    runs.keep(_write(first, events, lines, conversation_id, request_id))
    return lines


async def _write(
    first: StreamEvent | None,
    events: AsyncGenerator[StreamEvent],
    lines: RunLines,
    conversation_id: str | None,
    request_id: str,
) -> None:
    stamps = Stamps()
    try:
        event = first
        while event is not None:
            if isinstance(event, RunFailed):
                lines.append(stamps.stamp(_error_event(event, request_id)))
                return
            for line in event_lines(event, request_id):
                lines.append(stamps.stamp(line))
            try:
                event = await anext(events)
            except StopAsyncIteration:
                event = None
    except asyncio.CancelledError:  # a shutdown past its grace period: the stream says so
        error = http_error(ShuttingDown(), conversation_id)
        lines.append(stamps.stamp({"type": "error", "status": error.status, **error.body(request_id)}))
        raise
    except Exception as exc:
        error = http_error(exc, conversation_id)
        log_failure(error, exc)
        lines.append(stamps.stamp({"type": "error", "status": error.status, **error.body(request_id)}))
    finally:
        lines.finish()
        await events.aclose()


def _error_event(failed: RunFailed, request_id: str) -> dict[str, Any]:
    error = http_error(failed.exception or RuntimeError(failed.error), failed.conversation_id)
    log_failure(error, failed.exception)
    return {"type": "error", "status": error.status, **error.body(request_id)}
