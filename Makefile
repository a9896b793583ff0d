# Two commands: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
STAMP_SERVER := $(VENV)/.installed-server

.PHONY: demo test test-deep lint typecheck pytest pytest-uvloop pytest-newest bench clean

# The suite runs on every core (pytest-xdist; each worker its own PostgreSQL database,
# tests/conftest.py), a test file's tests on one worker (module fixtures are built once).
# `make test WORKERS=0` runs it in this process.
WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadscope
# Tests marked `deep` (slow; a fast test keeps each one's guarantee, CONTRIBUTING.md) run only
# in `make test-deep`. The second passes collect only the files holding their marks.
FAST := -m 'not live and not deep and not serial'
SERIAL_TESTS = $(shell grep -rlE 'mark\.serial\b' tests)
LOOP_TESTS = $(shell grep -rlE 'mark\.loop\b' tests)
NEWEST_TESTS = $(shell grep -rlE 'mark\.(loop|version)\b' tests)
DEEP := -o timeout=1800
DEEP_ENV := GOLEM_HYPOTHESIS_PROFILE=deep

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

# ruff, mypy, the suite (Hypothesis' `ci` profile, deep tests left out), then the tests marked
# `loop` again on uvloop, which `golem serve` and `golem worker` pick when installed.
test: lint typecheck pytest pytest-uvloop

# Everything: the deep tests, Hypothesis' `deep` profile (and the larger budgets of
# tests/conftest.py's KNOBS), then the whole suite, deep tests included, again on uvloop (the
# `ci` budgets: there the loop is what changes).
test-deep: lint typecheck $(STAMP_DEV)
	$(DEEP_ENV) $(PYTEST) $(DEEP) -m 'not live and not serial'
	$(if $(SERIAL_TESTS),$(DEEP_ENV) $(BIN)/python -m pytest -q $(DEEP) -m 'serial and not live' $(SERIAL_TESTS))
	GOLEM_TEST_LOOP=uvloop $(PYTEST) $(DEEP) -m 'not live and not serial'
	$(if $(SERIAL_TESTS),GOLEM_TEST_LOOP=uvloop $(BIN)/python -m pytest -q $(DEEP) -m 'serial and not live' $(SERIAL_TESTS))

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests examples bench

typecheck: $(STAMP_DEV)
	$(BIN)/mypy

# Then the tests marked `serial` (timing-sensitive: they failed beside another worker) alone.
pytest: $(STAMP_DEV)
	$(PYTEST) $(FAST)
	$(if $(SERIAL_TESTS),$(BIN)/python -m pytest -q -m 'serial and not live and not deep' $(SERIAL_TESTS))

pytest-uvloop: $(STAMP_DEV)
	GOLEM_TEST_LOOP=uvloop $(PYTEST) -m 'loop and not live and not deep and not serial' $(LOOP_TESTS)

# What differs between Python versions (CI runs it on the newest Python the machine has):
# the tests marked `loop` or `version`.
pytest-newest: $(STAMP_DEV)
	$(PYTEST) -m '(loop or version) and not live and not deep and not serial' $(NEWEST_TESTS)

bench: $(STAMP_DEV)
	$(BIN)/python bench/run_overhead.py
	$(BIN)/python bench/pause_resume.py
	$(BIN)/python bench/cycle_overhead.py
	$(BIN)/python bench/history_scaling.py
	$(BIN)/python bench/provider_overhead.py
	$(BIN)/python bench/store_throughput.py
	$(BIN)/python bench/hidden_run_statements.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
