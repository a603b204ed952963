"""A native crash in the model's first generation is a typed error naming the signal, not a dead process.

The children here really crash (a null pointer read through ctypes) or really exit: no mock of
subprocess. The probe's command is swapped for these small scripts; the real probe of the real model
runs in tests/e2e/test_local_model_http.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dcaf_like.application.errors import ModelError
from dcaf_like.runtimes.local_build import BuildInfo, rebuild_command
from dcaf_like.runtimes.local_probe import LocalModelCrashed, ensure_model_runs, run_probe

REPORT = "import json; print(json.dumps({'enabled': ['AVX', 'AVX2', 'AVX512']}), flush=True)"
SEGFAULT = [sys.executable, "-c", f"{REPORT}; import ctypes; ctypes.string_at(0)"]
SUCCEEDS = [sys.executable, "-c", f"{REPORT}; print('ok')"]
KILLED = [sys.executable, "-c", f"{REPORT}; import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
FAILS = [sys.executable, "-c", "raise SystemExit('no such model')"]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF not really")
    return path


def test_a_child_that_segfaults_is_reported_with_its_signal_and_the_build():
    result = run_probe(Path("unused.gguf"), SEGFAULT)

    assert not result.ok
    assert result.signal_name == "SIGSEGV"
    assert result.build == "AVX, AVX2, AVX512"


def test_a_crash_raises_a_typed_error_naming_the_signal_the_build_and_the_rebuild_command(model):
    with pytest.raises(LocalModelCrashed) as raised:
        ensure_model_runs(model, SEGFAULT)

    error = raised.value
    assert isinstance(error, ModelError)
    assert error.signal_name == "SIGSEGV"
    assert "SIGSEGV" in str(error)
    assert "AVX512" in str(error)
    assert rebuild_command() in str(error)
    assert "-DGGML_NATIVE=OFF" in rebuild_command()


def test_a_crash_verdict_is_kept_for_the_build_and_model_and_dropped_when_the_model_changes(model):
    with pytest.raises(LocalModelCrashed):
        ensure_model_runs(model, SEGFAULT)

    with pytest.raises(LocalModelCrashed):  # from the cache: the succeeding child is not run
        ensure_model_runs(model, SUCCEEDS)

    model.write_bytes(b"GGUF another file")
    os.utime(model, ns=(1, 1))
    ensure_model_runs(model, SUCCEEDS)  # a new model file is probed again, and runs


def test_a_model_that_runs_is_probed_once(model):
    ensure_model_runs(model, SUCCEEDS)

    ensure_model_runs(model, SEGFAULT)  # cached: the crashing child is never started
    cached = json.loads(model.with_name("model.gguf.probe.json").read_text())
    assert cached["ok"] is True


def test_a_killed_child_is_an_error_but_not_remembered(model):
    with pytest.raises(LocalModelCrashed, match="SIGKILL"):
        ensure_model_runs(model, KILLED)

    ensure_model_runs(model, SUCCEEDS)


def test_a_child_that_fails_without_a_signal_is_a_model_error_with_its_words(model):
    with pytest.raises(ModelError, match="no such model") as raised:
        ensure_model_runs(model, FAILS)

    assert not isinstance(raised.value, LocalModelCrashed)


AVX512_BUILD = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | "
    "AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | "
    "REPACK = 1 | "
)
PORTABLE_BUILD = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)


def test_llama_cpps_system_info_is_read_into_the_non_portable_instruction_sets():
    native = BuildInfo.parse(AVX512_BUILD, "x86_64")
    portable = BuildInfo.parse(PORTABLE_BUILD, "x86_64")

    assert native.non_portable == ["AMX_INT8", "AVX512", "AVX512_BF16", "AVX512_VBMI", "AVX512_VNNI"]
    assert portable.non_portable == []
    assert {"AVX2", "FMA"} <= set(portable.enabled)
