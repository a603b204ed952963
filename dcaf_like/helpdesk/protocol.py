"""The HelpDesk protocol: its messages read into an AgentRequest, and written back.

The protocol's shape is described once, by the models of :mod:`dcaf_like.helpdesk.wire` (strict:
``"execute": "yes"`` is a type error, not an approval), and read once, by :func:`request_of`: an HTTP
body FastAPI validated (``server/chat.py``), plain data (``Agent.run(messages)``: :func:`read_messages`)
and an A2A message's data part (:func:`read_data`) all go through them, and a refusal names the field
(``messages[1].data.tool_calls[0].execute``).

Writing turns the application's results into the protocol's dicts: :func:`assistant_message`, the
three forms of a call and the two of a command (a call of the command tool, ``run_command``), the
messages a custom agent function receives (:func:`function_messages`) and the NDJSON lines of a
streamed turn (:func:`event_lines`).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from dcaf_like.application.command_runner import RUN_COMMAND, command_argv
from dcaf_like.application.dto import (
    AgentRequest,
    AgentResponse,
    AttachmentView,
    QuestionAnswer,
    QuestionView,
    ToolCallView,
    ToolDecision,
)
from dcaf_like.application.errors import InvalidRequest
from dcaf_like.application.events import (
    ApprovalRequired,
    CancelRequested,
    Done,
    QuestionAsked,
    RunFailed,
    RunStarted,
    StreamEvent,
    ToolCallProposed,
    ToolFinished,
    ToolProgress,
    ToolQueued,
    ToolRejected,
    ToolStarted,
    UserMessageRead,
)
from dcaf_like.application.messages import ReasoningDelta, TextDelta
from dcaf_like.application.notifications import approvals_of as shown_approvals
from dcaf_like.domain.attachment import Attachment, InvalidPart, PartKind, attachment, check_total
from dcaf_like.domain.grant import grant_of
from dcaf_like.domain.session import json_problem

Messages = str | Sequence[Mapping[str, Any] | str]
"""A user's text, or HelpDesk message dicts (the last one is the user's turn)."""

if TYPE_CHECKING:
    from pydantic import BaseModel

    from dcaf_like.helpdesk.wire import ChatRequest, MessageData, MessageIn

M = TypeVar("M", bound="BaseModel")

# -- reading: the rules every reader applies --------------------------------------------------------


def decision(
    call_id: str,
    *,
    execute: bool,
    name: str | None = None,
    arguments: Mapping[str, Any] | None = None,
    edited: Mapping[str, Any] | None = None,
    reason: str | None = None,
    rejected: bool = False,
    preview_digest: str | None = None,
) -> ToolDecision | None:
    """What a call echoed back decides: ``execute: true`` approves; ``execute: false`` with a rejection
    reason (or ``rejected: true``) rejects; a call echoed back undecided is no decision (None)."""
    if execute:
        return ToolDecision(call_id, True, name, arguments, edited, preview_digest=preview_digest)
    if reason is not None or rejected:
        return ToolDecision(call_id, False, name, arguments, reason=reason or "")
    return None


def read_content(
    content: Any, path: str, *, parts_allowed: bool = True
) -> tuple[str, tuple[Attachment, ...]]:
    """A message's ``content`` at `path`: a string, or a list of parts (``{"type": "text", "text":
    ...}``, ``{"type": "image", "url": ...}`` or ``{"type": "image", "media_type": ..., "data":
    <base64>}``, ``{"type": "file", "name": ..., "media_type": ..., "data": <base64>}``): the text
    parts joined by a blank line, and the others as attachments in their order. A part that is not
    one, or too large (:class:`~dcaf_like.domain.PartTooLarge`), is refused naming its path; so is any
    part but text where `parts_allowed` is False (a message of the history)."""
    if content is None:
        return "", ()
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        raise InvalidRequest(path, f"expected a string or a list of parts, got {type(content).__name__}")
    texts: list[str] = []
    attachments: list[Attachment] = []
    for j, part in enumerate(content):
        where = f"{path}[{j}]"
        if not isinstance(part, Mapping):
            raise InvalidRequest(where, f"expected a part (an object), got {type(part).__name__}")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest(f"{where}.text", "expected a string")
            texts.append(text)
            continue
        if not parts_allowed:
            raise InvalidRequest(where, "only the user's last message may carry images and files")
        fields = {k: part.get(k) for k in ("media_type", "data", "url", "name")}
        for key, value in fields.items():
            if value is not None and not isinstance(value, str):
                raise InvalidRequest(f"{where}.{key}", "expected a string")
        try:
            attachments.append(attachment(str(kind), index=len(attachments), **fields))
            check_total(attachments)
        except InvalidPart as exc:
            exc.field = where
            raise
    return "\n\n".join(texts), tuple(attachments)


#: The lists of a message's ``data`` that only the server writes: what ran, and its output.
SERVER_REPORTED = ("executed_tool_calls", "executed_cmds")


class ReportedRuns(InvalidRequest):
    """A user's turn that reports calls or commands as run (HTTP 422, naming the list): what ran is
    the server's to say."""


