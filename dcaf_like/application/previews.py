"""A call's preview: what its tool says the call would do, run when the call is proposed (ADR 38).

The preview runs as a tool run does (the driver performs a :class:`RunTool`, under the preview's own
time limit) but is no execution: the call stays pending, its status and result untouched, and the
session changes a preview makes are dropped. A preview that fails, or runs out of time, leaves the
call waiting with the reason it has none."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from dcaf_like.application.dto import ToolCallView
from dcaf_like.application.effects import Effect, Emit, RunTool, ToolOutcome
from dcaf_like.application.events import ApprovalRequired
from dcaf_like.application.ports import ExecutableTool, ToolContext, ToolOutput
from dcaf_like.application.turn_settings import TurnSettings
from dcaf_like.domain import Conversation, Session, ToolCall, ToolCallStatus, Trusted
from dcaf_like.domain.context import scrub

#: Named in the error of a preview that ran out of time.
PREVIEW_LIMIT = "the tool's preview_timeout"


def preview_of(tool: ExecutableTool | None) -> ExecutableTool | None:
    """The tool that previews `tool`'s calls (``@tool(preview=...)``), if it has one."""
    preview: ExecutableTool | None = getattr(tool, "preview", None)
    return preview


def went_stale(
    conversation: Conversation,
    settings: TurnSettings,
    call: ToolCall,
    trusted: Trusted[Any],
    emits: bool,
    entrance: str,
) -> Generator[Effect, Any, bool]:
    """Just before an approved call runs, run its preview again if its tool asks
    (``@tool(preview=..., recheck=True)``) or an approver edited its arguments (the preview shown was
    of other ones): True, and the call waits again with the new preview, when it says something else
    than the preview that was approved (the world changed since, or the edit changes what it does)."""
    tool = settings.toolbox.get(call.name)
    preview = preview_of(tool)
    if preview is None or call.preview_digest is None:
        return False
    if not (getattr(tool, "recheck", False) or call.edited):
        return False
    outcome = yield _run(preview, conversation, call, trusted)
    text = _said(outcome, conversation, call)
    if text is None or text != call.preview:  # a recheck that fails proves nothing fresh: not run
        error = None if text is not None else _masked(_error(outcome), conversation, call)
        now = settings.clock()
        conversation.reopen_stale_call(call.id.value, text, error=error, at=now, entrance=entrance)
        if emits:  # a stream shows it waiting again, with its new preview
            yield Emit(ApprovalRequired((ToolCallView.of(call),)))
        return True
    return False


def previewed(
    conversation: Conversation, settings: TurnSettings, call: ToolCall, trusted: Trusted[Any]
) -> Generator[Effect, Any, None]:
    """Run the preview of a call that waits for a human, if its tool has one, and keep what it said."""
    preview = preview_of(settings.toolbox.get(call.name))
    if preview is None or call.status is not ToolCallStatus.PENDING:
        return
    outcome = yield _run(preview, conversation, call, trusted)
    text = _said(outcome, conversation, call)
    if text is None:
        call.preview_failed(_masked(_error(outcome), conversation, call))
    else:
        call.previewed(text)


def _run(
    preview: ExecutableTool, conversation: Conversation, call: ToolCall, trusted: Trusted[Any]
) -> RunTool:
    context = ToolContext(
        conversation.id,
        call.id.value,
        conversation.platform_context,
        Session(conversation.session),  # a copy: a preview changes nothing
        trusted.identity,
        trusted.deps,
    )
    timeout: float | None = getattr(preview, "timeout", None)
    return RunTool(preview, call.effective_input.as_dict(), context, timeout, PREVIEW_LIMIT)


def _said(outcome: ToolOutcome, conversation: Conversation, call: ToolCall) -> str | None:
    """What a preview said, masked, or None when it failed."""
    text = _text(outcome)
    return None if text is None else _masked(text, conversation, call)


def _text(outcome: ToolOutcome) -> str | None:
    """What a preview said, or None when it failed."""
    if outcome.question is not None or outcome.error is not None:
        return None
    output = outcome.output
    return output.text if isinstance(output, ToolOutput) else output or ""


def _error(outcome: ToolOutcome) -> str:
    return "a preview may not ask the user a question" if outcome.question is not None else str(outcome.error)


def _masked(text: str, conversation: Conversation, call: ToolCall) -> str:
    """`text` without the values of the call's secret arguments or the request's credentials: a
    preview (or its error) is stored, shown and sent where its arguments are masked
    (docs/approvals.md, "Secret arguments")."""
    arguments = call.effective_input.as_dict()
    secrets = [v for k, v in arguments.items() if k in call.secret_arguments and isinstance(v, str)]
    secrets += conversation.platform_context.secret_values()
    return scrub(text, secrets) if secrets else text
