"""A model's first generation runs in a child process, so a native crash is an error, not a dead server.

llama.cpp is native code: a build compiled for instructions the CPU (or its hypervisor) mishandles dies
by a signal inside ``decode``, taking the whole process with it, with no Python exception to catch.
Before :class:`~dcaf_like.runtimes.local.LocalRuntime` loads a model into the serving process, it runs
one short generation of that model in a child process. The verdict is kept next to the model, keyed by
the installed build and the model file, so the probe runs once per build and model.

Run as ``python -m dcaf_like.runtimes.local_probe MODEL.gguf``: prints the build's features as one JSON
line, generates a few tokens, prints ``ok``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dcaf_like.application.errors import ModelError
from dcaf_like.runtimes.local_build import rebuild_command

# Signals that say the native code itself failed (a verdict worth keeping). A SIGKILL (out of memory,
# an operator) says nothing about the build, so it is reported but not remembered.
_CRASHES = {signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT}


class LocalModelCrashed(ModelError):
    """The model crashed llama.cpp in a child process; it was not loaded into this one."""

    def __init__(self, message: str, *, signal_name: str, build: str) -> None:
        super().__init__(message, runtime="local")
        self.signal_name = signal_name
        self.build = build


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    build: str  # the build's enabled instruction sets, as llama.cpp reports them
    signal_name: str | None = None
    detail: str = ""


def probe_command(model: Path) -> list[str]:
    return [sys.executable, "-m", "dcaf_like.runtimes.local_probe", str(model)]


def run_probe(model: Path, command: Sequence[str] | None = None, *, timeout: float = 600) -> ProbeResult:
    """Runs the probe child for `model` and reads how it ended."""
    argv = list(command) if command is not None else probe_command(model)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult(ok=False, build="unknown", detail=f"the probe did not finish in {timeout:.0f} s")
    lines = done.stdout.splitlines()
    build = _build_from(lines)
    if done.returncode < 0:
        name = _signal_name(-done.returncode)
        return ProbeResult(ok=False, build=build, signal_name=name, detail=_tail(done.stderr))
    if done.returncode != 0 or "ok" not in lines:
        return ProbeResult(ok=False, build=build, detail=_tail(done.stderr) or f"exit {done.returncode}")
    return ProbeResult(ok=True, build=build)


def ensure_model_runs(model: Path, command: Sequence[str] | None = None) -> None:
    """Raises :class:`LocalModelCrashed` (or :class:`ModelError`) unless `model` generates in a child.

    A verdict is cached in ``MODEL.probe.json`` for the installed build; a cached crash is raised again
    without a new child, until the build or the model changes."""
    cache = model.with_name(model.name + ".probe.json")
    key = build_key(model)
    cached = _read_cache(cache, key)
    result = cached if cached is not None else run_probe(model, command)
    if cached is None and (result.ok or _signal_is_crash(result.signal_name)):
        _write_cache(cache, key, result)
    if result.ok:
        return
    if result.signal_name is not None:
        raise LocalModelCrashed(
            f"llama.cpp crashed with {result.signal_name} running {model.name} in a child process, so the "
            f"model was not loaded here. This build of llama.cpp uses: {result.build}. A build for "
            f"instructions this CPU (or its hypervisor) does not handle is the usual cause; rebuild it "
            f"portably with: {rebuild_command()}",
            signal_name=result.signal_name,
            build=result.build,
        )
    raise ModelError(
        f"local: {model.name} could not run in a child process: {result.detail}", runtime="local"
    )


def build_key(model: Path) -> str:
    """Identifies the installed llama.cpp build and the model file without loading either."""
    parts = [str(model.resolve()), *_stat(model)]
    try:
        import llama_cpp
    except ImportError:
        parts.append("no-llama-cpp")
    else:
        parts.append(getattr(llama_cpp, "__version__", "?"))
        package = Path(llama_cpp.__file__).parent
        for library in sorted(package.rglob("*.so*")) + sorted(package.rglob("*.dylib")):
            parts += [library.name, *_stat(library)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _stat(path: Path) -> list[str]:
    info = path.stat()
    return [str(info.st_size), str(info.st_mtime_ns)]


def _read_cache(cache: Path, key: str) -> ProbeResult | None:
    try:
        stored = json.loads(cache.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("key") != key:
        return None
    return ProbeResult(
        ok=stored.get("ok") is True, build=str(stored.get("build")), signal_name=stored.get("signal")
    )


def _write_cache(cache: Path, key: str, result: ProbeResult) -> None:
    record = {"key": key, "ok": result.ok, "build": result.build, "signal": result.signal_name}
    with contextlib.suppress(OSError):  # a read-only model directory: the probe runs again next time
        cache.write_text(json.dumps(record) + "\n")


def _build_from(lines: list[str]) -> str:
    for line in lines:
        if line.startswith("{"):
            try:
                info = json.loads(line)
            except ValueError:
                continue
            enabled = info.get("enabled") if isinstance(info, dict) else None
            if isinstance(enabled, list):
                return ", ".join(str(name) for name in enabled) or "no optional instruction sets"
    return "unknown (the child died before reporting it)"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _signal_is_crash(name: str | None) -> bool:
    return name is not None and any(name == crash.name for crash in _CRASHES)


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dcaf_like.runtimes.local_probe MODEL.gguf", file=sys.stderr)
        return 2
    from llama_cpp import Llama

    from dcaf_like.runtimes.local_build import installed_build

    build = installed_build()
    print(json.dumps({"enabled": build.enabled}), flush=True)
    llm = Llama(model_path=args[0], n_ctx=256, n_threads=None, seed=0, verbose=False)
    llm.create_chat_completion(messages=[{"role": "user", "content": "Say ok."}], max_tokens=4, temperature=0)
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
