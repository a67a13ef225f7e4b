# `make demo` and `make test` do all set-up on a fresh machine: venv, packages, services.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
BENCH_STAMP := $(VENV)/.installed-bench
EXTRAS ?= test

.PHONY: demo test lint typecheck api-docs bench services clean peer-tests

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e ".[$(EXTRAS)]"
	touch $(STAMP)

# The demo needs only the openai SDK; `make test` installs every test extra.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e ".[openai]"
	touch $(DEMO_STAMP)

# The peers `make bench` compares with (the bench extra).
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e ".[$(EXTRAS),bench]"
	touch $(BENCH_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/otel-budget demo

services:
	bash scripts/ensure_services.sh

lint: $(STAMP)
	$(BIN)/ruff check otel_budget tests bench examples scripts

typecheck: $(STAMP)
	$(BIN)/mypy otel_budget
	$(BIN)/mypy --strict --follow-imports=silent tests/typing examples
	$(BIN)/python scripts/check_readme_types.py README.md

# The API reference of every public name, from the docstrings (pdoc); built by `make test` so it never breaks.
api-docs: $(STAMP)
	$(BIN)/pdoc -o build/api otel_budget otel_budget.testing otel_budget.analysis

test: $(STAMP) services lint typecheck api-docs
	$(BIN)/pytest -q -p no:cacheprovider

# The installed SDKs' own test suites without and with otel-budget; fails when a test's outcome differs.
# PEER_SUITES=openai,openai-agents,anthropic PEER_PASSES=base,trace,run,money PEER_JOBS=2 (pytest-xdist workers).
peer-tests: $(STAMP)
	$(BIN)/python scripts/peer_tests/run.py

bench: $(BENCH_STAMP)
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) .phoenix-venv .pytest_cache .mypy_cache .ruff_cache
