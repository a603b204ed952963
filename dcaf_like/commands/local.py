"""``LocalCommandRunner``: approved commands run on this machine, as an argv, never through a shell."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dcaf_like.application.command_runner import (
    CommandFailed,
    CommandRefused,
    CommandResult,
    DryRun,
    checked_argv,
)

_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class Program:
    """A program on a runner's allow-list: its `name` (the model's ``argv[0]``), its `executable`
    (looked up on the runner's path when empty) and its `dry_run`, if it has one: the function that
    turns one of its commands into the command that shows what it would do and changes nothing
    (``kubectl_dry_run``), run as the call's preview before anyone approved it."""

    name: str
    executable: str = ""
    dry_run: DryRun | None = None


class LocalCommandRunner:
    """Runs an allowed program in a child process: no shell, stdin closed, stdout and stderr read
    together up to `max_output` bytes (the rest is read and dropped), killed with its process group
    after `timeout` seconds.

    `allow` lists the programs that may run, by the name the model uses as ``argv[0]``: a name is
    looked up on `path` (default: this process's ``PATH``) when the command runs; a mapping gives
    each name its executable (``{"kubectl": "/usr/local/bin/kubectl"}``); a :class:`Program` gives
    a name its executable and its dry run (``Program("kubectl", dry_run=kubectl_dry_run)``). Empty
    by default: commands are off until configured. ``argv[0]`` must be one of these names exactly
    (a path such as ``/tmp/kubectl`` is not ``kubectl``). `cwd` is where commands run (default: this
    process's working directory); `env` their environment (default: this process's).
    """

    def __init__(
        self,
        allow: Iterable[str | Program] | Mapping[str, str] = (),
        *,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 30.0,
        max_output: int = 64 * 1024,
        path: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(allow, str):
            raise TypeError("allow is a list of program names, not one string")
        programs = (
            [Program(name, executable) for name, executable in allow.items()]
            if isinstance(allow, Mapping)
            else [entry if isinstance(entry, Program) else Program(entry) for entry in allow]
        )
        for program in programs:
            name = program.name
            if not isinstance(name, str) or not name or "/" in name or os.sep in name or "\0" in name:
                raise ValueError(f"allow: {name!r} is not a program's name (give paths as a mapping)")
        if not (timeout > 0):
            raise ValueError("timeout must be a positive number of seconds")
        if max_output < 1:
            raise ValueError("max_output must be at least one byte")
        self._programs = {program.name: program for program in programs}
        self.cwd = Path(cwd) if cwd is not None else None
        self.timeout = timeout
        self.max_output = max_output
        self.path = path
        self.env = dict(env) if env is not None else None

    @property
    def programs(self) -> tuple[str, ...]:
        return tuple(self._programs)

    @property
    def dry_run_programs(self) -> tuple[str, ...]:
        """The programs whose commands have a dry run, as their entry on the allow-list declares."""
        return tuple(name for name, program in self._programs.items() if program.dry_run is not None)

    def check(self, argv: Sequence[str]) -> None:
        program = checked_argv(argv)[0]
        if not self._programs:
            raise CommandRefused("no program is allowed: commands are off until the operator allows some")
        if program not in self._programs:
            allowed = ", ".join(self._programs)
            raise CommandRefused(f"program {program!r} is not allowed; the allowed programs are: {allowed}")

    def dry_run(self, argv: Sequence[str]) -> tuple[str, ...] | None:
        """The argv of `argv`'s dry run, by its program's declared dry run; None when the program
        declares none or the command has none. A dry run runs the same program (refused otherwise):
        the allow-list declared it for that program. Runs nothing."""
        self.check(argv)
        declared = self._programs[argv[0]].dry_run
        planned = None if declared is None else declared(argv)
        if planned is None:
            return None
        dry = checked_argv(list(planned))
        if dry[0] != argv[0]:
            raise CommandRefused(f"the dry run of {argv[0]!r} runs another program, {dry[0]!r}")
        return dry

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.check(argv)
        executable = self._programs[argv[0]].executable or shutil.which(argv[0], path=self.path)
        if not executable:
            raise CommandFailed(f"program {argv[0]!r} was not found on this machine")
        try:
            process = subprocess.Popen(
                list(argv),
                executable=executable,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                shell=False,
                start_new_session=True,
            )
        except OSError as exc:
            raise CommandFailed(f"{argv[0]} could not start: {exc.strerror or exc}") from None
        kept = bytearray()
        dropped = threading.Event()
        reader = threading.Thread(target=_read, args=(process, kept, self.max_output, dropped), daemon=True)
        reader.start()
        try:
            exit_code = process.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill(process)
            reader.join(timeout=5)
            raise CommandFailed(
                f"{argv[0]} ran past its time limit of {self.timeout:g}s and was stopped",
                _decoded(kept),
            ) from None
        reader.join(timeout=self.timeout)  # a child it left behind may hold the pipe open
        return CommandResult(exit_code, _decoded(kept), truncated=dropped.is_set())

    def __repr__(self) -> str:
        return f"LocalCommandRunner(allow={list(self._programs)!r}, cwd={self.cwd!r})"


def _read(process: subprocess.Popen[bytes], kept: bytearray, cap: int, dropped: threading.Event) -> None:
    """Read the child's output to its end (so it never blocks on a full pipe), keeping `cap` bytes."""
    assert process.stdout is not None
    with process.stdout:
        while chunk := process.stdout.read(_CHUNK):
            room = cap - len(kept)
            if len(chunk) > room:
                dropped.set()
            if room > 0:
                kept.extend(chunk[:room])


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Stop the child and whatever it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _decoded(output: bytearray) -> str:
    return bytes(output).decode("utf-8", errors="replace")