def refuse_reported_runs(data: Mapping[str, Any], path: str) -> None:
    """Refuse a user's turn (its ``data`` at `path`) that reports calls or commands as run: the server
    is the only source of what ran (its store records every call it ran), so a client's list is never
    read as one, and is refused rather than dropped unseen. An empty list, as seed 003's example
    sends, says nothing and is taken; in earlier messages the lists are the server's own answers
    echoed back, history like the rest."""
    for key in SERVER_REPORTED:
        reported = data.get(key)
        if reported is None or reported == []:
            continue
        if not isinstance(reported, list):
            raise InvalidRequest(f"{path}.{key}", f"expected a list, got {type(reported).__name__}")
        raise ReportedRuns(
            f"{path}.{key}",
            f"{key} is what the server ran, and only it reports it: a client's list is never taken as "
            "what ran; send what you ran yourself as text in the message's content",
        )


def users_turn_expected(path: str) -> InvalidRequest:
    """The refusal of a request whose last message (at `path`) is not the user's."""
    return InvalidRequest(f"{path}.role", "the last message must be the user's turn")


def command_refused(path: str) -> InvalidRequest:
    """The refusal of a client's ``cmds[].execute: true`` naming no command this server proposed."""
    return InvalidRequest(
        path,
        "a command runs only when this agent proposed it: send the id of the proposed command "
        "(a client's own command is never run)",
    )


def platform_context_in(
    top_level: Mapping[str, Any] | None, carried: Iterable[Mapping[str, Any] | None]
) -> dict[str, Any]:
    """The platform context a turn is in: the request's top-level ``platform_context``, else that of
    the latest message that carries one (`carried`, the messages' in order). A stateless client resends
    its whole history and may put the context on its first message only, as seed 003's example does:
    a message with none (or an empty object) leaves the one before it in force. Where the context is
    read from decides nothing about trust: the client writes all of it, and an approval runs only in
    the context its call was proposed in (ADR 12, ADR 31)."""
    if top_level:
        return dict(top_level)
    for context in reversed(list(carried)):
        if context:
            return dict(context)
    return {}


# -- reading a request: one reader, for HTTP bodies and plain data -----------------------------------


def read_messages(
    messages: Messages,
    *,
    conversation_id: str | None = None,
    platform_context: Mapping[str, Any] | None = None,
    session: Mapping[str, Any] | None = None,
    user: str = "user",
) -> AgentRequest:
    """HelpDesk messages as one turn: the last one is the user's (its text, and its decisions in
    ``data.tool_calls``), earlier ones are history. A string is the user's text alone; so is a string
    in the list, and a message without a ``role`` is the user's. The messages are checked by the same
    models as an HTTP body (:mod:`dcaf_like.helpdesk.wire`) and read by the same rules
    (:func:`request_of`)."""
    if session is not None and (problem := json_problem(dict(session), "session")):
        raise InvalidRequest("session", f"the session is saved as JSON: {problem}")
    if isinstance(messages, str):
        return AgentRequest(
            text=messages,
            conversation_id=conversation_id,
            platform_context=dict(platform_context or {}),
            session=session,
            user=user,
        )
    if not isinstance(messages, Sequence) or not messages:
        raise InvalidRequest("messages", "expected a non-empty list of messages")
    from dcaf_like.helpdesk.wire import ChatRequest  # pydantic, loaded when first needed

    plain = [_plain_message(m) for m in messages]
    body = _validated(ChatRequest, {"messages": plain, "platform_context": platform_context})
    if session is None and body.messages[-1].data is not None and body.messages[-1].data.session is not None:
        path = f"messages[{len(plain) - 1}].data.session"
        if problem := json_problem(body.messages[-1].data.session, path):
            raise InvalidRequest(path, f"the session is saved as JSON: {problem}")
    request = request_of(body, user=user)
    if conversation_id is not None:
        request = replace(request, conversation_id=conversation_id)
    return replace(request, session=session) if session is not None else request


