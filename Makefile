# The commands a newcomer runs: `make install`, then `make test`.
PYTHON ?= python3
VENV ?= .venv
LLAMA_NATIVE ?= 0
BIN := $(VENV)/bin

.PHONY: install test lint typecheck unit docs demo bench soak clean

# llama.cpp is built for a portable x86-64 instruction set (AVX2/FMA/F16C); LLAMA_NATIVE=1 builds it
# for this machine's CPU instead (see docs/runtimes.md).
install: $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	LLAMA_NATIVE=$(LLAMA_NATIVE) bash scripts/install.sh $(BIN)/python ".[all,dev]"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

lint:
	$(BIN)/ruff check dcaf_like tests examples benchmarks
	$(BIN)/ruff format --check dcaf_like tests examples benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/lint_figures.py

# The suite over the machine's cores (at most 4): about 4 minutes on 2 cores with Redis, PostgreSQL
# and Chromium present (docs/development.md, "What make test needs"). The benchmark tests run in `make bench`.
test: lint
	$(BIN)/python -m pytest -n auto --maxprocesses 4

unit:
	$(BIN)/python -m pytest tests/unit

# The API reference (pdoc) in build/api/index.html; fails on pdoc's warnings and on a docstring's
# reference (:class:`...`) that names nothing. `make test` runs the same checks (tests/test_api_docs.py).
docs: $(BIN)/python
	$(BIN)/python scripts/api_docs.py build/api

# Benchmarks side by side with Agno, ADK and LangChain; rewrites the generated part of docs/benchmarks.md.
bench: $(BIN)/python
	$(BIN)/python -m pytest -m bench
	$(BIN)/python benchmarks/run.py

# A bounded soak on loopback (about 5 minutes): 16 clients mixing turns, approvals, rejections, streams,
# abandoned proposals and duplicate approvals, on 1 worker with SQLite, then 2 with Redis, then 2 with
# PostgreSQL; requests/s, p50/p99 per window, RSS slope and the exactly-once check of every approval
# (docs/benchmarks.md, "Soak").
soak: $(BIN)/python
	$(BIN)/python benchmarks/soak.py

# The operations agent on the local model (fetched and verified on first run), served on :8000.
# DCAF_RUNTIME=openai:<model> (with OPENAI_BASE_URL) or bedrock:<model id> runs it on another provider.
demo: $(BIN)/python
	$(BIN)/python examples/ops_demo.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
