"""When a task runs: parsing `run_at` and `cron`, and computing next fire times.

`run_at` is ISO-8601 (a naive time is read in the task's timezone) or relative (`+90s`, `+2m`,
`+1h30m`, `+1d`). `cron` has five fields with days of the week numbered as crontab numbers them
(0 and 7 are Sunday), evaluated in the task's timezone by `CronSchedule`, the trigger the
scheduler itself fires on, so `next_cron_time` and the real firings agree across daylight-saving
changes: a time skipped when clocks go forward fires once, an hour later; a time repeated when
clocks go back fires once, the first time. Every problem raises `ScheduleError` with a message
the model can act on.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

_RELATIVE = re.compile(
    r"^\+\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?$", re.IGNORECASE
)
_UTC = ZoneInfo("UTC")
CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")
_CRON_LABELS = ("minute", "hour", "day-of-month", "month", "day-of-week")
# crontab numbers weekdays from Sunday (0, and 7 again); APScheduler 3 from Monday (0).
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")
_NUMERIC_WEEKDAYS = re.compile(r"^(\*|\d+(?:-\d+)?)(?:/(\d+))?$")


class ScheduleError(ValueError):
    """A schedule the user (or the model) must correct."""


def zone_of(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: "America" is a folder
        raise ScheduleError(
            f"unknown timezone '{name}'; use an IANA name like America/Sao_Paulo or Europe/Berlin"
        ) from None


def parse_run_at(value: str, zone: ZoneInfo, now: datetime) -> datetime:
    """The absolute moment (aware, UTC) meant by `value`; it must be in the future."""
    text = value.strip()
    relative = _RELATIVE.match(text)
    if text.startswith("+"):
        if not relative or not any(relative.groups()):
            raise ScheduleError(
                f"run_at '{value}' is not a relative time; write it like +90s, +2m, +1h30m or +1d"
            )
        days, hours, minutes, seconds = (int(part or 0) for part in relative.groups())
        moment = now + timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    else:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ScheduleError(
                f"run_at '{value}' is not an ISO-8601 time; write it like 2026-12-01T09:00 "
                "(read in the task's timezone) or as a relative time like +2m"
            ) from None
        moment = parsed.replace(tzinfo=zone) if parsed.tzinfo is None else parsed
    moment = moment.astimezone(_UTC)
    if moment <= now:
        local = moment.astimezone(zone)
        raise ScheduleError(
            f"run_at {local:%Y-%m-%d %H:%M} ({zone.key}) is in the past; the current time is "
            f"{now.astimezone(zone):%Y-%m-%d %H:%M}. Pick a future time."
        )
    return moment


class CronSchedule(CronTrigger):
    """A five-field cron schedule evaluated on the wall clock of its timezone.

    Stored pickled in APScheduler's job store: KEEP THIS NAME STABLE. APScheduler 3.11's own
    CronTrigger miscounts around daylight-saving changes with zoneinfo zones: when clocks go
    back, it returns a time earlier than asked for, and its scheduler then loops on it (it fires
    a job again and again, or hangs; apscheduler issues #1021, #1036). Here the cron fields are
    matched on naive wall-clock times (where CronTrigger is exact) and each match is mapped to
    real instants: a time skipped when clocks go forward fires once, shifted by the change (02:30
    becomes 03:30); a time repeated when clocks go back fires once, the first time, unless the
    hour field is '*' (a job every N minutes keeps its pace through both hours). Fire times are
    returned in UTC: two datetimes of the same zone compare by wall clock, blind to which of the
    repeated hours they are in, and the scheduler compares them.
    """

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        # In UTC: two times of one zone compare by wall clock, blind to the repeated hour.
        if previous_fire_time is not None:
            start = previous_fire_time.astimezone(_UTC) + _TICK
        else:
            start = now.astimezone(_UTC)
        if self.start_date and start < self.start_date:
            start = self.start_date.astimezone(_UTC)
        moment = self._next_match(start)
        if moment is None or (self.end_date and moment > self.end_date):
            return None
        return moment

    def _next_match(self, start: datetime) -> datetime | None:
        """The first instant at or after `start` whose wall-clock time matches the fields."""
        zone = self.timezone
        wall = self._wall_clock()
        every_hour = str(self.fields[_HOUR_FIELD]) == "*"
        cursor = start.astimezone(zone).replace(tzinfo=None)
        if _near_transition(zone, start):
            cursor -= _MAX_SHIFT  # matches just before, on the wall, may fall after `start`
        best: datetime | None = None
        best_wall = cursor
        while True:
            match = wall.get_next_fire_time(None, cursor.replace(tzinfo=_UTC))
            if match is None:
                return best
            candidate = match.replace(tzinfo=None)
            if best is not None and candidate > best_wall + _MAX_SHIFT:
                return best
            for instant in _instants(candidate, zone, every_hour):
                if instant >= start and (best is None or instant < best):
                    best, best_wall = instant, candidate
            if best is not None and not _near_transition(zone, best):
                return best  # wall order is time order here: no later match can come sooner
            cursor = candidate + _TICK

    def _wall_clock(self) -> CronTrigger:
        """The same fields as a plain trigger in UTC, which has no daylight-saving changes."""
        wall: CronTrigger | None = getattr(self, "_wall", None)
        if wall is None:
            wall = CronTrigger.__new__(CronTrigger)
            base = cast(dict[str, Any], self.__getstate__())  # APScheduler's state: a plain dict
            state = {**base, "timezone": _UTC, "start_date": None}
            wall.__setstate__({**state, "end_date": None, "jitter": None})
            self._wall = wall
        return wall


_TICK = timedelta(microseconds=1)
_MAX_SHIFT = timedelta(hours=3)  # more than any daylight-saving change
_HOUR_FIELD = CronTrigger.FIELD_NAMES.index("hour")


def _near_transition(zone: ZoneInfo, moment: datetime) -> bool:
    before = (moment - _MAX_SHIFT).astimezone(zone).utcoffset()
    return before != (moment + _MAX_SHIFT).astimezone(zone).utcoffset()


def _instants(wall: datetime, zone: ZoneInfo, every_hour: bool) -> tuple[datetime, ...]:
    """The real instants (UTC) at which a naive wall-clock time fires in `zone`."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(_UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(_UTC)
    if first >= second:  # unambiguous, or skipped (then `first` is shifted by the change)
        return (first,)
    return (first, second) if every_hour else (first,)


def _crontab_weekdays(field: str) -> str:
    """A crontab day-of-week field (0 and 7 = Sunday) in APScheduler's terms (names)."""
    parts = []
    for item in field.lower().split(","):
        match = _NUMERIC_WEEKDAYS.match(item)
        if match is None or (match.group(1) == "*" and match.group(2) is None):
            parts.append(item)  # names (mon-fri), '*' and anything invalid go through as written
            continue
        span, step = match.group(1), int(match.group(2) or 1)
        low, _, high = span.partition("-")
        first, last = (0, 6) if span == "*" else (int(low), int(high or low))
        if last > 7 or first > last or step < 1:
            raise ScheduleError(
                f"day-of-week '{item}' is invalid: use 0-7 (0 and 7 are Sunday) or names like "
                "mon-fri"
            )
        parts.append(",".join(_WEEKDAYS[day] for day in range(first, last + 1, step)))
    return ",".join(dict.fromkeys(",".join(parts).split(",")))


def cron_trigger(expression: str, zone: ZoneInfo) -> CronTrigger:
    fields = expression.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"cron '{expression}' has {len(fields)} fields but needs five: minute hour "
            "day-of-month month day-of-week, e.g. '0 8 * * mon-fri' for weekdays at 08:00"
        )
    fields[4] = _crontab_weekdays(fields[4])
    values: dict[str, Any] = dict(zip(CRON_FIELDS, fields, strict=True))
    for name, label, original in zip(CRON_FIELDS, _CRON_LABELS, expression.split(), strict=True):
        try:
            CronTrigger(**{name: values[name]}, timezone=zone)
        except ValueError as exc:
            raise ScheduleError(
                f"cron '{expression}' is invalid: the {label} field '{original}' {_reason(exc)}"
            ) from None
    try:
        return CronSchedule(**values, timezone=zone)
    except ValueError as exc:
        raise ScheduleError(f"cron '{expression}' is invalid: {exc}") from None


