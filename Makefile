# `make demo` and `make test` do all set-up on a fresh machine: venv, packages, services.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= test

.PHONY: demo test lint typecheck bench services clean peer-tests

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/otel-budget demo

services:
	bash scripts/ensure_services.sh

lint: $(STAMP)
	$(BIN)/ruff check otel_budget tests bench examples scripts

typecheck: $(STAMP)
	$(BIN)/mypy otel_budget

test: $(STAMP) services lint typecheck
	$(BIN)/pytest -q -p no:cacheprovider

# The installed SDKs' own test suites without and with otel-budget; fails when a test's outcome differs.
# PEER_SUITES=openai,openai-agents,anthropic PEER_PASSES=base,trace,run PEER_JOBS=2 (pytest-xdist workers).
peer-tests: $(STAMP)
	$(BIN)/python scripts/peer_tests/run.py

bench: $(STAMP)
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
