"""Terminal commands as an agent's tool: proposed by the model, run only once a human approved them.

``command_tool(runner)`` is the built-in command tool, ``run_command(argv)``: a call of it is a tool
call like any other (a server-minted id, bound to its exact argv, single use, the approval policy
and the audit trail), shown by the HelpDesk protocol as a command (``cmds``, ``executed_cmds``).
It always requires approval; a program the runner does not allow is refused when the model proposes
it, before any human is asked and before anything runs. With ``dry_run=kubectl_dry_run`` the approver
is shown, as the call's preview, what the API server says the command would do (``--dry-run=server``),
for the commands that can be dry-run safely (docs/approvals.md, "A command's dry run").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
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


#: A command's dry run: the argv that shows what it would do and changes nothing, or None (none).
DryRun = Callable[[Sequence[str]], Sequence[str] | None]

#: kubectl's commands that take ``--dry-run=server``: the API server checks and renders the change
#: and keeps nothing.
KUBECTL_DRY_RUNS = frozenset(
    {"annotate", "apply", "create", "delete", "label", "patch", "replace", "scale", "set"}
)
#: Flags a dry run is never made with, before a human approved anything: another server, cluster,
#: identity or credentials; raw requests; a dry run of the model's own; the end of the flags (after
#: ``--`` the dry run would be an argument, and the command would run for real); files kubectl would
#: write (logs, profiles, caches) or a kustomization it would build (which may fetch remote bases).
_NO_DRY_RUN_WITH = frozenset(
    {
        "--",
        "--dry-run",
        "--raw",
        "--log-file",
        "--log-dir",
        "--profile",
        "--profile-output",
        "--cache-dir",
        "-k",
        "--kustomize",
        "--server",
        "--kubeconfig",
        "--context",
        "--cluster",
        "--user",
        "--token",
        "--as",
        "--as-group",
        "--as-uid",
        "--username",
        "--password",
        "--certificate-authority",
        "--client-certificate",
        "--client-key",
        "--insecure-skip-tls-verify",
        "--tls-server-name",
    }
)


def kubectl_dry_run(argv: Sequence[str]) -> list[str] | None:
    """The server-side dry run of a kubectl command that changes something (``kubectl <command> ...
    --dry-run=server -o yaml``), or None when the command has none or it cannot be made safely: a
    command not in :data:`KUBECTL_DRY_RUNS` (or after a global flag), a flag of
    :data:`_NO_DRY_RUN_WITH`, ``-s`` (the server), anything by URL (kubectl would fetch it), or a
    manifest (``-f``) outside the runner's folder: an absolute path, or one through ``..`` (its
    content could come back in the preview's error, to someone who approved nothing)."""
    if len(argv) < 2 or PurePath(argv[0]).name != "kubectl" or argv[1] not in KUBECTL_DRY_RUNS:
        return None
    arguments = list(argv[2:])
    for n, argument in enumerate(arguments):
        flag = argument.split("=", 1)[0]
        if flag in _NO_DRY_RUN_WITH or "://" in argument:
            return None
        short = argument.startswith("-") and not argument.startswith("--")
        if short and argument[1:2] in ("s", "k"):
            return None
        manifest = _manifest(argument, arguments[n + 1] if n + 1 < len(arguments) else "")
        if manifest is not None and (PurePath(manifest).is_absolute() or ".." in PurePath(manifest).parts):
            return None
    return [*argv, "--dry-run=server", "-o", "yaml"]


def _manifest(argument: str, following: str) -> str | None:
    """The file `argument` names after ``-f`` / ``--filename`` (in any of their forms), else None."""
    if argument in ("-f", "--filename"):
        return following
    if argument.startswith("--filename="):
        return argument.removeprefix("--filename=")
    if argument.startswith("-f") and not argument.startswith("--"):
        return argument[2:].removeprefix("=")
    return None


class CommandTool(Tool):
    """The command tool of one runner; its arguments are checked by the runner when proposed. With
    `dry_run`, a proposed command's preview is its dry run's output, run by the same runner."""

    def __init__(
        self, runner: CommandRunner, *, timeout: float | None = None, dry_run: DryRun | None = None
    ) -> None:
        if not isinstance(runner, CommandRunner):
            raise TypeError(f"command_tool takes a CommandRunner, not {type(runner).__name__}")
        self.runner = runner

        def dry_run_of(argv: list[str]) -> str:
            assert dry_run is not None
            planned = dry_run(checked_argv(argv))
            if planned is None:
                raise CommandFailed("this command has no dry run: what it would do is what it says")
            return runner.run(checked_argv(list(planned))).text()

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
            preview=None if dry_run is None else dry_run_of,
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
    its own timeout, which kills the command). `dry_run` (``kubectl_dry_run``, or a function of your
    own) gives each proposed command a preview: the output of its dry run."""
    return CommandTool(runner, timeout=timeout, dry_run=dry_run)


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
    "DryRun",
    "LocalCommandRunner",
    "command_tool",
    "kubectl_dry_run",
]
