"""``LocalCommandRunner``: approved commands run on this machine, as an argv, never through a shell."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from dcaf_like.application.commands import CommandFailed, CommandRefused, CommandResult, checked_argv

_CHUNK = 65536


class LocalCommandRunner:
    """Runs an allowed program in a child process: no shell, stdin closed, stdout and stderr read
    together up to `max_output` bytes (the rest is read and dropped), killed with its process group
    after `timeout` seconds.

    `allow` lists the programs that may run, by the name the model uses as ``argv[0]``: a name is
    looked up on `path` (default: this process's ``PATH``) when the command runs; a mapping gives
    each name its executable (``{"kubectl": "/usr/local/bin/kubectl"}``). Empty by default:
    commands are off until configured. ``argv[0]`` must be one of these names exactly (a path such as
    ``/tmp/kubectl`` is not ``kubectl``). `cwd` is where commands run (default: this process's
    working directory); `env` their environment (default: this process's).
    """

    def __init__(
        self,
        allow: Iterable[str] | Mapping[str, str] = (),
        *,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 30.0,
        max_output: int = 64 * 1024,
        path: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(allow, str):
            raise TypeError("allow is a list of program names, not one string")
        executables = dict(allow) if isinstance(allow, Mapping) else dict.fromkeys(allow, "")
        for name in executables:
            if not name or "/" in name or os.sep in name or "\0" in name:
                raise ValueError(f"allow: {name!r} is not a program's name (give paths as a mapping)")
        if not (timeout > 0):
            raise ValueError("timeout must be a positive number of seconds")
        if max_output < 1:
            raise ValueError("max_output must be at least one byte")
        self._executables = executables
        self.cwd = Path(cwd) if cwd is not None else None
        self.timeout = timeout
        self.max_output = max_output
        self.path = path
        self.env = dict(env) if env is not None else None

    @property
    def programs(self) -> tuple[str, ...]:
        return tuple(self._executables)

    def check(self, argv: Sequence[str]) -> None:
        program = checked_argv(argv)[0]
        if not self._executables:
            raise CommandRefused("no program is allowed: commands are off until the operator allows some")
        if program not in self._executables:
            allowed = ", ".join(self._executables)
            raise CommandRefused(f"program {program!r} is not allowed; the allowed programs are: {allowed}")

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.check(argv)
        executable = self._executables[argv[0]] or shutil.which(argv[0], path=self.path)
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
        return f"LocalCommandRunner(allow={list(self._executables)!r}, cwd={self.cwd!r})"


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
