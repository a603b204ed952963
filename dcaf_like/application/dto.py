"""Requests and responses of the agent use case, and their HelpDesk message form."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcaf_like.application.errors import InvalidRequest
from dcaf_like.application.messages import NO_USAGE, Usage
from dcaf_like.domain import ToolCall, ToolCallStatus
from dcaf_like.domain.session import json_problem


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """A human's decision about one pending call, keyed by its id.

    `tool_name` and `arguments` are what the approver saw; when given they must equal the proposal.
    `edited_arguments` approves with other arguments, an explicit decision only editable tools accept.
    """

    call_id: str
    approve: bool
    tool_name: str | None = None
    arguments: Mapping[str, Any] | None = None
    edited_arguments: Mapping[str, Any] | None = None
    reason: str = ""

    @classmethod
    def approved(cls, call_id: str, *, edited_arguments: Mapping[str, Any] | None = None) -> ToolDecision:
        return cls(call_id, True, edited_arguments=edited_arguments)

    @classmethod
    def rejected(cls, call_id: str, reason: str = "") -> ToolDecision:
        return cls(call_id, False, reason=reason)


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """One turn: the user's text (may be empty), decisions on pending calls, and the request's context.

    `history` holds earlier ``(role, text)`` pairs a stateless client resent; they seed a new
    conversation and are ignored for one the store already has (the store is the source of truth).
    """

    text: str = ""
    conversation_id: str | None = None
    decisions: tuple[ToolDecision, ...] = ()
    platform_context: Mapping[str, Any] = field(default_factory=dict)
    session: Mapping[str, Any] | None = None
    history: tuple[tuple[str, str], ...] = ()
    user: str = "user"
    # On a server with API keys, the identity a new conversation belongs to: a stored conversation of
    # another owner is not found (unless `sees_all`, an operator). None: no ownership (keyless, Python).
    owner: str | None = None
    sees_all: bool = False
    # Where the request came in (http, stream, a2a, python), written in the records of its decisions.
    entrance: str = "python"

    @classmethod
    def from_messages(
        cls,
        messages: str | Sequence[Mapping[str, Any] | str],
        *,
        conversation_id: str | None = None,
        platform_context: Mapping[str, Any] | None = None,
        session: Mapping[str, Any] | None = None,
        user: str = "user",
    ) -> AgentRequest:
        """Read HelpDesk-style messages: the last one is the user's turn, earlier ones are history."""
        if session is not None and (problem := json_problem(dict(session), "session")):
            raise InvalidRequest("session", f"the session is saved as JSON: {problem}")
        if isinstance(messages, str):
            return cls(
                text=messages,
                conversation_id=conversation_id,
                platform_context=dict(platform_context or {}),
                session=session,
                user=user,
            )
        if not isinstance(messages, Sequence) or not messages:
            raise InvalidRequest("messages", "expected a non-empty list of messages")
        parsed = [_parse_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
        last_path = f"messages[{len(parsed) - 1}]"
        last = parsed[-1]
        if last.role != "user":
            raise InvalidRequest(f"{last_path}.role", "the last message must be the user's turn")
        data = last.data
        decisions = tuple(
            decision
            for i, raw in enumerate(_list_field(data, "tool_calls", f"{last_path}.data"))
            if (decision := _parse_decision(raw, f"{last_path}.data.tool_calls[{i}]")) is not None
        )
        for i, cmd in enumerate(_list_field(data, "cmds", f"{last_path}.data")):
            if isinstance(cmd, Mapping) and cmd.get("execute") is True:
                raise InvalidRequest(
                    f"{last_path}.data.cmds[{i}]",
                    "this agent proposed no terminal command; a command is only run when a tool proposed it",
                )
        request_session = session
        if request_session is None and "session" in data:
            raw_session = data["session"]
            if not isinstance(raw_session, Mapping):
                raise InvalidRequest(f"{last_path}.data.session", "expected an object")
            request_session = dict(raw_session)
            if problem := json_problem(request_session, f"{last_path}.data.session"):
                raise InvalidRequest(f"{last_path}.data.session", f"the session is saved as JSON: {problem}")
        context = dict(platform_context or {})
        if not context and last.platform_context is not None:
            context = dict(last.platform_context)
        return cls(
            text=last.content,
            conversation_id=conversation_id or _conversation_id_from(parsed),
            decisions=decisions,
            platform_context=context,
            session=request_session,
            history=tuple((m.role, m.content) for m in parsed[:-1] if m.content),
            user=user,
        )


@dataclass(frozen=True, slots=True)
class _Parsed:
    role: str
    content: str
    data: Mapping[str, Any]
    platform_context: Mapping[str, Any] | None


_ROLES = frozenset({"user", "assistant"})


def _parse_message(raw: Mapping[str, Any] | str, path: str) -> _Parsed:
    if isinstance(raw, str):
        return _Parsed("user", raw, {}, None)
    if not isinstance(raw, Mapping):
        raise InvalidRequest(path, f"expected an object or a string, got {type(raw).__name__}")
    role = raw.get("role", "user")
    if role not in _ROLES:
        raise InvalidRequest(f"{path}.role", f"unknown role {role!r}; expected 'user' or 'assistant'")
    content = raw.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise InvalidRequest(f"{path}.content", f"expected a string, got {type(content).__name__}")
    data = raw.get("data") or {}
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"{path}.data", f"expected an object, got {type(data).__name__}")
    context = raw.get("platform_context")
    if context is not None and not isinstance(context, Mapping):
        raise InvalidRequest(f"{path}.platform_context", "expected an object")
    return _Parsed(role, content, data, context)


