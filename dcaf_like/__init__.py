"""dcaf_like: agents for infrastructure operations whose dangerous tools never run without approval.

Importing this package loads no model SDK, web framework or store client: adapters import theirs
when they are used.
"""

from typing import Any

from dcaf_like.agent import Agent
from dcaf_like.application.commands import CommandResult, CommandRunner
from dcaf_like.application.context import ContextPolicy, ContextWindow
from dcaf_like.application.dto import (
    AgentRequest,
    AgentResponse,
    AgentResult,
    AttachmentView,
    QuestionAnswer,
    QuestionView,
    ToolCallView,
    ToolDecision,
)
from dcaf_like.application.effects import RunContext
from dcaf_like.application.errors import (
    ApplicationError,
    ConcurrencyConflict,
    ConversationNotFound,
    HookFailed,
    InvalidRequest,
    InvalidToolArguments,
    ModelAccessDenied,
    ModelError,
    ModelRateLimited,
    ModelRequestInvalid,
    ModelTimeout,
    RuntimeNotConfigured,
    StoreUnavailable,
    ToolDefinitionError,
    ToolsetUnavailable,
    UnknownTool,
    UnsupportedPart,
)
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
    ToolRejected,
    ToolStarted,
)
from dcaf_like.application.hooks import FallbackAnswer, Hook, HookContext, ToolCallInfo, Veto
from dcaf_like.application.messages import (
    AssistantTurn,
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ModelToolCall,
    ReasoningDelta,
    TextDelta,
    ToolResult,
    ToolSpec,
    Usage,
    UserTurn,
)
from dcaf_like.application.ports import (
    AgentRuntime,
    ApprovalAnswer,
    ConversationRepository,
    PendingApproval,
    ToolCancelled,
    ToolContext,
    ToolOutput,
)
from dcaf_like.application.questions import UserInputRequired
from dcaf_like.application.service import InstructionProvider
from dcaf_like.commands import LocalCommandRunner, command_tool
from dcaf_like.domain import (
    MAX_PART_BYTES,
    MAX_PARTS_BYTES,
    ApprovalExpired,
    ApprovalMismatch,
    ApprovalPolicy,
    Attachment,
    ContextChanged,
    DomainError,
    EditNotAllowed,
    Identity,
    IllegalTransition,
    InvalidAnswer,
    InvalidPart,
    OpenQuestions,
    PartTooLarge,
    PendingToolCalls,
    PlatformContext,
    PolicyDenied,
    QuestionClosed,
    QuestionExpired,
    Session,
    ToolCallAlreadyDecided,
    Trusted,
    UnknownQuestion,
    UnknownToolCall,
    anyone_but,
    argument_in,
    attachment,
    context_in,
    deny,
    require_approval,
    without_scope,
)
from dcaf_like.helpdesk.dtos import CommandDTO, DataDTO, ExecutedCommandDTO, ExecutedToolCallDTO, ToolCallDTO
from dcaf_like.helpdesk.function_agent import AgentContext, FunctionAgent, UnverifiedDecision
from dcaf_like.runtimes import resolve_runtime
from dcaf_like.runtimes.strategies import FallbackRuntime, RoutingRuntime
from dcaf_like.server.serving import serve
from dcaf_like.stores import StoreConfigError, open_store
from dcaf_like.stores.memory import InMemoryConversationRepository
from dcaf_like.tools import Tool, UndocumentedToolWarning, create_tool, tool
from dcaf_like.toolsets import Toolset
from dcaf_like.version import __version__

_LAZY = {
    # The FastAPI app: FastAPI is imported when create_app is first named.
    "create_app": "dcaf_like.server.app",
    "SqliteConversationRepository": "dcaf_like.stores.sqlite",
    "RedisConversationRepository": "dcaf_like.stores.redis",
    "DynamoDBConversationRepository": "dcaf_like.stores.dynamodb",
    "PostgresConversationRepository": "dcaf_like.stores.postgres",
    "RemoteAgent": "dcaf_like.toolsets.remote",
    "RemoteCall": "dcaf_like.toolsets.remote",
    "RemoteResult": "dcaf_like.toolsets.remote",
    "RemoteText": "dcaf_like.toolsets.remote",
    # A Tool, built when first named.
    "ask_user": "dcaf_like.tools.ask",
}


