# Two commands set everything up on a fresh machine:
#   make run   — create .venv, install Bruce, apply migrations and start it (./config.yml or defaults)
#   make test  — install the dev tools (and Chromium and PostgreSQL for their tests) and run the
#                whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG_ARG := $(if $(wildcard config.yml),--config config.yml,)

.PHONY: run test lint format bench clean chromium postgres

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

# The PostgreSQL tests start a throwaway server of their own with Debian's binaries (initdb,
# pg_ctl); install them when missing. No default cluster is created, so no server is started here.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing postgresql for the PostgreSQL tests..."; \
	    mkdir -p /etc/postgresql-common/createcluster.d && \
	    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/no-main-cluster.conf && \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends postgresql >/dev/null; \
	  else echo "PostgreSQL not found: its tests will fail (install Debian's postgresql)"; fi; }

test: $(VENV)/.installed-dev chromium postgres
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
	$(BIN)/python bench/run.py --brain
	$(BIN)/python bench/reminders.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
