"""The installed llama.cpp is the portable build unless a native one was asked for.

llama.cpp's default (GGML_NATIVE) build turns on every instruction set of the machine it is built on;
on AVX-512/AMX machines those code paths crashed. `make install` builds for AVX2/FMA/F16C on x86-64.
This reads the instruction sets the installed build was compiled with, so it fails on any machine
where the install step built natively, not only on one where the native build crashes.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest


def installed() -> dict[str, list[str]]:
    pytest.importorskip("llama_cpp", reason="the local extra is not installed: pip install -e '.[local]'")
    # In a child: loading the native library is the one thing here that could crash.
    done = subprocess.run(
        [sys.executable, "-m", "dcaf_like.runtimes.local_build"], capture_output=True, text=True, check=True
    )
    info: dict[str, list[str]] = json.loads(done.stdout.splitlines()[-1])
    return info


@pytest.mark.skipif(platform.machine() not in {"x86_64", "AMD64"}, reason="portable flags are for x86-64")
@pytest.mark.skipif(os.environ.get("LLAMA_NATIVE") == "1", reason="a native build was asked for")
def test_the_installed_build_uses_no_avx512_and_no_amx():
    info = installed()

    assert info["non_portable"] == []
    assert {"AVX", "AVX2", "FMA", "F16C"} <= set(info["enabled"])