def _plain_message(message: Any) -> Any:
    """A message of plain data as the wire's model reads it: a string is the user's text, and a
    message without a ``role`` is the user's (anything else is left for the model to refuse)."""
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if isinstance(message, Mapping):
        return {"role": "user", **message}
    return message


def request_of(body: ChatRequest, *, user: str) -> AgentRequest:
    """The turn a validated body asks for: the protocol's rules (the last message is the user's, its
    decisions and answers, no run reported by the client, no command run that this server did not
    propose) applied to what the models checked. Who is asking (`user`) is the entrance's to say."""
    messages = body.messages
    path = f"messages[{len(messages) - 1}]"
    last = messages[-1]
    if last.role != "user":
        raise users_turn_expected(path)
    decisions: tuple[ToolDecision, ...] = ()
    answers: tuple[QuestionAnswer, ...] = ()
    session = None
    if last.data is not None:
        decisions, answers = data_decisions(last.data, f"{path}.data")
        session = last.data.session
    text, attachments = read_content(last.content, f"{path}.content")
    history = (
        (m.role, read_content(m.content, f"messages[{i}].content", parts_allowed=False)[0])
        for i, m in enumerate(messages[:-1])
    )
    return AgentRequest(
        text=text,
        attachments=attachments,
        conversation_id=body.conversation_id or _named_conversation(messages),
        decisions=decisions,
        platform_context=platform_context_in(body.platform_context, (m.platform_context for m in messages)),
        session=session,
        history=tuple((role, content) for role, content in history if content),
        user=user,
        answers=answers,
    )


def data_decisions(
    data: MessageData, path: str
) -> tuple[tuple[ToolDecision, ...], tuple[QuestionAnswer, ...]]:
    """The decisions (on calls and on commands) and the answers a message's validated ``data`` (at
    `path`) carries; a user's turn that reports runs as its own is refused."""
    refuse_reported_runs({key: getattr(data, key) for key in SERVER_REPORTED}, path)
    decisions = tuple(
        found
        for call in data.tool_calls or ()
        if (
            found := decision(
                call.id,
                execute=call.execute,
                name=call.name,
                arguments=call.input,
                edited=call.edited_input,
                reason=call.rejection_reason,
                rejected=call.rejected,
                preview_digest=call.preview_digest,
            )
        )
        is not None
    )
    decisions += tuple(
        found
        for i, command in enumerate(data.cmds or ())
        if (
            found := command_decision(
                command.id,
                execute=command.execute,
                command=command.command,
                argv=command.argv,
                reason=command.rejection_reason,
                rejected=command.rejected,
                preview_digest=command.preview_digest,
                path=f"{path}.cmds[{i}]",
            )
        )
        is not None
    )
    answers = tuple(answer(a.id, a.value, declined=a.declined) for a in data.answers or ())
    return decisions, answers


