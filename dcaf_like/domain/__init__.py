"""The pure domain: conversations, tool calls and their approval. Standard library only."""

from dcaf_like.domain.context import PlatformContext
from dcaf_like.domain.conversation import Conversation, Message, MessageContent, Role
from dcaf_like.domain.errors import (
    ApprovalExpired,
    ApprovalMismatch,
    DomainError,
    DuplicateToolCall,
    EditNotAllowed,
    IllegalTransition,
    PendingToolCalls,
    UnknownToolCall,
)
from dcaf_like.domain.events import (
    Event,
    MessageAdded,
    ToolCallApproved,
    ToolCallExecuted,
    ToolCallFailed,
    ToolCallRejected,
    ToolCallRequested,
)
from dcaf_like.domain.policy import (
    ApprovalPolicy,
    PolicyDecision,
    Rule,
    Verdict,
    argument_in,
    context_in,
    deny,
    require_approval,
)
from dcaf_like.domain.session import Session
from dcaf_like.domain.tool_call import (
    InvalidToolInput,
    ToolCall,
    ToolCallId,
    ToolCallStatus,
    ToolInput,
    fingerprint,
)

__all__ = [
    "ApprovalExpired",
    "ApprovalMismatch",
    "ApprovalPolicy",
    "Conversation",
    "DomainError",
    "DuplicateToolCall",
    "EditNotAllowed",
    "Event",
    "IllegalTransition",
    "InvalidToolInput",
    "Message",
    "MessageAdded",
    "MessageContent",
    "PendingToolCalls",
    "PlatformContext",
    "PolicyDecision",
    "Role",
    "Rule",
    "Session",
    "ToolCall",
    "ToolCallApproved",
    "ToolCallExecuted",
    "ToolCallFailed",
    "ToolCallId",
    "ToolCallRejected",
    "ToolCallRequested",
    "ToolCallStatus",
    "ToolInput",
    "UnknownToolCall",
    "Verdict",
    "argument_in",
    "context_in",
    "deny",
    "fingerprint",
    "require_approval",
]
