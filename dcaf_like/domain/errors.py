"""Typed errors the domain raises. Each names what was wrong, so an adapter can report it as is."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every rule the domain refuses to break."""


class IllegalTransition(DomainError):
    """A tool call was asked to move between two states the state machine does not connect."""

    def __init__(self, call_id: str, from_status: str, to_status: str, message: str | None = None) -> None:
        self.call_id = call_id
        self.from_status = from_status
        self.to_status = to_status
        super().__init__(message or f"tool call {call_id} cannot go from {from_status} to {to_status}")


class ToolCallAlreadyDecided(IllegalTransition):
    """A decision (an approval or a rejection) for a call that no longer waits for one: a replayed or
    late decision. It says what HTTP's ``409 tool_call_already_decided`` says."""

    def __init__(self, call_id: str, from_status: str, to_status: str) -> None:
        super().__init__(
            call_id,
            from_status,
            to_status,
            f"tool call {call_id} is {from_status}, not pending: a decision is honoured once, for a call "
            "that still waits for one",
        )


class UnknownToolCall(DomainError):
    """A decision names a tool call this conversation never proposed."""

    def __init__(self, call_id: str, conversation_id: str) -> None:
        self.call_id = call_id
        self.conversation_id = conversation_id
        super().__init__(f"tool call {call_id} was never proposed in conversation {conversation_id}")


class DuplicateToolCall(DomainError):
    """A tool call id was proposed twice in one conversation."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        super().__init__(f"tool call {call_id} already exists in this conversation")


class ApprovalMismatch(DomainError):
    """An approval does not match what the agent proposed (another tool name or other arguments)."""

    def __init__(self, call_id: str, detail: str) -> None:
        self.call_id = call_id
        self.detail = detail
        super().__init__(f"approval of tool call {call_id} does not match the proposal: {detail}")


class PreviewChanged(DomainError):
    """A decision sent against another preview of the call than the one it has now (ADR 38): the
    approver decides again, having seen the current one."""

    def __init__(self, call_id: str, current: dict[str, str | None]) -> None:
        self.call_id = call_id
        #: The call's preview now: ``preview``, ``preview_kind``, ``preview_error``, ``preview_digest``.
        self.current = current
        super().__init__(
            f"the preview of tool call {call_id} changed since it was shown: decide again on the current one"
        )


class EditNotAllowed(DomainError):
    """Approving with edited arguments was asked for a tool that does not permit it."""

    def __init__(self, call_id: str, tool_name: str) -> None:
        self.call_id = call_id
        self.tool_name = tool_name
        super().__init__(f"tool {tool_name!r} does not allow editing its arguments (call {call_id})")


class ApprovalExpired(DomainError):
    """A pending tool call was decided after its approval window closed."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        super().__init__(f"the approval window of tool call {call_id} has closed")


class ContextChanged(DomainError):
    """A call was approved under another platform context (tenant, namespace, account, ...) than the
    one it was proposed in. Only the credentials in a context may change between the two."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        super().__init__(
            f"tool call {call_id} was proposed under another platform context: approve it under the "
            "context it was proposed in (only its credentials may change), or reject it"
        )


class PolicyDenied(DomainError):
    """The approval policy denies a call with the arguments it would run with (an edit included), in
    the context it would run in, at the moment it is approved."""

    def __init__(self, call_id: str, reason: str) -> None:
        self.call_id = call_id
        self.reason = reason
        super().__init__(f"tool call {call_id} is denied by the policy as it would run: {reason}")


class PendingToolCalls(DomainError):
    """A new user turn arrived while tool calls still wait for a decision."""

    def __init__(self, call_ids: list[str]) -> None:
        self.call_ids = call_ids
        ids = ", ".join(call_ids)
        super().__init__(f"tool calls waiting for a decision: {ids}; approve or reject them first")


class UnknownTask(DomainError):
    """No task of that id in the conversation."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no task {task_id}")
