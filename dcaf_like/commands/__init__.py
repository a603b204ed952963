"""Terminal commands as an agent's tool: proposed by the model, run only once a human approved them.

``command_tool(runner)`` is the built-in command tool, ``run_command(argv)``: a call of it is a tool
call like any other (a server-minted id, bound to its exact argv, single use, the approval policy
and the audit trail), shown by the HelpDesk protocol as a command (``cmds``, ``executed_cmds``).
It always requires approval; a program the runner does not allow is refused when the model proposes
it, before any human is asked and before anything runs. A program whose entry on the runner's
allow-list declares a dry run (``Program("kubectl", dry_run=kubectl_dry_run)``) has its commands
previewed by it: the approver is shown, as the call's preview, what the API server says the command
would do (``--dry-run=server``), for the commands that can be dry-run safely (docs/approvals.md, "A
command's dry run").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dcaf_like.application.command_runner import (
    RUN_COMMAND,
    CommandFailed,
    CommandRefused,
    CommandResult,
    CommandRunner,
    DeclaresDryRuns,
    DryRun,
    checked_argv,
)
from dcaf_like.application.errors import InvalidToolArguments
from dcaf_like.application.ports import NoPreview
from dcaf_like.commands.kubectl import KUBECTL_DRY_RUNS, kubectl_dry_run
from dcaf_like.commands.local import LocalCommandRunner, Program
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


class NoDryRun(CommandFailed, NoPreview):
    """A proposed command whose program declares no dry run, or one kubectl's dry run would not be
    safe for: its call waits without a preview, saying why."""


class CommandTool(Tool):
    """The command tool of one runner; its arguments are checked by the runner when proposed. A
    proposed command's preview is its dry run's output, run by the same runner: the dry run its
    program declares on the runner's allow-list, or `dry_run`'s, for every program, when given."""

    def __init__(
        self, runner: CommandRunner, *, timeout: float | None = None, dry_run: DryRun | None = None
    ) -> None:
        if not isinstance(runner, CommandRunner):
            raise TypeError(f"command_tool takes a CommandRunner, not {type(runner).__name__}")
        self.runner = runner
        planner = _planner(runner, dry_run)

        def dry_run_of(argv: list[str]) -> str:
            assert planner is not None
            planned = planner(checked_argv(argv))
            if planned is None:
                raise NoDryRun("this command has no dry run: what it would do is what it says")
            return runner.run(planned).text()

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
            preview=None if planner is None else dry_run_of,
        )

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().validate(arguments)
        try:
            argv = checked_argv(checked.get("argv"))
            self.runner.check(argv)
        except CommandRefused as exc:
            raise InvalidToolArguments(self.name, str(exc)) from None
        return {"argv": list(argv)}


def command_tool(
    runner: CommandRunner, *, timeout: float | None = None, dry_run: DryRun | None = None
) -> CommandTool:
    """The tool ``run_command(argv)`` an agent takes among its tools to propose terminal commands,
    each run by `runner` once a human approved its exact argv: ``Agent(tools=[command_tool(
    LocalCommandRunner(allow=["kubectl"]))])``. `timeout` bounds the tool as a whole (the runner has
    its own timeout, which kills the command). A proposed command is previewed by the output of its
    dry run: the one its program declares on the runner's allow-list (``Program("kubectl",
    dry_run=kubectl_dry_run)``), or, for a runner whose allow-list declares none, `dry_run`
    (``kubectl_dry_run``, or a function of your own), asked of every command."""
    return CommandTool(runner, timeout=timeout, dry_run=dry_run)


def _planner(
    runner: CommandRunner, dry_run: DryRun | None
) -> Callable[[tuple[str, ...]], tuple[str, ...] | None] | None:
    """What turns a command into its dry run: the dry run each program declares on `runner`'s
    allow-list, else `dry_run` asked of every command, else nothing (no preview)."""
    if isinstance(runner, DeclaresDryRuns) and runner.dry_run_programs:
        if dry_run is not None:
            raise ValueError(
                "the runner's allow-list declares its programs' dry runs: give them there or as "
                "dry_run=, not both"
            )
        return runner.dry_run
    if dry_run is None:
        return None

    def planned(argv: tuple[str, ...]) -> tuple[str, ...] | None:
        dry = dry_run(argv)
        return None if dry is None else checked_argv(list(dry))

    return planned


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
    "DeclaresDryRuns",
    "DryRun",
    "KUBECTL_DRY_RUNS",
    "LocalCommandRunner",
    "Program",
    "command_tool",
    "kubectl_dry_run",
]
