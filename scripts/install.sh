#!/usr/bin/env bash
# `make install`: dcaf_like with every extra and the dev tools, llama.cpp (the `local` extra's native
# code) built with a portable instruction set.
#
# llama.cpp's default build is GGML_NATIVE (-march=native): it uses every instruction of the CPU it
# is built on, AVX-512 and AMX included, and crashes on some of them (and on any machine the build is
# copied to that lacks them). On x86-64 we build for AVX2/FMA/F16C instead, which every x86-64 CPU
# of the last decade has. LLAMA_NATIVE=1 asks for llama.cpp's native build.
#
# pip keeps built wheels in its cache keyed by the source, not by CMAKE_ARGS: a wheel built natively
# earlier would be reused. So the installed build is checked after install and rebuilt, bypassing the
# cache, when its instruction set is not the one asked for.
set -euo pipefail
python=${1:?usage: install.sh PYTHON [PIP TARGET...]}
shift
targets=("${@:-.[all,dev]}")
spec=$("$python" -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); print(d["project"]["optional-dependencies"]["local"][0])')

if [[ ${LLAMA_NATIVE:-0} == 1 ]]; then
  want=native
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_NATIVE=ON"
elif [[ $(uname -m) == x86_64 || $(uname -m) == amd64 ]]; then
  want=portable
  # The flags are dcaf_like's own (the runtime's crash error names the same rebuild command); the
  # module imports only the standard library, so it is read from the source tree before any install.
  portable=$(PYTHONPATH=. "$python" -c 'from dcaf_like.runtimes.local_build import PORTABLE_CMAKE_ARGS as a; print(a)')
  export CMAKE_ARGS="${CMAKE_ARGS:-} $portable"
else
  want=default
fi

check() { "$python" -m dcaf_like.runtimes.local_build --expect "$want" >/dev/null 2>&1; }

"$python" -m pip install --quiet -e "${targets[@]}"
if "$python" -c 'import llama_cpp' >/dev/null 2>&1 && ! check; then
  echo "llama.cpp: the installed build is not the $want one; rebuilding without pip's wheel cache" >&2
  "$python" -m pip install --quiet --no-cache-dir --force-reinstall --no-deps "$spec"
  "$python" -m dcaf_like.runtimes.local_build --expect "$want"
fi

# The chat page's browser tests drive Debian's Chromium (no browser is downloaded). Installed here
# when this runs as root with apt, as .ci/run does; otherwise `make test` names the skipped group and
# the command that enables it.
if [[ ! -x /usr/bin/chromium ]]; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the chat page's browser tests" >&2
    (apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)) >/dev/null
  else
    echo "note: no /usr/bin/chromium: the chat page's browser tests will be skipped (sudo apt-get install chromium)" >&2
  fi
fi