def command_decision(
    call_id: str | None,
    *,
    execute: bool,
    command: str | None = None,
    argv: Sequence[str] | None = None,
    reason: str | None = None,
    rejected: bool = False,
    preview_digest: str | None = None,
    path: str,
) -> ToolDecision | None:
    """What a command echoed back decides: the decision on the call of the command tool its `id`
    names, bound to the argv the client shows (``argv``, or ``command`` split as a shell would, never
    run by one) and to the dry run it shows (``preview_digest``). A command without an id was never
    proposed here: asking to run it is refused."""
    if not call_id:
        if execute:
            raise command_refused(path)
        return None
    shown = list(argv) if argv is not None else None
    if command is not None:
        try:
            split = shlex.split(command)
        except ValueError as exc:
            raise InvalidRequest(f"{path}.command", f"not a command line: {exc}") from None
        if shown is not None and split != shown:
            raise InvalidRequest(f"{path}.command", "the command and its argv differ")
        shown = split
    arguments = {"argv": shown} if shown is not None else None
    return decision(
        call_id,
        execute=execute,
        name=RUN_COMMAND,
        arguments=arguments,
        reason=reason,
        rejected=rejected,
        preview_digest=preview_digest,
    )


def read_data(
    data: Mapping[str, Any], path: str = "data"
) -> tuple[tuple[ToolDecision, ...], tuple[QuestionAnswer, ...]]:
    """The decisions and answers of plain ``data`` (an A2A message's data part), checked by the same
    model as an HTTP body's (:class:`~dcaf_like.helpdesk.wire.MessageData`)."""
    from dcaf_like.helpdesk.wire import MessageData  # pydantic, loaded when first needed

    return data_decisions(_validated(MessageData, dict(data), path), path)


def _named_conversation(messages: Sequence[MessageIn]) -> str | None:
    """The conversation the messages' data names, the latest first (``thread_id`` is the seed's)."""
    for message in reversed(messages):
        if message.data is not None and (found := message.data.conversation_id or message.data.thread_id):
            return found
    return None


def _validated(model: type[M], value: dict[str, Any], path: str = "") -> M:
    """`value` as `model` (strict, as an HTTP body), or InvalidRequest naming the first field that is
    not what the protocol takes, as a path (``messages[1].data.tool_calls[0].execute``)."""
    from pydantic import ValidationError

    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        raise InvalidRequest(_field_path(path, problem["loc"]), problem["msg"]) from None


def _field_path(start: str, loc: Iterable[int | str]) -> str:
    """A validation error's location as the protocol names a field: ``messages[1].data.session``. The
    member of a union pydantic tried (``str``, ``list[...]``) is no field: it is left out."""
    path = start
    for part in loc:
        if isinstance(part, int):
            path = f"{path}[{part}]"
        elif part.isidentifier() and part not in _TYPE_TAGS:
            path = f"{path}.{part}" if path else part
    return path


# The names pydantic gives a union's members in an error's location.
_TYPE_TAGS = frozenset({"str", "bool", "int", "float", "dict", "list", "none"})


# -- writing --------------------------------------------------------------------------------------


# Every form of a call names its arguments and reasons alike (ADR 20): `input` the arguments it runs
# (or ran) with, the seed's own field; `proposed_input` the model's proposal; `edited`; and
# `approval_reason` / `rejection_reason`. `reason` is the deprecated name of the reason a form had
# before (why it waits, on a pending call; why it was rejected, on a rejected one), kept one release.


def _call_fields(call: ToolCallView) -> dict[str, Any]:
    return {
        "id": call.id,
        "name": call.name,
        "input": call.input,
        "proposed_input": call.proposed_input,
        "edited": call.edited,
        "approval_reason": call.approval_reason,
        # Only when its tool declares one: a call of a tool that declares none has the seed's form.
        **({"risk": call.risk} if call.risk is not None else {}),
        **preview_fields(call),
        **grant_fields(call),
    }


def grant_fields(call: ToolCallView) -> dict[str, Any]:
    """``grant: {id, granted_by, approval}`` for a call a standing grant approved (docs/approvals.md,
    "Grants"): ``approval`` reads "approved by grant g_... from bob"; nothing for any other call."""
    named = grant_of(call.approved_by_grant)
    if named is None:
        return {}
    grant_id, granted_by = named
    return {
        "grant": {
            "id": grant_id,
            "granted_by": granted_by,
            "approval": f"approved by {call.approved_by_grant}",
        }
    }


