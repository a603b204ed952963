"""The public surface is curated: a change to it is a decision, made here on purpose."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dcaf_like

EXPORTED = {
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
    "AlreadyApproved",
    "ApprovalExpired",
    "ApprovalMismatch",
    "ApprovalPolicy",
    "Approvers",
    "NotAnApprover",
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
    "InboxItem",
    "InboxPage",
    "InvalidCursor",
    "IllegalTransition",
    "InMemoryConversationRepository",
    "InvalidRequest",
    "InvalidToolArguments",
    "ModelAccessDenied",
    "ModelCompleted",
    "ModelError",
    "ModelRateLimited",
    "ModelRequest",
    "MissingCapability",
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
    "ToolQueued",
    "ToolExecutor",
    "ToolJob",
    "ToolJobs",
    "InProcessExecutor",
    "JobOutcome",
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
    "__version__",
    "create_app",
    "serve",
    "anyone_but",
    "approvers",
    "argument_in",
    "context_in",
    "deny",
    "require_approval",
    "without_scope",
    "open_store",
    "resolve_runtime",
    "tool",
}


def test_the_package_exports_exactly_the_curated_names():
    assert set(dcaf_like.__all__) == EXPORTED
    assert len(dcaf_like.__all__) == len(EXPORTED)
    for name in dcaf_like.__all__:
        assert hasattr(dcaf_like, name), name


SDKS = (
    "agno",
    "google",
    "langchain",
    "langchain_core",
    "boto3",
    "botocore",
    "redis",
    "psycopg",
    "psycopg_pool",
    "fastapi",
    "uvicorn",
    "starlette",
    "openai",
    "httpx",
    "pydantic",
    "llama_cpp",
    "mcp",
    "a2a",
    "sqlite3",
)


def test_importing_the_package_loads_no_sdk_web_framework_or_store_client():
    code = "import sys, dcaf_like; print('\\n'.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    roots = {name.split(".")[0] for name in loaded.split()}

    assert roots.isdisjoint(SDKS), sorted(roots & set(SDKS))
    assert "dcaf_like" in roots


def _modules_loaded_by(code: str) -> set[str]:
    """The modules `code` loads in a fresh interpreter, beyond those the interpreter starts with."""
    probe = (
        f"import sys; before = set(sys.modules)\n{code}\nprint('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    return set(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.split()
    )


def test_importing_the_package_loads_nothing_until_a_name_is_used():
    """Issue 40 (import under 150 ms): `import dcaf_like` runs no module of the package, not even typing;
    each public name loads its own module when first used."""
    assert _modules_loaded_by("import dcaf_like") <= {"dcaf_like", "__future__"}


def test_an_agent_and_its_tools_load_no_server_store_client_or_wire_schema():
    """What ``from dcaf_like import Agent, tool`` loads (a first turn's needs) pins a regression as a
    failing test rather than a slower benchmark: no web framework, no store but the in-memory one, no
    JSON schema of the wire models, no package metadata, no approval webhook unless one is configured."""
    loaded = _modules_loaded_by("from dcaf_like import Agent, tool")

    assert {"dcaf_like.agent", "dcaf_like.tools"} <= loaded
    roots = {name.split(".")[0] for name in loaded}
    assert roots.isdisjoint(SDKS), sorted(roots & set(SDKS))
    never = {
        "dcaf_like.server",
        "dcaf_like.helpdesk.wire",
        "dcaf_like.stores.sqlite",
        "dcaf_like.stores.redis",
        "dcaf_like.stores.postgres",
        "dcaf_like.notifiers.webhook",
        "dcaf_like.commands",
        "dcaf_like.version",
        "importlib.metadata",
        "email",
        "zipfile",
        "tempfile",
    }
    assert loaded.isdisjoint(never), sorted(loaded & never)


def test_each_public_name_is_loaded_from_the_module_its_type_checking_import_names():
    """The lazy table and the imports type checkers read say the same thing: one name, one home."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(dcaf_like.__file__).read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
    )
    declared = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dcaf_like")
        for alias in node.names
    }

    assert declared == dcaf_like._LAZY
    assert set(declared) == set(dcaf_like.__all__)
    for name, module in declared.items():
        assert getattr(dcaf_like, name) is getattr(sys.modules[module], name), name


def test_a_name_the_package_does_not_export_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        dcaf_like.Nothing  # noqa: B018


def test_the_old_mcp_path_still_works_and_says_where_the_names_went():
    import dcaf_like.mcp
    from dcaf_like.toolsets import mcp

    with pytest.warns(DeprecationWarning, match=r"dcaf_like\.toolsets\.mcp\.MCPToolset"):
        moved = dcaf_like.mcp.MCPToolset
    assert moved is mcp.MCPToolset
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        dcaf_like.mcp.Nothing  # noqa: B018


def test_every_argument_of_agent_is_documented_in_its_docstring():
    """Issue 37: ``Agent.__init__`` documents every argument (a new one cannot land unsaid)."""
    import inspect
    import re

    from dcaf_like import Agent

    documented = set(re.findall(r"^ {8}(\w+): ", Agent.__doc__ or "", re.M))
    arguments = set(inspect.signature(Agent.__init__).parameters) - {"self"}

    assert arguments - documented == set()
