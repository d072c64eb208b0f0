# Two commands set everything up on a fresh machine:
#   make run   — create .venv, install Bruce, apply migrations and start it (./config.yml or defaults)
#   make test  — install the dev tools (and Chromium for the browser tests) and run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG_ARG := $(if $(wildcard config.yml),--config config.yml,)

.PHONY: run test lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/bruce run $(CONFIG_ARG)

# The dashboard tests drive a real headless Chromium; install Debian's when it is missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the browser tests..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium not found: browser tests will be skipped"; fi; }

test: $(VENV)/.installed-dev chromium
	$(BIN)/ruff check .
	$(BIN)/pytest -q

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/run.py
	$(BIN)/python bench/reminders.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