def _list_field(data: Mapping[str, Any], name: str, path: str) -> list[Any]:
    value = data.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidRequest(f"{path}.{name}", f"expected a list, got {type(value).__name__}")
    return value


def _parse_decision(raw: Any, path: str) -> ToolDecision | None:
    """``execute: true`` approves; ``execute: false`` with a rejection reason rejects; a call echoed back
    undecided (``execute: false``, no reason) is no decision."""
    if not isinstance(raw, Mapping):
        raise InvalidRequest(path, "expected an object")
    call_id = raw.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"{path}.id", "expected the id of the proposed tool call")
    execute = raw.get("execute", False)
    if not isinstance(execute, bool):
        raise InvalidRequest(f"{path}.execute", "expected true or false")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidRequest(f"{path}.name", "expected a string")
    arguments = raw.get("input")
    if arguments is not None and not isinstance(arguments, Mapping):
        raise InvalidRequest(f"{path}.input", "expected an object")
    edited = raw.get("edited_input")
    if edited is not None and not isinstance(edited, Mapping):
        raise InvalidRequest(f"{path}.edited_input", "expected an object")
    reason = raw.get("rejection_reason")
    if reason is not None and not isinstance(reason, str):
        raise InvalidRequest(f"{path}.rejection_reason", "expected a string")
    if execute:
        return ToolDecision(call_id, True, name, arguments, edited)
    if reason is not None or raw.get("rejected") is True:
        return ToolDecision(call_id, False, name, arguments, reason=reason or "")
    return None


def _conversation_id_from(messages: list[_Parsed]) -> str | None:
    for message in reversed(messages):
        value = message.data.get("conversation_id") or message.data.get("thread_id")
        if isinstance(value, str) and value:
            return value
    return None


# -- responses ------------------------------------------------------------------------------------


# The results below are the caller's own copies, built for each response (changing one changes
# nothing recorded), and never hashable (they hold dicts). They are not frozen: a frozen dataclass's
# __init__ costs more than a plain one's (ADR 11 has the figures), and every turn builds them.


@dataclass(slots=True)
class ToolCallView:
    """A tool call as a client sees it."""

    id: str
    name: str
    input: dict[str, Any]
    status: str
    description: str = ""
    requires_approval: bool = True
    editable: bool = False
    reason: str | None = None
    edited_input: dict[str, Any] | None = None
    output: str | None = None
    error: str | None = None
    rejection_reason: str | None = None

    @classmethod
    def of(cls, call: ToolCall) -> ToolCallView:
        return cls(
            id=call.id.value,
            name=call.name,
            input=call.shown(call.proposed_input),
            status=str(call.status),
            description=call.description,
            requires_approval=call.requires_approval,
            editable=call.editable,
            reason=call.policy_reason,
            edited_input=call.shown(call.approved_input) if call.edited and call.approved_input else None,
            output=call.result,
            error=call.error,
            rejection_reason=call.decision_note if call.status is ToolCallStatus.REJECTED else None,
        )

    def to_pending_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "input": self.input,
            "execute": False,
            "tool_description": self.description,
            "editable": self.editable,
            "reason": self.reason,
        }

    def to_executed_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "input": self.edited_input if self.edited_input is not None else self.input,
            "output": self.output if self.output is not None else f"Error: {self.error}",
            "status": self.status,
        }
        if self.edited_input is not None:
            result["proposed_input"] = self.input
        if self.error is not None:
            result["error"] = self.error
        return result

    def to_rejected_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "input": self.input, "reason": self.rejection_reason}


@dataclass(slots=True)
class AgentResponse:
    conversation_id: str
    text: str = ""
    pending_tool_calls: tuple[ToolCallView, ...] = ()
    executed_tool_calls: tuple[ToolCallView, ...] = ()
    rejected_tool_calls: tuple[ToolCallView, ...] = ()
    session: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = "end_turn"
    usage: Usage = NO_USAGE
    runtime: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def has_pending_approvals(self) -> bool:
        return bool(self.pending_tool_calls)

    def to_helpdesk_message(self) -> dict[str, Any]:
        """The assistant message of the HelpDesk protocol, ``data`` always complete."""
        return {
            "role": "assistant",
            "content": self.text,
            "data": {
                "conversation_id": self.conversation_id,
                "tool_calls": [c.to_pending_dict() for c in self.pending_tool_calls],
                "executed_tool_calls": [c.to_executed_dict() for c in self.executed_tool_calls],
                "rejected_tool_calls": [c.to_rejected_dict() for c in self.rejected_tool_calls],
                "cmds": [],
                "executed_cmds": [],
                "session": dict(self.session),
            },
            "meta": {
                "stop_reason": self.stop_reason,
                "runtime": self.runtime,
                "usage": {
                    "input_tokens": self.usage.input_tokens,
                    "output_tokens": self.usage.output_tokens,
                },
                "timings_ms": {k: round(v * 1000, 3) for k, v in self.timings.items()},
            },
        }


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What a custom agent function returns: at least its text. The server fills in the rest."""

    text: str = ""
    session: Mapping[str, Any] | None = None
    pending_tool_calls: tuple[ToolCallView, ...] = ()
    executed_tool_calls: tuple[ToolCallView, ...] = ()
