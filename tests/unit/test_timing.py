"""When proactive tasks run: `run_at` parsing, cron validation and next times across DST changes,
and `shortest_cron_gap`, the tightest spacing of a cron schedule's firings, which the planner
compares with the shortest interval a task may repeat at.

Every time here is fixed; nothing reads the real clock.
"""

from __future__ import annotations

import pickle
import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from bruce_bot.scheduler.timing import (
    CronSchedule,
    ScheduleError,
    cron_trigger,
    describe_interval,
    describe_lateness,
    describe_time,
    next_cron_time,
    parse_interval,
    parse_run_at,
    shortest_cron_gap,
    zone_of,
)

UTC = ZoneInfo("UTC")
SAO_PAULO = ZoneInfo("America/Sao_Paulo")
BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # a Monday, 09:00 in São Paulo


def local(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M %z")


def cron_times(expression: str, zone: ZoneInfo, after: datetime, count: int) -> list[str]:
    times = []
    moment = after
    for _ in range(count):
        following = next_cron_time(expression, zone, moment)
        assert following is not None
        assert following > moment, "next_cron_time must move forward"
        times.append(local(following, zone))
        moment = following
    return times


# ---- run_at: relative ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "delta"),
    [
        ("+90s", timedelta(seconds=90)),
        ("+2m", timedelta(minutes=2)),
        ("+1h30m", timedelta(hours=1, minutes=30)),
        ("+1d", timedelta(days=1)),
        ("+1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        (" +5M ", timedelta(minutes=5)),
    ],
)
def test_relative_run_at_counts_from_now(value: str, delta: timedelta) -> None:
    moment = parse_run_at(value, SAO_PAULO, NOW)
    assert moment == NOW + delta
    assert moment.utcoffset() == timedelta(0)


@pytest.mark.parametrize("value", ["+", "+2x", "+1.5h", "+m", "+30m1h", "+ten minutes", "+-5m"])
def test_bad_relative_run_at_says_how_to_write_it(value: str) -> None:
    with pytest.raises(ScheduleError, match="not a relative time") as error:
        parse_run_at(value, SAO_PAULO, NOW)
    assert "+90s" in str(error.value) and "+1h30m" in str(error.value)


def test_relative_run_at_of_zero_is_in_the_past() -> None:
    with pytest.raises(ScheduleError, match="in the past"):
        parse_run_at("+0s", SAO_PAULO, NOW)


# ---- run_at: absolute ------------------------------------------------------------------------


def test_naive_iso_run_at_is_read_in_the_task_timezone() -> None:
    assert parse_run_at("2026-06-02T09:00", SAO_PAULO, NOW) == datetime(
        2026, 6, 2, 12, 0, tzinfo=UTC
    )
    assert parse_run_at("2026-06-02T09:00", BERLIN, NOW) == datetime(2026, 6, 2, 7, 0, tzinfo=UTC)
    assert parse_run_at("2026-06-02 09:00:30", SAO_PAULO, NOW) == datetime(
        2026, 6, 2, 12, 0, 30, tzinfo=UTC
    )


def test_iso_run_at_with_an_offset_keeps_its_offset() -> None:
    moment = parse_run_at("2026-06-02T09:00+02:00", SAO_PAULO, NOW)
    assert moment == datetime(2026, 6, 2, 7, 0, tzinfo=UTC)


def test_iso_run_at_in_utc_with_z() -> None:
    assert parse_run_at("2026-06-02T09:00:00Z", SAO_PAULO, NOW) == datetime(
        2026, 6, 2, 9, 0, tzinfo=UTC
    )


def test_naive_run_at_uses_the_offset_in_force_on_that_day() -> None:
    # Berlin is +01:00 in winter and +02:00 in summer.
    winter = parse_run_at("2026-12-01T09:00", BERLIN, NOW)
    summer = parse_run_at("2026-07-01T09:00", BERLIN, NOW)
    assert winter == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert summer == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)


def test_run_at_in_the_past_names_the_time_and_now() -> None:
    with pytest.raises(ScheduleError) as error:
        parse_run_at("2026-06-01T08:00", SAO_PAULO, NOW)
    message = str(error.value)
    assert "in the past" in message
    assert "2026-06-01 08:00" in message and "America/Sao_Paulo" in message
    assert "2026-06-01 09:00" in message  # the current time, in the same timezone
    assert "future" in message


def test_run_at_equal_to_now_is_in_the_past() -> None:
    with pytest.raises(ScheduleError, match="in the past"):
        parse_run_at("2026-06-01T12:00:00Z", SAO_PAULO, NOW)


