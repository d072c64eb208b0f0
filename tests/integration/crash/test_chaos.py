"""Chaos: the real daemon (`python -m bruce_bot run`, SQLite, Telegram against the fake Bot API
with Telegram's sending limits, the fake Messages API as the model) stopped at seeded random
moments a dozen times while four chats keep writing, asking for reminders and briefings, and
started again over the same database each time. Counted at the fake Bot API: every message
answered once, every part of every answer, every reminder and briefing delivered, a reminder
no more than 5 s of uptime late (a briefing fired so); after SIGKILL a part or reminder may
come twice only where crash_judge.py excuses it (in flight at the kill by the commit window
measured in the run, unrecorded in `deliveries`, the process not gone on past it), after
SIGTERM never. Rows left stuck, stored replies never sent and a chaos phase with too few stops
fail the run. See chaos_support.py and crash_judge.py for the rules, and tests/README.md for
the seeds run and what each excused.

A second variant on PostgreSQL: two processes (a and b) on one database behind a balanced
webhook, the same kind of plan, SIGKILLs at seeded moments of a seeded choice of process (the
scheduler's leader or its follower, now and then both within a second), each started again after
a short seeded downtime while the other keeps running; judged by the same rules, a duplicate
excused only where its first copy was in flight at a SIGKILL of the process that sent it, the
downtime being when neither process could take the work (including the takeover after a kill:
the lease plus the leader retry). See cluster_support.py's `run_cluster_chaos`.

The seed is printed with the report; rerun one with BRUCE_CHAOS_SEED=<seed>.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest

from tests.integration.chaos_support import run_scenario
from tests.integration.postgres.cluster_support import run_cluster_chaos

SEED = int(os.environ.get("BRUCE_CHAOS_SEED") or random.SystemRandom().randrange(1, 1_000_000))


@pytest.mark.timeout(240)  # a backstop: the scenario ends by itself well before
async def test_sigkill_at_random_moments_loses_nothing_and_repeats_only_sends_in_flight(
    tmp_path: Path,
) -> None:
    scenario, findings = await run_scenario(tmp_path, SEED, signal.SIGKILL)
    print(scenario.report(findings))  # the seed, the stops, what was excused and why
    assert not findings.problems, scenario.report(findings)


@pytest.mark.timeout(240)  # a backstop: the scenario ends by itself well before
async def test_sigterm_at_random_moments_loses_nothing_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    scenario, findings = await run_scenario(tmp_path, SEED, signal.SIGTERM)
    print(scenario.report(findings))
    assert not findings.problems and not findings.excused, scenario.report(findings)


@pytest.mark.timeout(180)  # a backstop: the scenario ends by itself before
async def test_two_processes_on_postgresql_sigkilled_at_random_lose_nothing_repeat_in_flight(
    tmp_path: Path, postgres_url: str
) -> None:
    scenario, findings = await run_cluster_chaos(tmp_path, postgres_url, SEED)
    print(scenario.report(findings))  # the seed, the SIGKILLs, what was excused
    assert not findings.problems, scenario.report(findings)