def preview_fields(call: ToolCallView) -> dict[str, Any]:
    """``preview``, ``preview_kind``, ``preview_error`` and the ``preview_digest`` a decision echoes
    (ADR 38), for a call whose tool previews its calls; nothing for one whose tool does not."""
    if call.preview_digest is None:
        return {}
    return {
        "preview": call.preview,
        "preview_kind": call.preview_kind,
        "preview_error": call.preview_error,
        "preview_digest": call.preview_digest,
    }


def pending_call(call: ToolCallView) -> dict[str, Any]:
    """A call waiting for a decision, as ``data.tool_calls`` lists it (a client echoes it back); one
    whose rule asks more than one approver says who approved and what it still needs."""
    pending = {
        **_call_fields(call),
        "execute": False,
        "tool_description": call.description,
        "editable": call.editable,
        "reason": call.approval_reason,  # deprecated: approval_reason
    }
    if call.approvers is not None:
        pending["approvals"] = approvals_of(call)
    return pending


def approvals_of(call: ToolCallView) -> dict[str, Any]:
    """``{rule, given: [{by, at, stage}], needed: [{stage, count, groups}]}``, stages counted from 1
    (:func:`dcaf_like.application.notifications.approvals_of`, which every surface shows)."""
    return shown_approvals(call) or {"rule": "", "given": [], "needed": []}


def executed_call(call: ToolCallView) -> dict[str, Any]:
    """A call that ran (or failed, or was interrupted), as ``data.executed_tool_calls`` lists it."""
    result = _call_fields(call)
    result["output"] = call.output if call.output is not None else f"Error: {call.error}"
    result["status"] = call.status
    if call.outcome is not None:  # absent from a call read off another server's wire
        result["outcome"] = call.outcome
        result["execution_time"] = call.execution_time
    if call.error is not None:
        result["error"] = call.error
    if call.attachments:
        result["attachments"] = [described(a) for a in call.attachments]
    return result


def described(attachment: Attachment | AttachmentView) -> dict[str, Any]:
    """An image or a file as a response lists it: what it is, never its bytes (megabytes each)."""
    return {
        "type": attachment.kind.value,
        "media_type": attachment.media_type,
        "size": attachment.size,
        "name": attachment.name,
        "url": attachment.url,
    }


def attachment_view(raw: Mapping[str, Any]) -> AttachmentView:
    """An image or a file as :func:`described` lists it, read back (from another server's response):
    its kind, media type, size, name and URL."""
    return AttachmentView(
        PartKind(raw["type"]),
        str(raw.get("media_type") or ""),
        int(raw.get("size") or 0),
        raw.get("name"),
        raw.get("url"),
    )


def rejected_call(call: ToolCallView) -> dict[str, Any]:
    """A call that was rejected, by a person, the policy or the server, as ``data.rejected_tool_calls``
    lists it."""
    return {
        **_call_fields(call),
        "rejection_reason": call.rejection_reason,
        "reason": call.rejection_reason,  # deprecated: rejection_reason
        "outcome": call.outcome or "unauthorized",
    }


def pending_command(call: ToolCallView, argv: Sequence[str]) -> dict[str, Any]:
    """A command waiting for a decision, as ``data.cmds`` lists it: the call of the command tool, its
    argv and the same argv as one line (quoted as a shell would read it; no shell runs it), and its
    dry run's preview when the command tool previews commands."""
    return {
        "id": call.id,
        "command": shlex.join(argv),
        "argv": list(argv),
        "execute": False,
        "tool_description": call.description,
        "approval_reason": call.approval_reason,
        "reason": call.approval_reason,  # deprecated: approval_reason
        **preview_fields(call),
    }


def executed_command(call: ToolCallView, argv: Sequence[str]) -> dict[str, Any]:
    """A command that ran (or failed, or was interrupted), as ``data.executed_cmds`` lists it."""
    result: dict[str, Any] = {
        "id": call.id,
        "command": shlex.join(argv),
        "argv": list(argv),
        "output": call.output if call.output is not None else f"Error: {call.error}",
        "status": call.status,
    }
    if call.error is not None:
        result["error"] = call.error
    return result


