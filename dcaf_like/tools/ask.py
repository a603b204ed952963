"""``ask_user``: the built-in tool through which the model asks the user (docs/runs.md, "Questions")."""

from __future__ import annotations

from typing import Literal

from dcaf_like.application.ports import ToolContext
from dcaf_like.tools import tool


@tool(requires_approval=False, name="ask_user")
def ask_user(
    question: str,
    context: ToolContext,
    kind: Literal["text", "confirmation", "selection"] = "text",
    options: list[str] | None = None,
) -> str:
    """Ask the user a question and wait for the answer. kind "text" takes free text; "confirmation"
    is answered yes or no; "selection" is one of `options`. Returns the user's answer."""
    answer = context.ask(question, kind=kind, options=options)
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    return answer
