"""Domain events: what happened to a conversation, in the past tense, recorded by the aggregate."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    conversation_id: str
    at: float


@dataclass(frozen=True, slots=True)
class MessageAdded(Event):
    role: str
    index: int


@dataclass(frozen=True, slots=True)
class ToolCallRequested(Event):
    call_id: str
    tool_name: str
    fingerprint: str
    requires_approval: bool


@dataclass(frozen=True, slots=True)
class ToolCallApproved(Event):
    call_id: str
    tool_name: str
    approved_by: str
    edited: bool
    # Canonical JSON, secret arguments masked.
    proposed_input: str
    approved_input: str
    approved_by_kind: str = "human"


@dataclass(frozen=True, slots=True)
class ToolCallRejected(Event):
    call_id: str
    tool_name: str
    rejected_by: str
    reason: str
    rejected_by_kind: str = "human"


@dataclass(frozen=True, slots=True)
class ToolCallExecuted(Event):
    call_id: str
    tool_name: str


@dataclass(frozen=True, slots=True)
class ToolCallFailed(Event):
    call_id: str
    tool_name: str
    error: str


@dataclass(frozen=True, slots=True)
class ToolCallInterrupted(Event):
    """A claimed call's run ended without a result: it may or may not have run."""

    call_id: str
    tool_name: str
    reason: str
