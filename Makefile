# Two commands: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
STAMP_SERVER := $(VENV)/.installed-server

.PHONY: demo test lint typecheck pytest bench clean

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

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests examples bench

typecheck: $(STAMP_DEV)
	$(BIN)/mypy

pytest: $(STAMP_DEV)
	$(BIN)/python -m pytest -q

bench: $(STAMP_DEV)
	$(BIN)/python bench/run_overhead.py
	$(BIN)/python bench/pause_resume.py
	$(BIN)/python bench/cycle_overhead.py
	$(BIN)/python bench/history_scaling.py
	$(BIN)/python bench/provider_overhead.py
	$(BIN)/python bench/store_throughput.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
