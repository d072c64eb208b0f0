"""When a task runs: parsing `run_at` and `cron`, and computing next fire times.

`run_at` is ISO-8601 (a naive time is read in the task's timezone) or relative (`+90s`, `+2m`,
`+1h30m`, `+1d`); `cron` has five fields and is evaluated in the task's timezone with
APScheduler's own CronTrigger, so daylight-saving changes are handled the way the scheduler
itself fires. Every problem raises `ScheduleError` with a message the model can act on.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

_RELATIVE = re.compile(
    r"^\+\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?$", re.IGNORECASE
)


class ScheduleError(ValueError):
    """A schedule the user (or the model) must correct."""


def zone_of(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
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
    moment = moment.astimezone(ZoneInfo("UTC"))
    if moment <= now:
        local = moment.astimezone(zone)
        raise ScheduleError(
            f"run_at {local:%Y-%m-%d %H:%M} ({zone.key}) is in the past; the current time is "
            f"{now.astimezone(zone):%Y-%m-%d %H:%M}. Pick a future time."
        )
    return moment


def cron_trigger(expression: str, zone: ZoneInfo) -> CronTrigger:
    if len(expression.split()) != 5:
        raise ScheduleError(
            f"cron '{expression}' must have five fields: minute hour day-of-month month "
            "day-of-week, e.g. '0 8 * * mon-fri' for weekdays at 08:00"
        )
    try:
        return CronTrigger.from_crontab(expression, timezone=zone)
    except ValueError as exc:
        raise ScheduleError(f"cron '{expression}' is invalid: {exc}") from None


def next_cron_time(expression: str, zone: ZoneInfo, after: datetime) -> datetime | None:
    """The first firing strictly after `after` (aware), in UTC."""
    trigger = cron_trigger(expression, zone)
    # APScheduler's trigger returns the first time >= now; nudge past `after` itself.
    moment = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
    return moment.astimezone(ZoneInfo("UTC")) if moment else None


def describe_time(moment: datetime, zone: ZoneInfo) -> str:
    local = moment.astimezone(zone)
    return f"{local:%A, %Y-%m-%d %H:%M} ({zone.key}, UTC{local:%z})"
