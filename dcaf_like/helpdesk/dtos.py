"""The HelpDesk protocol's typed shapes, by the seed's names (the original DCAF code's: docs/protocol.md,
"The seed"): a message's ``data`` (:class:`DataDTO`) and its entries. Each has ``to_dict()`` (the
wire form :mod:`~dcaf_like.helpdesk.protocol` writes) and ``from_dict()``; a custom agent function may
build its answer from them::

    AgentResponse(conversation_id="123", text="...", data=DataDTO(tool_calls=[ToolCallDTO(...)]),
                  has_pending_approvals=True)

These describe what a client is shown. A call or command listed here runs only through an
:class:`~dcaf_like.Agent`'s gate: an ``execute: true`` in them is never a permission by itself.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dcaf_like.application.command_runner import RUN_COMMAND
from dcaf_like.application.dto import AttachmentView, ToolCallView
from dcaf_like.helpdesk.protocol import attachment_view, executed_call, pending_call


@dataclass(slots=True)
class ToolCallDTO:
    """A ``data.tool_calls`` entry: a call waiting for a decision (``execute: true`` once approved)."""

    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    execute: bool = False
    tool_description: str = ""
    editable: bool = False
    approval_reason: str | None = None
    risk: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As the protocol writes a waiting call (:func:`~dcaf_like.helpdesk.protocol.pending_call`)."""
        return {**pending_call(self.view()), "execute": self.execute}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCallDTO:
        return cls(
            id=data["id"],
            name=data["name"],
            input=dict(data.get("input") or {}),
            execute=data.get("execute", False) is True,
            tool_description=data.get("tool_description") or "",
            editable=data.get("editable", False) is True,
            approval_reason=data.get("approval_reason", data.get("reason")),
            risk=data.get("risk"),
        )

    def view(self) -> ToolCallView:
        return ToolCallView(
            self.id,
            self.name,
            dict(self.input),
            "approved" if self.execute else "pending",
            description=self.tool_description,
            editable=self.editable,
            approval_reason=self.approval_reason,
            risk=self.risk,
        )


