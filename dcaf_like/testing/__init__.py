"""The test kit: a scripted runtime that honours the runtime port, builders, and pytest fixtures.

For tests only. An Agent never falls back to these: a runtime must always be chosen explicitly.
"""

from dcaf_like.testing.builders import ConversationBuilder
from dcaf_like.testing.fake_runtime import (
    FakeRuntime,
    ScriptExhausted,
    Step,
    fail,
    reply,
    tool_call,
    tool_calls,
)

__all__ = [
    "ConversationBuilder",
    "FakeRuntime",
    "ScriptExhausted",
    "Step",
    "fail",
    "reply",
    "tool_call",
    "tool_calls",
]
