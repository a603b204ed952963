"""Terminal commands as an agent's tool: proposed by the model, run only once a human approved them.

``command_tool(runner)`` is the built-in command tool, ``run_command(argv)``: a call of it is a tool
call like any other (a server-minted id, bound to its exact argv, single use, the approval policy
and the audit trail), shown by the HelpDesk protocol as a command (``cmds``, ``executed_cmds``).
It always requires approval; a program the runner does not allow is refused when the model proposes
it, before any human is asked and before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dcaf_like.application.commands import (
    RUN_COMMAND,
    CommandFailed,
    CommandRefused,
    CommandResult,
    CommandRunner,
    checked_argv,
)
from dcaf_like.application.errors import InvalidToolArguments
from dcaf_like.commands.local import LocalCommandRunner
from dcaf_like.tools import Tool

_SCHEMA = {
    "type": "object",
    "properties": {
        "argv": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "description": "The program, then each of its arguments as a string of its own.",
        }
    },
    "required": ["argv"],
    "additionalProperties": False,
}


class CommandTool(Tool):
    """The command tool of one runner; its arguments are checked by the runner when proposed."""

    def __init__(self, runner: CommandRunner, *, timeout: float | None = None) -> None:
        if not isinstance(runner, CommandRunner):
            raise TypeError(f"command_tool takes a CommandRunner, not {type(runner).__name__}")
        self.runner = runner

        def run_command(argv: list[str]) -> str:
            try:
                result = runner.run(checked_argv(argv))
            except CommandRefused as exc:
                raise CommandFailed(f"command refused: {exc}") from None
            return result.text()

        super().__init__(
            run_command,
            name=RUN_COMMAND,
            description=_description(runner.programs),
            requires_approval=True,
            schema=_SCHEMA,
            timeout=timeout,
        )

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().validate(arguments)
        try:
            argv = checked_argv(checked.get("argv"))
            self.runner.check(argv)
        except CommandRefused as exc:
            raise InvalidToolArguments(self.name, str(exc)) from None
        return {"argv": list(argv)}


def command_tool(runner: CommandRunner, *, timeout: float | None = None) -> CommandTool:
    """The tool ``run_command(argv)`` an agent takes among its tools to propose terminal commands,
    each run by `runner` once a human approved its exact argv: ``Agent(tools=[command_tool(
    LocalCommandRunner(allow=["kubectl"]))])``. `timeout` bounds the tool as a whole (the runner has
    its own timeout, which kills the command)."""
    return CommandTool(runner, timeout=timeout)


def _description(programs: tuple[str, ...]) -> str:
    allowed = ", ".join(programs) if programs else "none (commands are off until configured)"
    return (
        "Run a terminal command once a human approves it. argv is the program, then each argument "
        "as a string of its own; no shell runs it, so pipes, redirects, globs and $VARIABLES are not "
        f"interpreted. Programs you may run: {allowed}."
    )


__all__ = [
    "CommandFailed",
    "CommandRefused",
    "CommandResult",
    "CommandRunner",
    "CommandTool",
    "LocalCommandRunner",
    "command_tool",
]