@pytest.mark.parametrize("value", ["tomorrow at 9", "2026-13-01T09:00", "09:00 2026-06-02", ""])
def test_bad_iso_run_at_says_how_to_write_it(value: str) -> None:
    with pytest.raises(ScheduleError, match="not an ISO-8601 time") as error:
        parse_run_at(value, SAO_PAULO, NOW)
    assert "2026-12-01T09:00" in str(error.value) and "+2m" in str(error.value)


# ---- timezones -------------------------------------------------------------------------------


def test_known_timezones() -> None:
    assert zone_of("Europe/Berlin") == BERLIN
    assert zone_of("UTC") == UTC


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "America", "Europe/", "../etc/passwd", ""])
def test_unknown_timezone_is_named_with_an_example(name: str) -> None:
    with pytest.raises(ScheduleError) as error:
        zone_of(name)
    message = str(error.value)
    assert f"unknown timezone '{name}'" in message
    assert "America/Sao_Paulo" in message


# ---- cron: validation ------------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["0 8 * *", "0 8 * * * *", "daily", "*"])
def test_cron_with_the_wrong_number_of_fields(expression: str) -> None:
    with pytest.raises(ScheduleError) as error:
        cron_trigger(expression, SAO_PAULO)
    message = str(error.value)
    assert f"has {len(expression.split())} fields but needs five" in message
    assert "minute hour day-of-month month day-of-week" in message


@pytest.mark.parametrize(
    ("expression", "field"),
    [
        ("61 * * * *", "minute field '61'"),
        ("0 24 * * *", "hour field '24'"),
        ("0 8 32 * *", "day-of-month field '32'"),
        ("0 8 * 13 *", "month field '13'"),
        ("0 8 * * funday", "day-of-week field 'funday'"),
        ("x 8 * * *", "minute field 'x'"),
    ],
)
def test_cron_with_a_bad_value_names_the_field(expression: str, field: str) -> None:
    with pytest.raises(ScheduleError) as error:
        cron_trigger(expression, SAO_PAULO)
    assert f"cron '{expression}' is invalid" in str(error.value)
    assert field in str(error.value)


def test_cron_day_of_week_out_of_range_says_what_is_allowed() -> None:
    with pytest.raises(ScheduleError, match="0 and 7 are Sunday"):
        cron_trigger("0 8 * * 8", SAO_PAULO)


def test_next_cron_time_validates_too() -> None:
    with pytest.raises(ScheduleError, match="minute field"):
        next_cron_time("99 * * * *", SAO_PAULO, NOW)


# ---- cron: day of week numbered as in crontab (0 and 7 = Sunday) -----------------------------


@pytest.mark.parametrize(
    ("expression", "weekdays"),
    [
        ("0 8 * * 1-5", ["Tue", "Wed", "Thu", "Fri", "Mon"]),
        ("0 8 * * mon-fri", ["Tue", "Wed", "Thu", "Fri", "Mon"]),
        ("0 8 * * 0", ["Sun", "Sun"]),
        ("0 8 * * 7", ["Sun", "Sun"]),
        ("0 8 * * sun", ["Sun", "Sun"]),
        ("0 8 * * 1", ["Mon", "Mon"]),
        ("0 8 * * 5-7", ["Fri", "Sat", "Sun", "Fri"]),
        ("0 8 * * 1,3", ["Wed", "Mon", "Wed"]),
        ("0 8 * * */2", ["Tue", "Thu", "Sat", "Sun", "Tue"]),
    ],
)
def test_cron_weekdays_follow_crontab_numbering(expression: str, weekdays: list[str]) -> None:
    # NOW is Monday 09:00 in São Paulo: today's 08:00 has passed.
    moment = NOW
    seen = []
    for _ in weekdays:
        following = next_cron_time(expression, SAO_PAULO, moment)
        assert following is not None
        assert following.astimezone(SAO_PAULO).strftime("%H:%M") == "08:00"
        seen.append(following.astimezone(SAO_PAULO).strftime("%a"))
        moment = following
    assert seen == weekdays


# ---- cron: next times and daylight-saving changes --------------------------------------------


def test_next_cron_time_is_strictly_after() -> None:
    exactly_at = datetime(2026, 6, 1, 11, 0, tzinfo=UTC)  # 08:00 in São Paulo
    following = next_cron_time("0 8 * * *", SAO_PAULO, exactly_at)
    assert following == datetime(2026, 6, 2, 11, 0, tzinfo=UTC)
    assert next_cron_time("0 8 * * *", SAO_PAULO, exactly_at - timedelta(seconds=1)) == exactly_at


