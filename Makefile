# The commands a newcomer runs: `make install`, then `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install test lint typecheck unit demo bench clean

install: $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[all,dev]"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

lint:
	$(BIN)/ruff check dcaf_like tests examples benchmarks
	$(BIN)/ruff format --check dcaf_like tests examples benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest

unit:
	$(BIN)/python -m pytest tests/unit

# Benchmarks side by side with Agno, ADK and LangChain; rewrites the generated part of docs/benchmarks.md.
bench: $(BIN)/python
	$(BIN)/python benchmarks/run.py

# The operations agent on the local model (fetched and verified on first run), served on :8000.
# DCAF_RUNTIME=openai:<model> (with OPENAI_BASE_URL) or bedrock:<model id> runs it on another provider.
demo: $(BIN)/python
	$(BIN)/python examples/ops_demo.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
