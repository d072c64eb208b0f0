"""`shortest_cron_gap`: the tightest spacing of a cron schedule's firings, which the planner
compares with the shortest interval a task may repeat at.

Each expected gap was worked out by hand from the expression (the comment says how), not by
running the code under test; every time here is fixed, nothing reads the real clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from bruce_bot.scheduler.timing import shortest_cron_gap

UTC = ZoneInfo("UTC")
SAO_PAULO = ZoneInfo("America/Sao_Paulo")
BERLIN = ZoneInfo("Europe/Berlin")
AFTER = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # a Monday; no DST change for weeks anywhere


@pytest.mark.parametrize(
    ("cron", "gap"),
    [
        # Ranges: 08, 09, 10 o'clock, then 22 h until the next day's 08:00.
        ("0 8-10 * * *", timedelta(hours=1)),
        # A range with a step: minutes 10, 15, 20, then 50 minutes to the next hour's 10.
        ("10-20/5 * * * *", timedelta(minutes=5)),
        # The step does not divide the hour: 0, 25, 50, then 50 -> next hour's 0 is 10 minutes.
        ("0-50/25 * * * *", timedelta(minutes=10)),
        # Offset steps: 7, 22, 37, 52; 52 -> the next hour's 7 is 15 minutes too.
        ("7-59/15 * * * *", timedelta(minutes=15)),
        # Every five minutes during one hour only: the first two firings are five minutes apart.
        ("*/5 9 * * *", timedelta(minutes=5)),
        # An hour range with a step: 09, 13, 17; 17 -> 09 the next day is 16 hours.
        ("0 9-17/4 * * *", timedelta(hours=4)),
        # Lists: 08:00, 08:10, 08:55; 08:55 -> the next day's 08:00 is 23 h 05 min.
        ("0,10,55 8 * * *", timedelta(minutes=10)),
        # Lists on both fields across midnight: 00:05, 00:45, 23:05, 23:45; 23:45 -> 00:05 is
        # 20 minutes, tighter than the 40 within each hour.
        ("5,45 0,23 * * *", timedelta(minutes=20)),
        # A list mixing a range and a single hour: 8, 9, 10, 18.
        ("0 8-10,18 * * *", timedelta(hours=1)),
        # Days of the week, crontab numbering (1 = Monday): weekdays at 08:00 are a day apart.
        ("0 8 * * 1-5", timedelta(days=1)),
        # Monday and Wednesday: Mon -> Wed 2 days, Wed -> Mon 5 days.
        ("30 9 * * 1,3", timedelta(days=2)),
        # A day-of-week range with a step: Mon, Wed, Fri (Fri -> Mon is 3 days).
        ("0 12 * * 1-5/2", timedelta(days=2)),
        # Saturday and Sunday (0 = Sunday): Sat -> Sun 1 day, Sun -> Sat 6 days.
        ("0 7 * * 6,0", timedelta(days=1)),
        # 7 is Sunday too: once a week.
        ("0 7 * * 7", timedelta(days=7)),
        # Friday to Sunday, written 5-7 (crossing into crontab's second Sunday).
        ("0 9 * * 5-7", timedelta(days=1)),
        # Names as crontab writes them: Sunday and Saturday.
        ("0 7 * * sun,sat", timedelta(days=1)),
        # The 1st and the 15th: 14 days apart; the 15th -> the next 1st is the month's length
        # less 14 days (14 after a 28-day February, up to 17 after a 31-day month).
        ("0 9 1,15 * *", timedelta(days=14)),
        # The leap day: 2028-02-29 -> 2032-02-29 is 4 * 365 + 1 days.
        ("0 9 29 2 *", timedelta(days=1461)),
    ],
)
def test_the_shortest_gap_of_ranges_steps_lists_and_weekdays(cron: str, gap: timedelta) -> None:
    assert shortest_cron_gap(cron, UTC, AFTER) == gap


def test_the_gap_is_the_same_in_the_users_timezone() -> None:
    # São Paulo keeps UTC-3 all year: the spacing of wall-clock firings does not change.
    assert shortest_cron_gap("0,10,55 8 * * *", SAO_PAULO, AFTER) == timedelta(minutes=10)
    assert shortest_cron_gap("30 9 * * 1,3", SAO_PAULO, AFTER) == timedelta(days=2)


def test_a_daily_time_around_the_spring_forward_change_is_23_hours_apart() -> None:
    # Berlin springs forward on 2026-03-29 at 02:00 CET. 02:00 on the 28th is 01:00 UTC; the
    # 29th's 02:00 does not exist and fires at 03:00 CEST, also 01:00 UTC (24 h); the 30th's
    # 02:00 CEST is 00:00 UTC: 23 hours after the one before.
    after = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    assert shortest_cron_gap("0 2 * * *", BERLIN, after) == timedelta(hours=23)
    # The same schedule in summer: a day apart.
    assert shortest_cron_gap("0 2 * * *", BERLIN, AFTER) == timedelta(days=1)


def test_a_schedule_looked_at_for_one_firing_has_no_gap() -> None:
    assert shortest_cron_gap("0 9 * * *", UTC, AFTER, runs=1) is None
    # Two firings are enough to measure one gap.
    assert shortest_cron_gap("0 9 * * 1", UTC, AFTER, runs=2) == timedelta(days=7)