def test_sao_paulo_has_no_dst_and_stays_at_minus_three() -> None:
    # Brazil abolished daylight saving in 2019: November (formerly a change) stays at -03:00.
    after = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
    times = cron_times("0 9 * * *", SAO_PAULO, after, 5)
    assert times == [
        "2026-10-31 09:00 -0300",
        "2026-11-01 09:00 -0300",
        "2026-11-02 09:00 -0300",
        "2026-11-03 09:00 -0300",
        "2026-11-04 09:00 -0300",
    ]
    first = next_cron_time("0 9 * * *", SAO_PAULO, after)
    assert first is not None
    assert describe_time(first, SAO_PAULO) == (
        "Saturday, 2026-10-31 09:00 (America/Sao_Paulo, UTC-0300)"
    )
    # Also in what used to be summer time (February) and winter (August).
    for month in (2, 8):
        moment = next_cron_time("0 9 * * *", SAO_PAULO, datetime(2026, month, 1, tzinfo=UTC))
        assert moment is not None
        assert moment.astimezone(SAO_PAULO).utcoffset() == timedelta(hours=-3)


def test_berlin_spring_forward_keeps_the_wall_clock_time() -> None:
    after = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    assert cron_times("0 8 * * *", BERLIN, after, 3) == [
        "2026-03-28 08:00 +0100",
        "2026-03-29 08:00 +0200",  # same 08:00, one hour less in between
        "2026-03-30 08:00 +0200",
    ]
    first = next_cron_time("0 8 * * *", BERLIN, after)
    second = next_cron_time("0 8 * * *", BERLIN, datetime(2026, 3, 28, 8, 0, tzinfo=UTC))
    assert first is not None and second is not None
    assert second - first == timedelta(hours=23)
    assert describe_time(second, BERLIN) == "Sunday, 2026-03-29 08:00 (Europe/Berlin, UTC+0200)"


def test_berlin_spring_forward_fires_a_skipped_time_once_an_hour_later() -> None:
    # 02:00-03:00 does not exist on 2026-03-29: a 02:30 task fires once, at 03:30.
    after = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    assert cron_times("30 2 * * *", BERLIN, after, 3) == [
        "2026-03-28 02:30 +0100",
        "2026-03-29 03:30 +0200",
        "2026-03-30 02:30 +0200",
    ]


def test_berlin_fall_back_keeps_the_wall_clock_time() -> None:
    after = datetime(2026, 10, 23, 12, 0, tzinfo=UTC)
    assert cron_times("0 8 * * *", BERLIN, after, 3) == [
        "2026-10-24 08:00 +0200",
        "2026-10-25 08:00 +0100",  # same 08:00, one hour more in between
        "2026-10-26 08:00 +0100",
    ]


def test_berlin_fall_back_fires_a_repeated_time_once() -> None:
    # 02:00-03:00 happens twice on 2026-10-25; a daily 02:30 task fires the first time only.
    after = datetime(2026, 10, 23, 12, 0, tzinfo=UTC)
    assert cron_times("30 2 * * *", BERLIN, after, 3) == [
        "2026-10-24 02:30 +0200",
        "2026-10-25 02:30 +0200",
        "2026-10-26 02:30 +0100",
    ]


def test_berlin_fall_back_keeps_the_pace_of_an_every_hour_job() -> None:
    after = datetime(2026, 10, 24, 23, 50, tzinfo=UTC)  # 01:50 CEST
    assert cron_times("*/20 * * * *", BERLIN, after, 8) == [
        "2026-10-25 02:00 +0200",
        "2026-10-25 02:20 +0200",
        "2026-10-25 02:40 +0200",
        "2026-10-25 02:00 +0100",  # the repeated hour, every 20 minutes of real time
        "2026-10-25 02:20 +0100",
        "2026-10-25 02:40 +0100",
        "2026-10-25 03:00 +0100",
        "2026-10-25 03:20 +0100",
    ]


def test_berlin_spring_forward_keeps_the_pace_of_an_every_hour_job() -> None:
    after = datetime(2026, 3, 28, 23, 50, tzinfo=UTC)  # 00:50 CET
    assert cron_times("*/30 * * * *", BERLIN, after, 5) == [
        "2026-03-29 01:00 +0100",
        "2026-03-29 01:30 +0100",
        "2026-03-29 03:00 +0200",  # 02:00 CET is 03:00 CEST
        "2026-03-29 03:30 +0200",
        "2026-03-29 04:00 +0200",
    ]


