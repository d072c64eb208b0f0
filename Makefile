# Two commands set everything up on a fresh machine:
#   make run   — create .venv, install Bruce, apply migrations and start it (./config.yml or defaults)
#   make test  — install the dev tools (and Chromium, PostgreSQL and bubblewrap for their tests)
#                and run the whole suite
#   make test-clock — the tests that deal in time on a wall clock moved by libfaketime (see below;
#                CI runs it after make test)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG_ARG := $(if $(wildcard config.yml),--config config.yml,)

.PHONY: run test test-clock chaos lint format bench bench-e2e bench-cache bench-brain soak clean chromium postgres faketime sandbox synapse

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

# run_code's sandbox is bubblewrap (its network slirp4netns, `setpriv` of util-linux when Bruce
# runs as root); install Debian's when missing, so its tests run with the real thing.
sandbox:
	@command -v bwrap >/dev/null 2>&1 && command -v slirp4netns >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap and slirp4netns for the run_code tests..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends bubblewrap slirp4netns >/dev/null; \
	  else echo "bubblewrap not found: the run_code tests will be skipped (apt install bubblewrap)"; fi; }

# The Matrix tests start a real Synapse homeserver from PyPI; it gets a venv of its own
# (.venv-synapse) so its pins never touch Bruce's (tests/integration/channels/synapse.py).
SYNAPSE_VENV ?= .venv-synapse

$(SYNAPSE_VENV)/.installed:
	$(PYTHON) -m venv $(SYNAPSE_VENV)
	$(SYNAPSE_VENV)/bin/pip install --quiet --upgrade pip
	$(SYNAPSE_VENV)/bin/pip install --quiet 'matrix-synapse>=1.140,<2'
	touch $@

synapse: $(SYNAPSE_VENV)/.installed

# The suite runs on PYTEST_WORKERS processes (pytest-xdist), a test file per process at a time,
# so a file's module fixtures are set up once; each worker has its own PostgreSQL cluster.
PYTEST_WORKERS ?= 2

test: $(VENV)/.installed-dev chromium postgres sandbox synapse
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# The chaos tests: the real daemon killed a dozen times at seeded moments (BRUCE_CHAOS_SEED=N).
chaos: $(VENV)/.installed-dev
	$(BIN)/pytest -q -p no:cacheprovider tests/integration/crash/test_chaos.py -s

# The clock tests need libfaketime; install Debian's faketime when it is missing.
faketime:
	@command -v faketime >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing faketime for the clock tests..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime >/dev/null; \
	  else echo "faketime not found: install Debian's faketime package" >&2; exit 1; fi; }

# No test may depend on the wall clock's date or time of day: run the tests that deal in time
# with the clock moved to CLOCK_START (default: two minutes before midnight in São Paulo, the
# tests' app timezone, on the night Europe/Berlin springs forward), running on from there, so
# they cross a midnight (and, started later, a DST jump) while they run, e.g.
#   make test-clock CLOCK_START="2026-03-29 00:59:30 UTC"   (Berlin's clocks jump 30 s later)
#   make test-clock CLOCK_TESTS="tests/unit tests/integration"   (everything: ~30 min on 1 core)
# CLOCK_TESTS defaults to what CI runs (.ci/run, after `make test`): the unit tests (but the type
# check, which reads no clock) and the integration tests of reminders, briefings, watches,
# summaries, usage days and budgets, logins, pairing codes and leases, and the browser tests of
# the schedules (a countdown) and usage (days) pages, on PYTEST_WORKERS processes: 4-5 min on one,
# about 3 on CI's two. The rest meet fakes in real time whatever the date (all of them passed
# from 23:58 in São Paulo: run them so after a change to how they wait).
# The clock is an offset from the real one, so child processes (`bruce run`, PostgreSQL) and
# pytest-xdist's workers share it; the monotonic clock stays real, or asyncio's timers would
# break. libfaketime 0.9.10's "monotonic fix" (on by default with glibc) makes the GIL's timed
# waits end at once or never, slowing threaded code up to tenfold: it is switched off.
# tests/conftest.py works around its other bug, time.sleep failing with EINVAL.
CLOCK_START ?= 2026-03-28 23:58:00 -0300
CLOCK_TESTS ?= tests/unit --ignore=tests/unit/test_typing.py \
  $(addprefix tests/integration/,$(addsuffix .py,scheduler/test_scheduler scheduler/test_watches \
    crash/test_firing_crash agent/test_summaries dashboard/test_dashboard_schedules \
    dashboard/test_dashboard_api dashboard/test_usage_budget dashboard/test_usage_api \
    scheduler/test_brain_triggers channels/test_pairing dashboard/test_web_login \
    dashboard/test_web_security postgres/test_postgres_leases channels/test_telegram_real_world)) \
  tests/browser/test_schedules_page.py tests/browser/test_usage_page.py
test-clock: $(VENV)/.installed-dev faketime postgres chromium
	@start=$$(date -d "$(CLOCK_START)" +%s) || exit 1; offset=$$((start - $$(date +%s))); \
	echo "tests on a clock starting at $$(date -u -d "$(CLOCK_START)") (offset $${offset} s)"; \
	FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_FORCE_MONOTONIC_FIX=0 \
	  faketime -f "$$(printf '%+d' $$offset)" \
	  $(BIN)/python -m pytest $(CLOCK_TESTS) -q -p no:cacheprovider -n $(PYTEST_WORKERS) \
	  --dist loadfile $(PYTEST_ARGS)

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

# The soak: `bruce run` with real PTB and the anthropic SDK against the fake servers, 100,000
# messages over ~30 minutes in burst/steady phases; reports RSS, descriptor and SQLite growth and
# p99 per phase (bench/RESULTS.md, "Soak"). Shorter: make soak SOAK_ARGS="--messages 5000 --minutes 3"
SOAK_ARGS ?=
# End to end: `bruce run` with Telegram and the brain on, the real PTB and anthropic SDK over HTTP
# against the fakes: start-up, idle RSS, latency, a 1000-message burst, 50 reminders at once.
bench-e2e: $(VENV)/.installed-dev
	$(BIN)/python bench/e2e.py --json e2e.json

# Prompt caching: a scripted 50-exchange conversation (tool calls, summary folds) through `bruce
# run` and the real anthropic SDK against the fake Messages API, which caches as the API does;
# reports the share of the agent's prompt tokens read from cache (goal ≥ 80 % after exchange 3).
bench-cache: $(VENV)/.installed-dev
	$(BIN)/python bench/cache.py --json bench/out/cache.json

soak: $(VENV)/.installed-dev
	$(BIN)/python bench/soak.py $(SOAK_ARGS)

# The brain's cost: `bruce run` with Telegram, the real PTB and anthropic SDK over HTTP against the
# fakes, one scripted 50-exchange conversation over five topics; brain calls per exchange and brain
# prompt tokens as a share of the agent's (goals: <= 0.25 and <= 15 %).
bench-brain: $(VENV)/.installed-dev
	$(BIN)/python bench/brain_cost.py --json bench/out/brain.json

clean:
	rm -rf $(VENV) $(SYNAPSE_VENV) .pytest_cache .ruff_cache .mypy_cache .grimp_cache
