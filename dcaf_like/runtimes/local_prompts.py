"""Everything that makes a small local model use tools: the prompts, and a lenient reader of its calls.

Small models (Qwen2.5-Coder-1.5B here) write a tool call as JSON in their text, sometimes in a
```` ```json ```` fence, sometimes in ``<tool_call>`` tags, sometimes with doubled braces. The reader
accepts those forms and nothing looser: a JSON object naming a tool. What it cannot read becomes a
call with ``invalid_arguments``, which the service reports back to the model and never runs.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from dcaf_like.application.messages import (
    AssistantTurn,
    ModelRequest,
    ModelToolCall,
    ToolResult,
    ToolSpec,
)

TOOLS_PROMPT = """You can call these tools (JSON Schema of their arguments after each name):
{tools}

To call a tool, answer with one JSON object and nothing else:
{{"name": "<tool name>", "arguments": {{<arguments>}}}}
Do only what the user's latest message asks. Call a tool only when that request needs it, and only
with the tools above. When you have what you need (for example after a tool result), answer the user
in plain text, without JSON."""

RESULTS_FOOTER = (
    'My request was: "{request}". If these results answer it, answer me in plain text now. '
    "Call another tool only if my request itself needs it."
)

REPEATED_CALL_NUDGE = (
    "You already called {name} with these arguments and its result is above. Do not call it again: "
    "answer the user in plain text now."
)

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAME = re.compile(r'"(?:name|tool)"\s*:\s*"([^"]+)"')


def system_prompt(instructions: str, tools: Iterable[ToolSpec]) -> str:
    """The agent's instructions, then the tools and how to call them."""
    listed = "\n".join(
        f"- {t.name}: {t.description.strip().splitlines()[0] if t.description.strip() else t.name} "
        f"{json.dumps(_compact_schema(t.input_schema), ensure_ascii=False)}"
        for t in tools
    )
    if not listed:
        return instructions
    tools_part = TOOLS_PROMPT.format(tools=listed)
    return f"{instructions.strip()}\n\n{tools_part}" if instructions.strip() else tools_part


def chat_messages(request: ModelRequest) -> list[dict[str, str]]:
    """The request as plain chat messages any GGUF chat template accepts: calls written back the way
    the model writes them, tool results as a user message that names each call."""
    messages = [{"role": "system", "content": system_prompt(request.system, request.tools)}]
    results: list[str] = []
    asked = ""

    def flush() -> None:
        # Restating the request after the results keeps a small model on it (and off new actions).
        results.append(RESULTS_FOOTER.format(request=asked))
        messages.append({"role": "user", "content": "\n".join(results)})
        results.clear()

    for m in request.messages:
        if isinstance(m, ToolResult):
            label = "Error from" if m.is_error else "Result of"
            results.append(f"{label} {m.tool_name}: {m.content}")
            continue
        if results:
            flush()
        if isinstance(m, AssistantTurn):
            calls = [json.dumps({"name": c.name, "arguments": dict(c.arguments)}) for c in m.tool_calls]
            messages.append({"role": "assistant", "content": "\n".join(filter(None, [m.text, *calls]))})
        else:
            asked = m.text
            messages.append({"role": "user", "content": m.text})
    if results:
        flush()
    return messages


def read_tool_calls(text: str) -> tuple[str, tuple[ModelToolCall, ...]]:
    """The prose of a model's answer and the tool calls written in it.

    Accepted: the whole answer, a fenced block or a ``<tool_call>`` block holding one JSON object
    (or a list of them) with ``name`` and ``arguments`` (``tool`` / ``parameters`` also read), with
    doubled braces tolerated. An answer that tries to call a tool but cannot be read gives one call
    with ``invalid_arguments`` saying why.
    """
    stripped = text.strip()
    blocks: list[tuple[str, str]] = []  # (the raw text to remove from the prose, the JSON candidate)
    for pattern in (_TAGGED, _FENCE):
        blocks += [(match.group(0), match.group(1)) for match in pattern.finditer(stripped)]
    if not blocks and stripped[:1] in "{[":
        blocks = [(stripped, stripped)]
    if not blocks and (start := stripped.find('{"name"')) >= 0:
        blocks = [(stripped[start:], stripped[start:])]
    calls: list[ModelToolCall] = []
    prose = stripped
    for raw, candidate in blocks:
        found = _calls_in(candidate)
        if found is None:
            continue
        calls += found
        prose = prose.replace(raw, "")
    return prose.strip(), tuple(calls)


def repeated_call(request: ModelRequest, calls: tuple[ModelToolCall, ...]) -> ModelToolCall | None:
    """A proposed call identical to one whose result is already in the history, if any."""
    answered = {m.call_id for m in request.messages if isinstance(m, ToolResult)}
    done = {
        (c.name, _canonical(c.arguments))
        for m in request.messages
        if isinstance(m, AssistantTurn)
        for c in m.tool_calls
        if c.id in answered
    }
    return next((c for c in calls if (c.name, _canonical(c.arguments)) in done), None)


def _calls_in(candidate: str) -> list[ModelToolCall] | None:
    """Calls in one JSON candidate; None if it does not look like a tool call at all."""
    value, error = _loads(candidate)
    if error is not None:
        name = _NAME.search(candidate)
        if name is None:
            return None
        problem = f"the tool call is not valid JSON ({error}); write one JSON object like "
        problem += '{"name": "<tool>", "arguments": {...}}'
        return [ModelToolCall(_new_id(), name.group(1), {}, invalid_arguments=problem)]
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(i, dict) and ("name" in i or "tool" in i) for i in items):
        return None
    return [_call(item) for item in items]


def _call(item: Mapping[str, Any]) -> ModelToolCall:
    name = str(item.get("name") or item.get("tool") or "")
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):
        parsed, _ = _loads(arguments or "{}")
        arguments = parsed
    if not isinstance(arguments, dict):
        problem = f"the arguments of {name} must be a JSON object, got {json.dumps(arguments)[:200]}"
        return ModelToolCall(_new_id(), name, {}, invalid_arguments=problem)
    return ModelToolCall(_new_id(), name, arguments)


def _loads(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except ValueError as first:
        undoubled = text.strip().replace("{{", "{").replace("}}", "}")
        try:
            return json.loads(undoubled), None
        except ValueError:
            return None, str(first)


def _compact_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool schema without the noise small models trip on (titles, additionalProperties)."""
    properties = {
        name: {k: v for k, v in prop.items() if k in ("type", "description", "enum", "default", "items")}
        for name, prop in dict(schema.get("properties", {})).items()
    }
    compact: dict[str, Any] = {"type": "object", "properties": properties}
    if schema.get("required"):
        compact["required"] = list(schema["required"])
    return compact


def _canonical(arguments: Mapping[str, Any]) -> str:
    return json.dumps(dict(arguments), sort_keys=True, ensure_ascii=False)


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"