def chained(expression: str, zone: ZoneInfo, previous: datetime, count: int) -> list[str]:
    """Fire times as the scheduler computes them: each from the previous firing."""
    trigger = cron_trigger(expression, zone)
    assert isinstance(trigger, CronSchedule)
    fired = []
    for _ in range(count):
        following = trigger.get_next_fire_time(previous, previous)
        assert following is not None and following > previous
        fired.append(local(following, zone))
        previous = following
    return fired


def test_the_scheduler_trigger_moves_on_through_the_repeated_hour() -> None:
    """APScheduler computes each firing from the previous one. Its own CronTrigger returns the
    same time again in the repeated hour (and its scheduler loops on it); ours moves on."""
    previous = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)  # 01:00 CEST
    assert chained("0 * * * *", BERLIN, previous, 5) == [
        "2026-10-25 02:00 +0200",
        "2026-10-25 02:00 +0100",  # hour '*': the repeated hour fires too, an hour later
        "2026-10-25 03:00 +0100",
        "2026-10-25 04:00 +0100",
        "2026-10-25 05:00 +0100",
    ]
    assert chained("30 2 * * *", BERLIN, previous, 3) == [
        "2026-10-25 02:30 +0200",
        "2026-10-26 02:30 +0100",
        "2026-10-27 02:30 +0100",
    ]
    assert chained("*/20 * * * *", BERLIN, previous, 9)[-4:] == [
        "2026-10-25 02:00 +0100",
        "2026-10-25 02:20 +0100",
        "2026-10-25 02:40 +0100",
        "2026-10-25 03:00 +0100",
    ]


def test_the_cron_trigger_survives_the_job_store_pickle() -> None:
    trigger = cron_trigger("30 2 * * 1-5", BERLIN)
    restored = pickle.loads(pickle.dumps(trigger))
    assert type(restored) is CronSchedule
    after = datetime(2026, 10, 23, 12, 0, tzinfo=UTC)  # Friday
    assert restored.get_next_fire_time(None, after) == trigger.get_next_fire_time(None, after)
    assert local(restored.get_next_fire_time(None, after), BERLIN) == "2026-10-26 02:30 +0100"


def test_describe_time_names_the_weekday_zone_and_offset() -> None:
    moment = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert describe_time(moment, SAO_PAULO) == (
        "Tuesday, 2026-12-01 09:00 (America/Sao_Paulo, UTC-0300)"
    )
    assert describe_time(moment, BERLIN) == "Tuesday, 2026-12-01 13:00 (Europe/Berlin, UTC+0100)"


def test_lateness_note_gives_the_day_only_when_it_was_not_today() -> None:
    due = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)  # 09:00 in São Paulo, Sunday
    same_day = datetime(2026, 11, 29, 15, 30, tzinfo=UTC)
    next_day = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
    assert describe_lateness(due, same_day, SAO_PAULO) == " (late: was due at 09:00)"
    assert describe_lateness(due, next_day, SAO_PAULO) == " (late: was due at 09:00 on Sun 29 Nov)"


@pytest.mark.parametrize(
    ("written", "minutes"),
    [
        (30, 30.0),
        ("45", 45.0),
        ("0.05", 0.05),
        ("30 minutes", 30.0),
        ("every 2 hours", 120.0),
        ("1h30m", 90.0),
        ("+90s", 1.5),
        ("daily", 1440.0),
        ("an hour", 60.0),
        ("2 days", 2880.0),
    ],
)
def test_a_watch_interval_reads_as_minutes_or_words(written: str | float, minutes: float) -> None:
    assert parse_interval(written) == timedelta(minutes=minutes)


@pytest.mark.parametrize("written", ["soon", "5 parsecs", "every", "0", "-5"])
def test_an_unreadable_or_empty_interval_is_refused_saying_how_to_write_one(written: str) -> None:
    with pytest.raises(ScheduleError, match=f"interval '{re.escape(written)}'"):
        parse_interval(written)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (900, "every 15 minutes"),
        (7200, "every 2 hours"),
        (86_400, "every day"),
        (3, "every 3 seconds"),
    ],
)
def test_an_interval_reads_in_words(seconds: float, words: str) -> None:
    assert describe_interval(seconds) == words


# ---- shortest_cron_gap --------------------------------------------------------------------------
# Each expected gap was worked out by hand from the expression (the comment says how), not by
# running the code under test.

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
