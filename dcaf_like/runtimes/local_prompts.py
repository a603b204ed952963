"""What makes a small local model use tools: the prompts (its calls are read by :mod:`.text_calls`).
And how it reads a text file the user attached: inlined in the message, named."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

from dcaf_like.application.errors import ModelRequestInvalid
from dcaf_like.application.messages import (
    AssistantTurn,
    ModelRequest,
    ModelToolCall,
    ToolResult,
    ToolSpec,
    UserTurn,
)
from dcaf_like.domain.attachment import Attachment, PartKind

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


#: Files read as text besides ``text/*`` (and ``+json``, ``+xml``, ``+yaml`` types).
TEXT_MEDIA_TYPES = frozenset(
    {
        "application/json",
        "application/yaml",
        "application/x-yaml",
        "application/xml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
    }
)

FILE_BLOCK = "<file name={name}>\n{text}\n</file>"


def is_text_file(part: Attachment) -> bool:
    """Whether the local model can read `part`: a file whose media type is text."""
    media_type = part.media_type
    return part.kind is PartKind.FILE and (
        media_type.startswith("text/")
        or media_type in TEXT_MEDIA_TYPES
        or media_type.endswith(("+json", "+xml", "+yaml"))
    )


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
            messages.append({"role": "user", "content": user_text(m)})
    if results:
        flush()
    return messages


def user_text(turn: UserTurn) -> str:
    """The message's text, then each text file it carries as a block named by the file (its bytes
    decoded as UTF-8, an undecodable byte shown as U+FFFD)."""
    blocks = [turn.text] if turn.text else []
    for part in turn.attachments:
        if not is_text_file(part):
            raise ModelRequestInvalid(f"the local model reads text only, not {part.describe()}")
        text = base64.b64decode(part.data or "").decode("utf-8", errors="replace")
        blocks.append(FILE_BLOCK.format(name=json.dumps(part.name, ensure_ascii=False), text=text))
    return "\n\n".join(blocks)


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