def calls_data(
    pending: Iterable[ToolCallView], executed: Iterable[ToolCallView], rejected: Iterable[ToolCallView]
) -> dict[str, Any]:
    """The calls of a turn in the form of a message's ``data``: calls of the command tool are its
    ``cmds`` and ``executed_cmds``, every other call its ``tool_calls`` and ``executed_tool_calls``."""
    tool_calls, cmds = [], []
    for call in pending:
        argv = command_argv(call.name, call.input)
        if argv is None:
            tool_calls.append(pending_call(call))
        else:
            cmds.append(pending_command(call, argv))
    executed_tool_calls, executed_cmds = [], []
    for call in executed:
        argv = command_argv(call.name, call.input)
        if argv is None:
            executed_tool_calls.append(executed_call(call))
        else:
            executed_cmds.append(executed_command(call, argv))
    return {
        "tool_calls": tool_calls,
        "executed_tool_calls": executed_tool_calls,
        "rejected_tool_calls": [rejected_call(c) for c in rejected],
        "cmds": cmds,
        "executed_cmds": executed_cmds,
    }


def assistant_message(response: AgentResponse, *, request_id: str | None = None) -> dict[str, Any]:
    """The assistant message of the protocol, ``data`` always complete; `request_id` in ``meta``."""
    meta: dict[str, Any] = {
        "stop_reason": response.stop_reason,
        "runtime": response.runtime,
        "answered_by": response.answered_by,
        "usage": {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens},
        "timings_ms": {k: round(v * 1000, 3) for k, v in response.timings.items()},
    }
    if request_id is not None:
        meta["request_id"] = request_id
    return {
        "role": "assistant",
        "content": response.text,
        "data": {
            "conversation_id": response.conversation_id,
            **calls_data(
                response.pending_tool_calls, response.executed_tool_calls, response.rejected_tool_calls
            ),
            "session": dict(response.session),
            "questions": [question_data(q) for q in response.questions],
        },
        "meta": meta,
    }


def function_messages(request: AgentRequest) -> list[dict[str, Any]]:
    """The request as the messages a custom agent function receives: without the client's decisions
    (no ``execute: true`` the server never checked), which the function's context holds as
    `unverified_decisions`. A message with images or files has its content as the list of parts the
    client sent (its text first)."""
    messages: list[dict[str, Any]] = [{"role": role, "content": text} for role, text in request.history]
    data: dict[str, Any] = {}
    if request.conversation_id:
        data["conversation_id"] = request.conversation_id
    if request.session is not None:
        data["session"] = dict(request.session)
    content: str | list[dict[str, Any]] = request.text
    if request.attachments:
        text = [{"type": "text", "text": request.text}] if request.text else []
        content = text + [part_of(a) for a in request.attachments]
    messages.append({"role": "user", "content": content, "data": data})
    return messages


# -- questions the run asks the user (docs/runs.md, "Questions") ------------------------------------


def question_data(question: QuestionView) -> dict[str, Any]:
    """An open question as ``data.questions`` lists it and ``question_asked`` streams it; its
    ``expires_at`` is when its window closes, in seconds since the epoch as ``GET
    /api/conversations/{id}`` gives a pending call's (None: it waits as long as it takes)."""
    return {
        "id": question.id,
        "call_id": question.call_id,
        "tool": question.tool,
        "kind": question.kind,
        "prompt": question.prompt,
        "options": list(question.options),
        "max_length": question.max_length,
        "expires_at": question.expires_at,
    }


def answer(question_id: str, value: Any = None, *, declined: bool = False) -> QuestionAnswer:
    """An answer as a request carries it (``data.answers[]``: ``{"id", "value"}`` or ``{"id",
    "declined": true}``); its value is checked against the question by the agent."""
    return QuestionAnswer(question_id, None if declined else value, declined=declined)


def part_of(attachment: Attachment) -> dict[str, Any]:
    """An attachment in the form a client sends it (see :func:`read_content`)."""
    fields = (("media_type", attachment.media_type), ("data", attachment.data), ("url", attachment.url))
    part = {"type": attachment.kind.value, **{k: v for k, v in fields if v}}
    return {**part, "name": attachment.name} if attachment.name else part


# -- a streamed turn --------------------------------------------------------------------------------