def _reason(exc: ValueError) -> str:
    text = str(exc)
    detail = text.split(": ", 1)[1] if text.startswith("Error validating expression") else text
    return f"is not valid ({detail})"


def next_cron_time(expression: str, zone: ZoneInfo, after: datetime) -> datetime | None:
    """The first firing strictly after `after` (aware), in UTC."""
    trigger = cron_trigger(expression, zone)
    # APScheduler's trigger returns the first time >= now; nudge past `after` itself.
    moment = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
    return moment.astimezone(_UTC) if moment else None


def shortest_cron_gap(
    expression: str, zone: ZoneInfo, after: datetime, runs: int = 60
) -> timedelta | None:
    """The shortest time between two of the next `runs` firings (None: it fires at most once).

    Sixty firings cover the densest hour of an hourly pattern and a few days of a daily one;
    '*/5 9 * * *' is caught by its first two firings.
    """
    trigger = cron_trigger(expression, zone)
    previous: datetime | None = None
    shortest: timedelta | None = None
    moment = after
    for _ in range(runs):
        fire = trigger.get_next_fire_time(previous, moment + timedelta(microseconds=1))
        if fire is None:
            break
        if previous is not None and (shortest is None or fire - previous < shortest):
            shortest = fire - previous
        previous, moment = fire, fire
    return shortest


