"""The A2A protocol for a served agent (``create_app(agent, a2a=True)``).

- ``GET /.well-known/agent-card.json`` (and the older ``/.well-known/agent.json``): the agent card.
- ``POST /a2a``: JSON-RPC as the official ``a2a-sdk`` speaks it, 1.0 names (``SendMessage``,
  ``SendStreamingMessage``, ``GetTask``, ``CancelTask``, ``ListTasks``) and 0.3 names
  (``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``). The SDK's dispatcher parses
  the requests; its request handler (``DcafRequestHandler``) answers them from the conversation store.
- ``POST /a2a/tasks/send``, ``GET /a2a/tasks/{id}``: the same tasks in plain JSON.

The SDK is imported only here, when an app is built with ``a2a=True``.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from dcaf_like.application.errors import ConversationNotFound, NotStorable
from dcaf_like.application.ports import ServedAgent, ToolProvider
from dcaf_like.application.storable import check_storable
from dcaf_like.application.tasks import TaskNotFound, TaskRefused, TaskState, TaskView
from dcaf_like.domain import Attachment, InvalidPart, attachment
from dcaf_like.domain.attachment import check_total
from dcaf_like.extras import missing
from dcaf_like.helpdesk.protocol import read_content
from dcaf_like.helpdesk.wire import (
    MAX_CONVERSATION_ID,
    TASK_ID_PATTERN,
    ConversationId,
    TaskId,
    is_conversation_id,
    is_task_id,
)
from dcaf_like.server.a2a_tasks import A2ATasks, Incoming, task_data, task_dict
from dcaf_like.server.auth import ANYONE, Caller, caller_of
from dcaf_like.server.detached import Runs
from dcaf_like.server.errors import HttpError, http_error
from dcaf_like.server.failures import error_response
from dcaf_like.version import __version__

if TYPE_CHECKING:
    from a2a.server.context import ServerCallContext
    from a2a.types.a2a_pb2 import AgentCard, Message, Task

RPC_PATH = "/a2a"
CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")

_STATES = {
    TaskState.SUBMITTED: "TASK_STATE_SUBMITTED",
    TaskState.WORKING: "TASK_STATE_WORKING",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
}


def add_a2a_routes(app: FastAPI, served: ServedAgent, runs: Runs | None = None) -> A2ATasks:
    """The A2A routes of `served` on `app`; the tasks they start, for the server to wait for at shutdown."""
    try:
        from a2a.server.routes.common import DefaultServerCallContextBuilder
        from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
    except ImportError as exc:
        raise missing(f"a2a=True needs the A2A SDK ({exc.name} is missing)", "a2a", exc) from exc

    tasks = A2ATasks(served, runs)

    class WithIdentity(DefaultServerCallContextBuilder):
        """Who is calling (the API key's identity) is who decided, as on the HelpDesk routes."""

        def build(self, request: Any) -> ServerCallContext:
            context: ServerCallContext = super().build(request)
            context.state["identity"] = getattr(request.state, "identity", "user")
            context.state["caller"] = caller_of(request)
            return context

    handler = request_handler(tasks)
    dispatcher = JsonRpcDispatcher(
        request_handler=handler, context_builder=WithIdentity(), enable_v0_3_compat=True
    )
    # The 0.3 side of the same endpoint (the SDK, pinned, keeps it there; an e2e test holds this).
    v03 = dispatcher._v03_adapter
    if v03 is not None:
        v03.handler = v03_handler(handler)

    async def rpc(request: Request) -> Any:
        """The SDK's dispatcher, after a body holding a number JSON cannot carry back (NaN, Infinity,
        ``1e999``) is refused naming where it is, as every entrance refuses it (the SDK would fail on
        it with an internal error)."""
        try:
            body = await request.json()
            check_storable(body.get("params") if isinstance(body, dict) else None, "params")
        except NotStorable as exc:
            error = {
                "code": -32602,
                "message": str(exc),
                "data": {"code": "not_storable", "field": exc.field},
            }
            return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "error": error})
        except ValueError:
            pass  # not JSON: the dispatcher answers it as JSON-RPC says
        return await dispatcher.handle_requests(request)

    app.add_route(RPC_PATH, rpc, methods=["POST"], include_in_schema=False)

    async def card(request: Request) -> JSONResponse:
        from a2a.server.request_handlers.response_helpers import agent_card_to_dict

        base = str(request.base_url).rstrip("/")
        return JSONResponse(agent_card_to_dict(agent_card(served, base + RPC_PATH)))

    for path in CARD_PATHS:
        app.add_api_route(path, card, methods=["GET"], tags=["a2a"], summary="The A2A agent card")

    @app.post("/a2a/tasks/send", tags=["a2a"], response_model=None)
    async def send_task(body: SendTask, http: Request) -> JSONResponse:
        """Send a message: start a task, or resume one waiting for input with decisions in ``data``.
        Answers with the task (``wait: false``: as soon as it started)."""
        try:
            text, attachments = read_content(body.message, "message")
            incoming = Incoming(text, body.data or {}, body.task_id, body.context_id, attachments)
            view = await tasks.send(incoming, caller=caller_of(http), wait=body.wait)
        except Exception as exc:
            return _error(exc)
        return JSONResponse(task_dict(view))

    @app.get("/a2a/tasks/{task_id}", tags=["a2a"], response_model=None)
    async def get_task(
        task_id: Annotated[str, Path(max_length=MAX_CONVERSATION_ID + 10, pattern=TASK_ID_PATTERN)],
        http: Request,
    ) -> JSONResponse:
        """A task's state, read from the store: any worker sharing it answers."""
        try:
            caller = caller_of(http)
            caller.require("read", "read tasks")
            view = await tasks.get(task_id, caller)
        except Exception as exc:
            return _error(exc)
        return JSONResponse(task_dict(view))

    return tasks


class SendTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: StrictStr | list[dict[str, Any]] = Field(
        "",
        description="The text for the agent, or a list of parts as a HelpDesk message's content (text, "
        "images, files: docs/protocol.md).",
    )
    data: dict[str, Any] | None = Field(
        None,
        description="Decisions on pending calls, as the HelpDesk protocol's `data.tool_calls`; answers to "
        "questions, as its `data.answers`.",
    )
    task_id: TaskId | None = Field(None, description="A task's id, as the server gave it.")
    context_id: ConversationId | None = Field(
        None, description="The conversation: at most 128 characters of A-Z a-z 0-9 . _ : -"
    )
    wait: StrictBool = Field(True, description="Answer when the run ends (true) or once it started.")


def _error(exc: Exception) -> JSONResponse:
    match exc:
        case TaskNotFound():
            error = HttpError(404, "task_not_found", str(exc))
        case TaskRefused():
            error = HttpError(409, "task_not_waiting", str(exc))
        case _:
            error = http_error(exc)
    return error_response(error)


def agent_card(served: ServedAgent, url: str) -> AgentCard:
    from a2a.types.a2a_pb2 import AgentCard
    from google.protobuf.json_format import ParseDict

    tools = served.tools if isinstance(served, ToolProvider) else ()
    skills = [
        {
            "id": t.name,
            "name": t.name,
            "description": t.description,
            "tags": ["requires-approval" if t.requires_approval else "runs-without-approval"],
        }
        for t in tools
    ] or [{"id": "answer", "name": "answer", "description": "Answers in text.", "tags": ["chat"]}]
    modes = ["text/plain", "application/json"]
    card: AgentCard = ParseDict(
        {
            "name": served.name,
            "description": served.description or f"{served.name}, a dcaf_like agent",
            "version": __version__,
            # One endpoint speaks both: 1.0 method names and 0.3 ones (which older clients send).
            "supportedInterfaces": [
                {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            ],
            "capabilities": {"streaming": True},
            "defaultInputModes": modes,
            "defaultOutputModes": modes,
            "skills": skills,
        },
        AgentCard(),
    )
    return card


# -- the JSON-RPC side: the SDK's RequestHandler over A2ATasks ------------------------------------


def request_handler(tasks: A2ATasks) -> Any:
    """A2A's ``RequestHandler`` answering from the store (defined here so the SDK loads lazily)."""
    from a2a.server.request_handlers.request_handler import RequestHandler
    from a2a.types.a2a_pb2 import Artifact, Part, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
    from a2a.utils.errors import (
        PushNotificationNotSupportedError,
        TaskNotCancelableError,
        UnsupportedOperationError,
    )

    async def _read(task_id: str, context: ServerCallContext) -> TaskView:
        caller = _caller(context)
        caller.require("read", "read tasks")
        return await tasks.get(task_id, caller)

    async def _cancel(task_id: str, context: ServerCallContext) -> TaskView:
        caller = _caller(context)
        caller.require("approve", "cancel tasks")
        return await tasks.cancel(task_id, caller=caller)

    class DcafRequestHandler(RequestHandler):
        async def on_message_send(self, params: Any, context: ServerCallContext) -> Task:
            incoming = _incoming(params.message)
            wait = not params.configuration.return_immediately
            view = await _a2a_errors(tasks.send(incoming, caller=_caller(context), wait=wait))
            return task_proto(view)

        async def on_message_send_stream(
            self, params: Any, context: ServerCallContext
        ) -> AsyncGenerator[Any]:
            deltas: asyncio.Queue[str] = asyncio.Queue()
            beginning = tasks.begin(_incoming(params.message), caller=_caller(context), deltas=deltas)
            task_id, run, resumes = await _a2a_errors(beginning)
            if resumes:
                # Whether the decisions are honoured is known once applied: answer with the outcome.
                await _a2a_errors(run)
                yield task_proto(await tasks.get(task_id, _caller(context)))
                return
            # The run goes on if the client hangs up; the task's state says how it ended.
            running = tasks.in_background(run, task_id)
            yield task_proto(await tasks.get(task_id, _caller(context)))
            answer = f"{task_id}-answer"
            async for text in _until_done(deltas, running):
                yield TaskArtifactUpdateEvent(
                    task_id=task_id,
                    context_id=task_id.rpartition("~")[0],
                    artifact=Artifact(artifact_id=answer, name="answer", parts=[Part(text=text)]),
                    append=True,
                )
            view = await tasks.get(task_id, _caller(context))
            full = task_proto(view)
            for artifact in full.artifacts:  # the whole answer, with the calls that ran, replaces the pieces
                yield TaskArtifactUpdateEvent(
                    task_id=view.id, context_id=view.context_id, artifact=artifact, last_chunk=True
                )
            yield TaskStatusUpdateEvent(task_id=view.id, context_id=view.context_id, status=full.status)

        async def on_get_task(self, params: Any, context: ServerCallContext) -> Task:
            view = await _a2a_errors(_read(params.id, context))
            return task_proto(view, history_length=params.history_length or None)

        async def on_cancel_task(self, params: Any, context: ServerCallContext) -> Task:
            canceling = _cancel(params.id, context)
            return task_proto(await _a2a_errors(canceling, refused=TaskNotCancelableError))

        async def on_list_tasks(self, params: Any, context: ServerCallContext) -> Any:
            raise UnsupportedOperationError("listing tasks is not supported; read a task by its id")

        async def on_subscribe_to_task(self, params: Any, context: ServerCallContext) -> AsyncGenerator[Any]:
            nothing: tuple[Any, ...] = ()  # an async generator, as the SDK expects, that yields nothing
            for event in nothing:
                yield event
            raise UnsupportedOperationError("subscribing to a task is not supported; poll GetTask")

        async def on_get_extended_agent_card(self, params: Any, context: ServerCallContext) -> Any:
            raise UnsupportedOperationError("this agent has no extended card")

        async def on_create_task_push_notification_config(self, params: Any, context: Any) -> Any:
            raise PushNotificationNotSupportedError()

        async def on_get_task_push_notification_config(self, params: Any, context: Any) -> Any:
            raise PushNotificationNotSupportedError()

        async def on_list_task_push_notification_configs(self, params: Any, context: Any) -> Any:
            raise PushNotificationNotSupportedError()

        async def on_delete_task_push_notification_config(self, params: Any, context: Any) -> Any:
            raise PushNotificationNotSupportedError()

    return DcafRequestHandler()


def v03_handler(handler: Any) -> Any:
    """The SDK's 0.3 request handler over `handler`, but a stream's status-update on an interrupted
    state (``input-required``: a call waits for a decision, a question for its answer) is ``final``,
    as the 0.3 spec says: the stream ends there, and the next message goes on. The SDK's conversion
    marks only the terminal states final (1.0 has no such flag: its stream just ends)."""
    from a2a.compat.v0_3 import types as types_v03
    from a2a.compat.v0_3.request_handler import RequestHandler03

    interrupted = (types_v03.TaskState.input_required, types_v03.TaskState.auth_required)

    class Interrupted03(RequestHandler03):
        async def on_message_send_stream(
            self, request: Any, context: ServerCallContext
        ) -> AsyncGenerator[Any]:
            async for response in super().on_message_send_stream(request, context):
                event = response.result
                if isinstance(event, types_v03.TaskStatusUpdateEvent) and event.status.state in interrupted:
                    response = response.model_copy(
                        update={"result": event.model_copy(update={"final": True})}
                    )
                yield response

    return Interrupted03(request_handler=handler)


async def _until_done(deltas: asyncio.Queue[str], running: asyncio.Future[None]) -> AsyncIterator[str]:
    """The pieces of text put in `deltas` until the run is over (and then those left)."""
    while not running.done():
        getting: asyncio.Future[Any] = asyncio.ensure_future(deltas.get())
        try:
            await asyncio.wait([getting, running], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getting.done():
                getting.cancel()
        if getting.done() and not getting.cancelled():
            yield getting.result()
    while not deltas.empty():
        yield deltas.get_nowait()


async def _a2a_errors(awaitable: Any, *, refused: type[Exception] | None = None) -> Any:
    """Our refusals as A2A errors: a refused decision is invalid params naming the call and why."""
    from a2a.utils.errors import InternalError, InvalidParamsError, TaskNotFoundError

    try:
        return await awaitable
    except (TaskNotFound, ConversationNotFound) as exc:  # another identity's task or context too
        raise TaskNotFoundError(str(exc)) from exc
    except TaskRefused as exc:
        if refused is not None:
            raise refused(str(exc)) from exc
        raise InvalidParamsError(str(exc), data={"code": "task_not_waiting"}) from exc
    except Exception as exc:
        error = http_error(exc)
        if error.is_client_error:
            named = {"call_id": error.call_id, "field": error.field}
            data = {"code": error.code, **{k: v for k, v in named.items() if v is not None}}
            raise InvalidParamsError(error.message, data=data) from exc
        raise InternalError(f"{error.code}: {error.message}") from exc


def _caller(context: ServerCallContext) -> Caller:
    caller = context.state.get("caller")
    return caller if isinstance(caller, Caller) else ANYONE


def _incoming(message: Message) -> Incoming:
    """Text parts joined; data parts merged (decisions ride in ``tool_calls``); file parts (bytes, or
    an image's URL, which this server never fetches) the message's attachments, in their order."""
    from google.protobuf.json_format import MessageToDict

    texts: list[str] = []
    data: dict[str, Any] = {}
    attachments: list[Attachment] = []
    for j, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind in ("raw", "url"):
            try:
                attachments.append(_attachment(part, index=len(attachments)))
                check_total(attachments)
            except InvalidPart as exc:
                exc.field = f"message.parts[{j}]"
                raise _refused_part(exc) from exc
        elif kind == "data":
            value = MessageToDict(part)["data"]
            if not isinstance(value, dict):
                raise _invalid('a data part must hold an object, e.g. {"tool_calls": [...]}')
            for key, item in value.items():
                if key == "tool_calls" and isinstance(item, list):
                    data.setdefault("tool_calls", []).extend(item)
                else:
                    data[key] = item
        else:
            raise _invalid(f"this agent reads text, file and data parts, not {kind or 'empty'} parts")
    if not is_conversation_id(message.context_id):
        raise _invalid("context_id: at most 128 characters of A-Z a-z 0-9 . _ : -", field="context_id")
    if message.task_id and not is_task_id(message.task_id):
        raise _invalid("task_id: not a task id this server gives", field="task_id")
    return Incoming(
        "\n".join(texts),
        data,
        task_id=message.task_id or None,
        context_id=message.context_id or None,
        attachments=tuple(attachments),
    )


def _attachment(part: Any, *, index: int) -> Attachment:
    """A file part as an attachment: inline bytes are an image (an ``image/*`` media type) or a file
    (named by its filename); a URL only an image's, which the model's provider reads, never this server."""
    media_type = part.media_type or None
    is_image = (media_type or "").startswith("image/")
    if part.WhichOneof("content") == "url":
        if not is_image:
            raise InvalidPart(
                index,
                "a file part by URL must be an image (mediaType image/...): this server fetches nothing, "
                "send a file's bytes inline (raw)",
            )
        return attachment(
            "image", media_type=media_type, url=part.url, name=part.filename or None, index=index
        )
    kind = "image" if is_image else "file"
    data = base64.b64encode(part.raw).decode("ascii")
    return attachment(kind, media_type=media_type, data=data, name=part.filename or None, index=index)


def _refused_part(exc: InvalidPart) -> Exception:
    """A part refused, as A2A's invalid params naming it (``part_too_large`` or ``invalid_part``)."""
    from a2a.utils.errors import InvalidParamsError

    error = http_error(exc)
    return InvalidParamsError(error.message, data={"code": error.code, "field": error.field})


def _invalid(message: str, field: str | None = None) -> Exception:
    from a2a.utils.errors import InvalidParamsError

    return InvalidParamsError(message, data={"field": field} if field else None)


def task_proto(view: TaskView, *, history_length: int | None = None) -> Task:
    from a2a.types.a2a_pb2 import Task
    from google.protobuf.json_format import ParseDict

    def message(
        role: str,
        text: str,
        key: str,
        data: dict[str, Any] | None = None,
        attachments: tuple[Attachment, ...] = (),
    ) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        parts += [_history_part(a) for a in attachments]
        if data is not None:
            parts.append({"data": data})
        return {
            "messageId": f"{view.id}-{key}",
            "role": role,
            "parts": parts or [{"text": ""}],
            "taskId": view.id,
            "contextId": view.context_id,
        }

    history = [
        message("ROLE_USER" if role == "user" else "ROLE_AGENT", text, f"m{i}", attachments=attachments)
        for i, (role, text, attachments) in enumerate(view.history)
    ]
    if history_length is not None:
        history = history[-history_length:] if history_length > 0 else []
    status_text = view.note if view.state in (TaskState.FAILED, TaskState.CANCELED) else view.text
    if view.state is TaskState.INPUT_REQUIRED and view.questions:  # what the next message answers
        status_text = "\n".join(q.prompt for q in view.questions)
    body: dict[str, Any] = {
        "id": view.id,
        "contextId": view.context_id,
        "status": {
            "state": _STATES[view.state],
            "message": message("ROLE_AGENT", status_text, "status", task_data(view)),
            "timestamp": _rfc3339(time.time()),
        },
        "history": history,
    }
    if view.state is TaskState.COMPLETED:
        body["artifacts"] = [
            {
                "artifactId": f"{view.id}-answer",
                "name": "answer",
                "parts": [{"text": view.text}, {"data": task_data(view)}],
            }
        ]
    task: Task = ParseDict(body, Task())
    return task


def _history_part(part: Attachment) -> dict[str, Any]:
    """An image or a file of a message in a task's history, without its bytes (docs/a2a.md): an image
    sent by URL is a file part with that URL; one sent inline is a data part describing it, since a
    file part holds either its bytes or a URL."""
    if part.url is not None:
        fields = {"url": part.url, "mediaType": part.media_type, "filename": part.name}
        return {k: v for k, v in fields.items() if v}
    described = {"kind": part.kind.value, "name": part.name, "mediaType": part.media_type, "size": part.size}
    return {"data": {"attachment": {k: v for k, v in described.items() if v is not None}}}


def _rfc3339(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