def event_lines(event: StreamEvent, request_id: str) -> list[dict[str, Any]]:
    """The NDJSON objects one event becomes. Seed events (``text_delta``, ``tool_calls``,
    ``executed_tool_calls``, ``commands``, ``executed_commands``, ``done``, ``error``) come with typed
    lifecycle events, which name a command as a call of the command tool."""
    if isinstance(event, TextDelta):
        return [{"type": "text_delta", "text": event.text}]
    if isinstance(event, RunStarted):
        return [{"type": "run_started", "conversation_id": event.conversation_id, "request_id": request_id}]
    if isinstance(event, ReasoningDelta):
        return [{"type": "reasoning_delta", "text": event.text}]
    if isinstance(event, ToolCallProposed):
        proposed = {**pending_call(event.call), "status": event.call.status}
        return [{"type": "tool_call_proposed", "tool_call": proposed}]
    if isinstance(event, ApprovalRequired):
        waiting = calls_data(event.calls, (), ())
        lines = [{"type": "approval_required", "call_ids": [c.id for c in event.calls]}]
        if waiting["tool_calls"] or not waiting["cmds"]:
            lines.append({"type": "tool_calls", "tool_calls": waiting["tool_calls"]})
        if waiting["cmds"]:
            lines.append({"type": "commands", "commands": waiting["cmds"]})
        return lines
    if isinstance(event, ToolStarted):
        return [{"type": "tool_started", "id": event.call_id, "name": event.name}]
    if isinstance(event, ToolQueued):
        return [{"type": "tool_queued", "id": event.call.id, "name": event.call.name}]
    if isinstance(event, ToolProgress):
        progress = {
            "type": "tool_progress",
            "id": event.call_id,
            "name": event.name,
            "message": event.message,
        }
        return [{**progress, "fraction": event.fraction}]
    if isinstance(event, ToolFinished):
        executed = executed_call(event.call)
        if (argv := command_argv(event.call.name, event.call.input)) is not None:
            seed = {"type": "executed_commands", "executed_commands": [executed_command(event.call, argv)]}
        else:
            seed = {"type": "executed_tool_calls", "executed_tool_calls": [executed]}
        return [{"type": "tool_finished", "tool_call": executed}, seed]
    if isinstance(event, ToolRejected):
        return [{"type": "tool_rejected", "tool_call": rejected_call(event.call)}]
    if isinstance(event, QuestionAsked):
        return [{"type": "question_asked", "question": question_data(event.question)}]
    if isinstance(event, UserMessageRead):
        return [{"type": "user_message", "content": event.text, "sent_at": iso_time(event.at)}]
    if isinstance(event, CancelRequested):
        return [{"type": "cancel_requested", "conversation_id": event.conversation_id}]
    if isinstance(event, Done):
        message = assistant_message(event.response, request_id=request_id)
        return [{"type": "done", "conversation_id": event.response.conversation_id, "message": message}]
    if isinstance(event, RunFailed):
        raise TypeError("a failed run is written by the server, which knows its HTTP status")
    raise TypeError(f"unknown stream event {type(event).__name__}")


# -- a streamed run's order: every line numbered and timed ------------------------------------------


class Stamps:
    """Numbers and times the lines of one streamed run: ``seq`` counts from 0 with no gap, so a client
    that misses one can tell; ``ts`` is when the line was written, ISO-8601 UTC with milliseconds,
    never earlier than the line before it (a wall clock stepped back is held), so a client can tell a
    slow run from a lost line."""

    __slots__ = ("_clock", "_last", "_next")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._next = 0
        self._last = 0.0

    def stamp(self, line: dict[str, Any]) -> dict[str, Any]:
        """`line` with its ``seq`` and ``ts`` added (the seed's fields left as they are)."""
        now = self._last = max(self._last, self._clock())
        line["seq"] = self._next
        line["ts"] = iso_time(now)
        self._next += 1
        return line


def iso_time(epoch: float) -> str:
    """``2026-11-27T03:18:57.123Z``: ISO-8601, UTC, milliseconds (what JavaScript's Date writes)."""
    seconds = int(epoch)
    millis = round((epoch - seconds) * 1000)
    if millis == 1000:
        seconds, millis = seconds + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def ndjson(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