def describe_gap(gap: timedelta) -> str:
    minutes = int(gap.total_seconds() // 60)
    if minutes < 1:
        return f"{int(gap.total_seconds())} seconds"
    if minutes < 120:
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{minutes // 60} hours"


def describe_time(moment: datetime, zone: ZoneInfo) -> str:
    local = moment.astimezone(zone)
    return f"{local:%A, %Y-%m-%d %H:%M} ({zone.key}, UTC{local:%z})"


def describe_lateness(scheduled_for: datetime, now: datetime, zone: ZoneInfo) -> str:
    """ " (late: was due at 09:00)", with the day too when it was not today."""
    due, today = scheduled_for.astimezone(zone), now.astimezone(zone)
    day = "" if due.date() == today.date() else f" on {due:%a %d %b}"
    return f" (late: was due at {due:%H:%M}{day})"


_INTERVAL_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hr": 3600,
    "hour": 3600,
    "d": 86_400,
    "day": 86_400,
    "w": 604_800,
    "week": 604_800,
}
_INTERVAL_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)
_INTERVAL_WORDS = {"an hour": "1 hour", "a day": "1 day", "a week": "1 week", "hourly": "1 hour"}
_INTERVAL_WORDS |= {"daily": "1 day", "weekly": "1 week", "half an hour": "30 minutes"}


def parse_interval(value: str | float) -> timedelta:
    """A watch's interval: minutes as a number, or words like '30 minutes', 'every 2 hours',
    '1h30m', '+90s', 'daily'. ScheduleError names what it cannot read."""
    if isinstance(value, int | float):
        minutes = float(value)
    else:
        text = value.strip().lower().removeprefix("every").strip().lstrip("+").strip()
        text = _INTERVAL_WORDS.get(text, text)
        try:
            minutes = float(text)  # a bare number: minutes
        except ValueError:
            minutes = _interval_minutes(value, text)
    if not minutes > 0:
        raise ScheduleError(f"interval '{value}' must be more than zero")
    return timedelta(minutes=minutes)


def _interval_minutes(value: str, text: str) -> float:
    seconds = 0.0
    rest = _INTERVAL_PART.sub("", text).replace(",", " ").replace(" and ", " ").strip()
    parts = _INTERVAL_PART.findall(text)
    for number, unit in parts:
        word = unit.rstrip("s") if unit not in ("s",) else unit
        if word not in _INTERVAL_UNITS:
            parts = []
            break
        seconds += float(number) * _INTERVAL_UNITS[word]
    if not parts or rest:
        raise ScheduleError(
            f"interval '{value}' is not readable; give minutes as a number (30) or words like "
            "'30 minutes', 'every 2 hours', '1h30m' or 'daily'"
        )
    return seconds / 60


def describe_interval(seconds: float) -> str:
    """'every 15 minutes', 'every 2 hours', 'every 3 seconds' (rounded to whole units)."""
    for unit, size in (("week", 604_800), ("day", 86_400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    if seconds >= 60:
        minutes = round(seconds / 60, 1)
        return f"every {minutes:g} minutes"
    return f"every {seconds:g} second{'s' if seconds != 1 else ''}"
