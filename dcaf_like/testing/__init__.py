"""The test kit: a scripted runtime that honours the runtime port, scripted OpenAI-compatible, Bedrock and
Gemini servers on loopback (for real SDKs, offline), builders, and pytest fixtures.

For tests only. An Agent never falls back to these: a runtime must always be chosen explicitly.
"""

from dcaf_like.testing.bedrock_server import BedrockConverseServer
from dcaf_like.testing.builders import ConversationBuilder, ManualClock
from dcaf_like.testing.fake_runtime import (
    FakeRuntime,
    RulesRuntime,
    ScriptExhausted,
    Step,
    fail,
    reply,
    tool_call,
    tool_calls,
)
from dcaf_like.testing.gemini_server import GeminiServer
from dcaf_like.testing.openai_server import OpenAICompatibleServer

__all__ = [
    "BedrockConverseServer",
    "ConversationBuilder",
    "FakeRuntime",
    "GeminiServer",
    "ManualClock",
    "OpenAICompatibleServer",
    "RulesRuntime",
    "ScriptExhausted",
    "Step",
    "fail",
    "reply",
    "tool_call",
    "tool_calls",
]
