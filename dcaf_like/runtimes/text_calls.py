"""A lenient reader of tool calls written as text, for models that write them instead of calling.

Small models (Qwen2.5-Coder-1.5B, and many served by Ollama, llama.cpp's server or LM Studio) write a
tool call as JSON in their text, sometimes in a ```` ```json ```` fence, sometimes in ``<tool_call>``
tags, sometimes with doubled braces. The reader accepts those forms and nothing looser: a JSON object
naming a tool. What it cannot read becomes a call with ``invalid_arguments``, which the service reports
back to the model and never runs.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from dcaf_like.application.messages import ModelToolCall

#: How an answer that may be a tool call starts: text starting otherwise can be streamed at once.
CALL_STARTS = ("{", "[", "`", "<")

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAME = re.compile(r'"(?:name|tool)"\s*:\s*"([^"]+)"')


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


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"
