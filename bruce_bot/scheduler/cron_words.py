"""A task's schedule in words, for people: "every weekday at 08:00 America/Sao_Paulo".

Covers the shapes people (and the model) write: every N minutes, hourly, daily at one or a few
times, weekdays, weekends, given days of the week, a day of the month, a day of the year. Any
other expression is shown as it is ("cron 5 4 */3 * *"), which is always right, never guessed.
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_DAY_WORDS = {name[:3].lower(): index for index, name in enumerate(_DAY_NAMES)}
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_NUMBER = re.compile(r"^\d{1,2}$")
_STEP = re.compile(r"^\*/(\d{1,2})$")


def describe_schedule(cron: str | None, run_at: datetime | None, timezone: str) -> str:
    """The schedule of a task in words, its timezone last."""
    if not cron:
        if run_at is None:
            return f"once ({timezone})"
        local = run_at.astimezone(ZoneInfo(timezone)) if _known(timezone) else run_at
        return f"once, {local:%a %Y-%m-%d at %H:%M} {timezone}"
    words = cron_in_words(cron)
    return f"{words} {timezone}" if words else f"cron {cron} ({timezone})"


def _known(timezone: str) -> bool:
    try:
        ZoneInfo(timezone)
    except Exception:
        return False
    return True


def cron_in_words(cron: str) -> str | None:
    """Words for a common five-field expression; None for any other."""
    fields = cron.split()
    if len(fields) != 5:
        return None
    minute, hour, day, month, weekday = fields
    if [day, month, weekday] == ["*", "*", "*"]:
        frequent = _frequent(minute, hour)
        if frequent:
            return frequent
    times = _times(minute, hour)
    if times is None:
        return None
    if month == "*" and day == "*":
        days = _weekdays(weekday)
        return f"{days} at {times}" if days else None
    if weekday != "*" or not _NUMBER.match(day) or not 1 <= int(day) <= 31:
        return None
    if month == "*":
        return f"on the {_ordinal(int(day))} of every month at {times}"
    if _NUMBER.match(month) and 1 <= int(month) <= 12:
        return f"every year on {int(day)} {_MONTHS[int(month) - 1]} at {times}"
    return None


def _frequent(minute: str, hour: str) -> str | None:
    if minute == "*" and hour == "*":
        return "every minute"
    step = _STEP.match(minute)
    if step and hour == "*":
        return f"every {int(step[1])} minutes" if int(step[1]) > 1 else "every minute"
    if _NUMBER.match(minute) and int(minute) < 60:
        if hour == "*":
            return f"every hour at :{int(minute):02d}"
        hours = _STEP.match(hour)
        if hours:
            return f"every {int(hours[1])} hours at :{int(minute):02d}"
    return None


def _times(minute: str, hour: str) -> str | None:
    """ "08:00", or "08:00 and 18:00" for a few hours at one minute."""
    if not _NUMBER.match(minute) or int(minute) > 59:
        return None
    hours = hour.split(",")
    if len(hours) > 4 or not all(_NUMBER.match(h) and int(h) < 24 for h in hours):
        return None
    shown = [f"{int(h):02d}:{int(minute):02d}" for h in hours]
    return _joined(shown)


def _weekdays(field: str) -> str | None:
    if field == "*":
        return "every day"
    days = _day_set(field)
    if days is None:
        return None
    if days == {1, 2, 3, 4, 5}:
        return "every weekday"
    if days == {0, 6}:
        return "every Saturday and Sunday"
    if len(days) == 7:
        return "every day"
    ordered = sorted(days, key=lambda d: (d == 0, d))  # the week from Monday
    return "every " + _joined([_DAY_NAMES[d] for d in ordered])


def _day_set(field: str) -> set[int] | None:
    days: set[int] = set()
    for part in field.lower().split(","):
        ends = part.split("-")
        if len(ends) > 2:
            return None
        numbers = [_day_number(end) for end in ends]
        if any(n is None for n in numbers):
            return None
        first, last = numbers[0], numbers[-1]
        assert first is not None and last is not None
        if last < first:
            return None
        days.update(range(first, last + 1))
    return {d % 7 for d in days}


def _day_number(text: str) -> int | None:
    if text in _DAY_WORDS:
        return _DAY_WORDS[text]
    if text.isdigit() and int(text) <= 7:
        return int(text)  # crontab: 0 and 7 are both Sunday
    return None


def _ordinal(number: int) -> str:
    suffix = "th" if 11 <= number % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10)
    return f"{number}{suffix or 'th'}"


def _joined(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
