# Two commands: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
STAMP_SERVER := $(VENV)/.installed-server

.PHONY: demo test lint typecheck pytest pytest-uvloop bench clean

# The tests whose behaviour depends on the event loop, run a second time on uvloop (which
# `golem serve` and `golem worker` pick when installed): the store, the worker, the service,
# the run loop and tools.
UVLOOP_TESTS := tests/store tests/service tests/test_worker*.py tests/test_deferred*.py \
	tests/test_tool*.py tests/test_loop.py tests/test_agent*.py tests/test_streaming.py \
	tests/test_mcp.py tests/test_events.py tests/test_as_tool.py tests/test_otel_store.py \
	tests/test_event_loops.py

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP_SERVER): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server]'
	touch $@ $(STAMP_RUN)

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(STAMP_RUN) $(STAMP_SERVER)

# The library cycle offline, then the approvals service on SQLite: in a terminal it serves the
# web inbox until Ctrl-C; without one (CI, scripts) it runs the same cycle through the HTTP API once.
demo: $(STAMP_SERVER)
	$(BIN)/python examples/deferred_tools.py
	@if [ -t 0 ] && [ -t 1 ]; then $(BIN)/golem demo; else $(BIN)/golem demo --once; fi

test: $(STAMP_DEV)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/mypy
	$(BIN)/python -m pytest -q
	GOLEM_TEST_LOOP=uvloop $(BIN)/python -m pytest -q $(UVLOOP_TESTS)

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests examples bench

typecheck: $(STAMP_DEV)
	$(BIN)/mypy

pytest: $(STAMP_DEV)
	$(BIN)/python -m pytest -q

pytest-uvloop: $(STAMP_DEV)
	GOLEM_TEST_LOOP=uvloop $(BIN)/python -m pytest -q $(UVLOOP_TESTS)

bench: $(STAMP_DEV)
	$(BIN)/python bench/run_overhead.py
	$(BIN)/python bench/pause_resume.py
	$(BIN)/python bench/cycle_overhead.py
	$(BIN)/python bench/history_scaling.py
	$(BIN)/python bench/provider_overhead.py
	$(BIN)/python bench/store_throughput.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