@dataclass(slots=True)
class ExecutedToolCallDTO:
    """A ``data.executed_tool_calls`` entry: a call that ran (``status`` executed) or failed, and the
    images and files it returned besides its text, by what they are (never their bytes)."""

    id: str
    name: str
    input: dict[str, Any]
    output: str
    status: str = "executed"
    error: str | None = None
    attachments: tuple[AttachmentView, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As the protocol writes a call that ran (:func:`~dcaf_like.helpdesk.protocol.executed_call`)."""
        return executed_call(self.view())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutedToolCallDTO:
        return cls(
            id=data["id"],
            name=data["name"],
            input=dict(data.get("input") or {}),
            output=data.get("output") or "",
            status=data.get("status") or "executed",
            error=data.get("error"),
            attachments=tuple(attachment_view(a) for a in data.get("attachments") or ()),
        )

    @classmethod
    def of(cls, call: ToolCallView) -> ExecutedToolCallDTO:
        """A call that ran as a response lists it (``Agent.run(...).executed_tool_calls``), in this
        shape: its attachments by what they are, without their bytes."""
        output = call.output if call.output is not None else f"Error: {call.error}"
        attachments = tuple(AttachmentView.of(a) for a in call.attachments)
        return cls(call.id, call.name, dict(call.input), output, call.status, call.error, attachments)

    def view(self) -> ToolCallView:
        output = None if self.error is not None else self.output
        view = ToolCallView(self.id, self.name, dict(self.input), self.status, output=output)
        view.error = self.error
        view.attachments = self.attachments
        return view


@dataclass(slots=True)
class CommandDTO:
    """A ``data.cmds`` entry: a terminal command waiting for a decision. `argv` is what runs (no
    shell); `command` the same as one line. `id` names the proposal; without one, nothing runs."""

    command: str
    execute: bool = False
    id: str | None = None
    argv: list[str] | None = None
    rejection_reason: str | None = None

    @property
    def arguments(self) -> list[str]:
        return list(self.argv) if self.argv is not None else shlex.split(self.command)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"command": self.command, "argv": self.arguments, "execute": self.execute}
        if self.id is not None:
            result["id"] = self.id
        if self.rejection_reason is not None:
            result["rejection_reason"] = self.rejection_reason
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommandDTO:
        argv = data.get("argv")
        return cls(
            command=data.get("command") or (shlex.join(argv) if argv else ""),
            execute=data.get("execute", False) is True,
            id=data.get("id"),
            argv=list(argv) if argv is not None else None,
            rejection_reason=data.get("rejection_reason"),
        )

    def view(self) -> ToolCallView:
        status = "approved" if self.execute else "pending"
        return ToolCallView(self.id or "", RUN_COMMAND, {"argv": self.arguments}, status)


@dataclass(slots=True)
class ExecutedCommandDTO:
    """A ``data.executed_cmds`` entry: a command that ran, and what it wrote."""

    command: str
    output: str
    id: str | None = None
    argv: list[str] | None = None
    status: str = "executed"

    @property
    def arguments(self) -> list[str]:
        return list(self.argv) if self.argv is not None else shlex.split(self.command)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"command": self.command, "argv": self.arguments, "output": self.output}
        result["status"] = self.status
        if self.id is not None:
            result["id"] = self.id
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutedCommandDTO:
        argv = data.get("argv")
        return cls(
            command=data.get("command") or (shlex.join(argv) if argv else ""),
            output=data.get("output") or "",
            id=data.get("id"),
            argv=list(argv) if argv is not None else None,
            status=data.get("status") or "executed",
        )

    def view(self) -> ToolCallView:
        argv = {"argv": self.arguments}
        return ToolCallView(self.id or "", RUN_COMMAND, argv, self.status, output=self.output)


@dataclass(slots=True)
class DataDTO:
    """A message's ``data``: calls and commands waiting, those that ran, and the session."""

    cmds: list[CommandDTO] = field(default_factory=list)
    executed_cmds: list[ExecutedCommandDTO] = field(default_factory=list)
    tool_calls: list[ToolCallDTO] = field(default_factory=list)
    executed_tool_calls: list[ExecutedToolCallDTO] = field(default_factory=list)
    session: dict[str, Any] = field(default_factory=dict)

    @property
    def has_pending_items(self) -> bool:
        return any(not c.execute for c in self.cmds) or any(not t.execute for t in self.tool_calls)

    def call_views(self) -> tuple[tuple[ToolCallView, ...], tuple[ToolCallView, ...]]:
        """The calls waiting and the calls that ran, as an :class:`~dcaf_like.AgentResponse` holds them
        (a command is a call of the command tool)."""
        pending = (*(t.view() for t in self.tool_calls), *(c.view() for c in self.cmds))
        executed = (*(t.view() for t in self.executed_tool_calls), *(c.view() for c in self.executed_cmds))
        return pending, executed

    def to_dict(self) -> dict[str, Any]:
        return {
            "cmds": [c.to_dict() for c in self.cmds],
            "executed_cmds": [c.to_dict() for c in self.executed_cmds],
            "tool_calls": [t.to_dict() for t in self.tool_calls],
            "executed_tool_calls": [t.to_dict() for t in self.executed_tool_calls],
            "session": dict(self.session),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DataDTO:
        return cls(
            cmds=[CommandDTO.from_dict(c) for c in data.get("cmds") or ()],
            executed_cmds=[ExecutedCommandDTO.from_dict(c) for c in data.get("executed_cmds") or ()],
            tool_calls=[ToolCallDTO.from_dict(t) for t in data.get("tool_calls") or ()],
            executed_tool_calls=[
                ExecutedToolCallDTO.from_dict(t) for t in data.get("executed_tool_calls") or ()
            ],
            session=dict(data.get("session") or {}),
        )
