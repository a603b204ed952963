"""What the installed llama.cpp build was compiled for, and whether that is the build we asked for.

llama.cpp reports the instruction sets it was compiled with (``llama_print_system_info``): these are
compile-time facts, not what the CPU offers. ``make install`` builds a portable x86-64 set (AVX2, FMA,
F16C) unless ``LLAMA_NATIVE=1``; this module is how the install, the tests and the crash error read
what was actually built.

Run as ``python -m dcaf_like.runtimes.local_build [--expect portable|native|default]``: it prints the
build's features and exits 1 when they do not match the expectation.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
from dataclasses import dataclass

# Instruction sets a portable x86-64 build must not use: present on some server CPUs only, and the
# code paths behind them are the ones that crashed (AVX-512 FP16/BF16/VNNI, AMX under a hypervisor).
NON_PORTABLE = ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "AVX_VNNI")

PORTABLE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)


def rebuild_command() -> str:
    """The command that reinstalls llama-cpp-python with the portable instruction set."""
    return (
        f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --no-cache-dir --force-reinstall --no-deps '
        '"llama-cpp-python>=0.3.16"'
    )


@dataclass(frozen=True)
class BuildInfo:
    """The instruction sets one llama.cpp build was compiled with (name -> on)."""

    features: dict[str, bool]
    machine: str

    @classmethod
    def parse(cls, system_info: str, machine: str | None = None) -> BuildInfo:
        """Reads llama.cpp's ``KEY = 0|1 | ...`` system-info line (every backend's section)."""
        found = re.findall(r"([A-Z][A-Z0-9_]*)\s*=\s*([01])\b", system_info)
        return cls({name: value == "1" for name, value in found}, machine or platform.machine())

    @property
    def enabled(self) -> list[str]:
        return sorted(name for name, on in self.features.items() if on)

    @property
    def non_portable(self) -> list[str]:
        """The instruction sets this build uses that a portable x86-64 build leaves out."""
        return sorted(name for name in self.features if self.features[name] and _is_non_portable(name))

    def describe(self) -> str:
        return ", ".join(self.enabled) or "no optional instruction sets"


def _is_non_portable(name: str) -> bool:
    return name.startswith(("AVX512", "AMX")) or name in NON_PORTABLE


def installed_build() -> BuildInfo:
    """Reads the installed build's features. Loads llama.cpp's library (runs no model)."""
    import llama_cpp

    raw = llama_cpp.llama_print_system_info()
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return BuildInfo.parse(text)


def matches(build: BuildInfo, expect: str) -> bool:
    """``portable``: x86-64 without AVX-512/AMX; ``native`` and ``default``: whatever was built."""
    if expect == "portable":
        return not build.non_portable
    return expect in {"native", "default"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--expect", choices=["portable", "native", "default"], default=None)
    args = parser.parse_args(argv)
    build = installed_build()
    print(
        json.dumps({"machine": build.machine, "enabled": build.enabled, "non_portable": build.non_portable})
    )
    if args.expect is not None and not matches(build, args.expect):
        print(
            f"llama.cpp was built with {', '.join(build.non_portable)}, not the {args.expect} build; "
            f"rebuild with: {rebuild_command()}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
