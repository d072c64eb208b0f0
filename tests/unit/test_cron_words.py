"""A task's schedule in words on the Schedules page: the common cron shapes read as a person would
say them, anything else shown as the cron text itself (never a wrong guess)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bruce_bot.scheduler.cron_words import cron_in_words, describe_schedule


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("0 8 * * 1-5", "every weekday at 08:00"),
        ("0 8 * * mon-fri", "every weekday at 08:00"),
        ("30 7 * * *", "every day at 07:30"),
        ("0 8,18 * * *", "every day at 08:00 and 18:00"),
        ("0 9 * * 0,6", "every Saturday and Sunday at 09:00"),
        ("15 10 * * mon", "every Monday at 10:15"),
        ("0 19 * * 1,3,5", "every Monday, Wednesday and Friday at 19:00"),
        ("0 20 * * 0", "every Sunday at 20:00"),
        ("0 20 * * 7", "every Sunday at 20:00"),
        ("0 9 1 * *", "on the 1st of every month at 09:00"),
        ("0 9 22 * *", "on the 22nd of every month at 09:00"),
        ("0 9 13 * *", "on the 13th of every month at 09:00"),
        ("0 10 25 12 *", "every year on 25 December at 10:00"),
        ("*/15 * * * *", "every 15 minutes"),
        ("* * * * *", "every minute"),
        ("5 * * * *", "every hour at :05"),
        ("0 */2 * * *", "every 2 hours at :00"),
    ],
)
def test_common_shapes_read_as_words(cron: str, words: str) -> None:
    assert cron_in_words(cron) == words


@pytest.mark.parametrize(
    "cron", ["5 4 */3 * *", "0 8 * * sat-sun", "0 8 1 * mon", "1-5 8 * * *", "0 8 * *", "x"]
)
def test_other_expressions_are_not_guessed(cron: str) -> None:
    assert cron_in_words(cron) is None


def test_the_description_ends_with_the_timezone_and_falls_back_to_the_cron_text() -> None:
    assert describe_schedule("0 8 * * 1-5", None, "America/Sao_Paulo") == (
        "every weekday at 08:00 America/Sao_Paulo"
    )
    assert describe_schedule("5 4 */3 * *", None, "UTC") == "cron 5 4 */3 * * (UTC)"
    once = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert describe_schedule(None, once, "America/Sao_Paulo") == (
        "once, Tue 2026-12-01 at 09:00 America/Sao_Paulo"
    )
