"""Terminal commands: what runs them (the :class:`CommandRunner` port) and the rules of an argv.

A command is never typed by a client. The model proposes it as a call of the command tool
(:data:`RUN_COMMAND`, arguments ``{"argv": [...]}``), so it goes through the approval gate like any
tool call: a server-minted id, bound to its exact argv, single use, run only once a human approved
it. The runner is asked twice: :meth:`CommandRunner.check` when the call is proposed (a program it
would not run is refused before anyone is asked), and :meth:`CommandRunner.run` once approved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

RUN_COMMAND = "run_command"
"""The name of the command tool; a protocol shows its calls as commands (HelpDesk ``cmds``)."""

DryRun = Callable[[Sequence[str]], Sequence[str] | None]
"""A command's dry run: the argv that shows what the command would do and changes nothing, or None
when the command has none."""


class CommandRefused(Exception):
    """The runner will not run this argv (a program not allowed, a malformed argv). Nothing ran."""


class CommandFailed(Exception):
    """The command could not be run to its end (not found, timed out); `output` is what it wrote."""

    def __init__(self, message: str, output: str = "") -> None:
        self.output = output
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command did: its exit status and its output (stdout and stderr, in the order written),
    cut at the runner's cap (`truncated`)."""

    exit_code: int
    output: str
    truncated: bool = False

    def text(self) -> str:
        """The result as the model (and the approver, in ``executed_cmds``) reads it."""
        notes = []
        if self.truncated:
            notes.append("[output truncated]")
        if self.exit_code != 0:
            notes.append(f"[exit status {self.exit_code}]")
        return "\n".join([self.output.rstrip("\n"), *notes]) if notes else self.output


@runtime_checkable
class CommandRunner(Protocol):
    """Runs an approved argv: on this machine (``LocalCommandRunner``) or elsewhere (a remote host),
    never through a shell. `programs` are the programs it runs (shown to the model)."""

    @property
    def programs(self) -> tuple[str, ...]: ...

    def check(self, argv: Sequence[str]) -> None:
        """Raise :class:`CommandRefused` if this runner would not run `argv`; run nothing."""

    def run(self, argv: Sequence[str]) -> CommandResult:
        """Run `argv` (checked again first); raise :class:`CommandFailed` if it could not finish."""


@runtime_checkable
class DeclaresDryRuns(Protocol):
    """A :class:`CommandRunner` whose allow-list declares, per program, the dry run that previews its
    commands (``LocalCommandRunner(allow=[Program("kubectl", dry_run=kubectl_dry_run)])``).
    `dry_run_programs` are the programs that declare one."""

    @property
    def dry_run_programs(self) -> tuple[str, ...]: ...

    def dry_run(self, argv: Sequence[str]) -> tuple[str, ...] | None:
        """The argv of `argv`'s dry run, as its program declares it; None when its program declares
        none or this command has none. Runs nothing; raises :class:`CommandRefused` as ``check``."""


def checked_argv(argv: Any) -> tuple[str, ...]:
    """`argv` as a tuple of strings: a non-empty list of strings, none holding a NUL character, the
    program's name not empty. Raises :class:`CommandRefused` naming the problem."""
    if not isinstance(argv, Sequence) or isinstance(argv, str | bytes):
        raise CommandRefused("argv must be a list of strings: the program, then its arguments")
    if not argv:
        raise CommandRefused("argv is empty: name the program to run")
    for i, part in enumerate(argv):
        if not isinstance(part, str):
            raise CommandRefused(f"argv[{i}] must be a string, not {type(part).__name__}")
        if "\0" in part:
            raise CommandRefused(f"argv[{i}] holds a NUL character")
    if not argv[0].strip():
        raise CommandRefused("argv[0] must name a program")
    return tuple(argv)


def command_argv(name: str, arguments: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The argv of a call of the command tool; None for any other call (or a malformed one)."""
    if name != RUN_COMMAND:
        return None
    try:
        return checked_argv(arguments.get("argv"))
    except CommandRefused:
        return None