def __getattr__(name: str) -> Any:
    """create_app, the store classes and RemoteAgent load their module (and its library: FastAPI, a
    store's client, the A2A SDK) only when first named."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_PARTS_BYTES",
    "MAX_PART_BYTES",
    "Attachment",
    "AttachmentView",
    "InvalidPart",
    "PartTooLarge",
    "ToolOutput",
    "UnsupportedPart",
    "attachment",
    "CommandDTO",
    "CommandResult",
    "CommandRunner",
    "DataDTO",
    "ExecutedCommandDTO",
    "ExecutedToolCallDTO",
    "InstructionProvider",
    "LocalCommandRunner",
    "ToolCallDTO",
    "command_tool",
    "create_tool",
    "Agent",
    "AgentContext",
    "AgentRequest",
    "AgentResponse",
    "AgentResult",
    "AgentRuntime",
    "ApplicationError",
    "ApprovalAnswer",
    "ApprovalExpired",
    "ApprovalMismatch",
    "ApprovalPolicy",
    "ApprovalRequired",
    "AssistantTurn",
    "CancelRequested",
    "ConcurrencyConflict",
    "ContextPolicy",
    "ContextWindow",
    "ContextChanged",
    "ConversationNotFound",
    "ConversationRepository",
    "DomainError",
    "DynamoDBConversationRepository",
    "Done",
    "EditNotAllowed",
    "FallbackAnswer",
    "FallbackRuntime",
    "FunctionAgent",
    "Hook",
    "HookContext",
    "HookFailed",
    "Identity",
    "IllegalTransition",
    "InMemoryConversationRepository",
    "InvalidRequest",
    "InvalidToolArguments",
    "ModelAccessDenied",
    "ModelCompleted",
    "ModelError",
    "ModelRateLimited",
    "ModelRequest",
    "ModelSettings",
    "ModelRequestInvalid",
    "ModelResponse",
    "ModelTimeout",
    "ModelToolCall",
    "PendingApproval",
    "PendingToolCalls",
    "PlatformContext",
    "PostgresConversationRepository",
    "PolicyDenied",
    "ReasoningDelta",
    "RedisConversationRepository",
    "RemoteAgent",
    "RemoteCall",
    "RemoteResult",
    "RemoteText",
    "RoutingRuntime",
    "RunContext",
    "RunFailed",
    "RunStarted",
    "RuntimeNotConfigured",
    "Session",
    "SqliteConversationRepository",
    "StoreConfigError",
    "StoreUnavailable",
    "StreamEvent",
    "TextDelta",
    "Tool",
    "ToolCallAlreadyDecided",
    "ToolCallInfo",
    "ToolCallProposed",
    "ToolCallView",
    "ToolCancelled",
    "ToolContext",
    "ToolDecision",
    "ToolDefinitionError",
    "ToolFinished",
    "ToolProgress",
    "ToolRejected",
    "ToolResult",
    "ToolSpec",
    "ToolStarted",
    "Toolset",
    "ToolsetUnavailable",
    "Trusted",
    "UndocumentedToolWarning",
    "UnknownTool",
    "UnknownToolCall",
    "UnverifiedDecision",
    "Usage",
    "UserTurn",
    "Veto",
    "InvalidAnswer",
    "OpenQuestions",
    "QuestionAnswer",
    "QuestionAsked",
    "QuestionClosed",
    "QuestionExpired",
    "QuestionView",
    "UnknownQuestion",
    "UserInputRequired",
    "ask_user",
    "__version__",
    "create_app",
    "serve",
    "anyone_but",
    "argument_in",
    "context_in",
    "deny",
    "require_approval",
    "without_scope",
    "open_store",
    "resolve_runtime",
    "tool",
]
