"""`/api/usage`: LLM calls and tokens per day (in `app.timezone`), model and purpose."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from bruce_bot.web.api.endpoint import Call, Endpoint

MAX_USAGE_DAYS = 366


def usage_days(days: int, zone: ZoneInfo, now: datetime) -> list[tuple[date, datetime]]:
    """The last `days` days in `zone` (today included), oldest first, each with its start."""
    today = now.astimezone(zone).date()
    first = today - timedelta(days=days - 1)
    return [
        (day, datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC))
        for day in (first + timedelta(days=n) for n in range(days))
    ]


class UsageTotals(BaseModel):
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    errors: int


class UsageRow(UsageTotals):
    day: date
    model: str
    purpose: str = Field(description="what the call was for: agent turns, summaries, the brain")


class UsageAnswer(BaseModel):
    days: int
    timezone: str = Field(description="app.timezone: the days are its days")
    rows: list[UsageRow]
    totals: UsageTotals


class UsageQuery(BaseModel):
    days: int = Field(30, ge=1, le=MAX_USAGE_DAYS, description="how many days back, today included")


async def usage(call: Call[UsageQuery, None]) -> UsageAnswer:
    context, days = call.context, call.params.days
    window = usage_days(days, ZoneInfo(context.timezone), context.clock())
    rows = [
        UsageRow.model_validate(dataclasses.asdict(row))
        for row in await context.stores.audit.usage_by_day(window)
    ]
    totals = {name: sum(getattr(row, name) for row in rows) for name in UsageTotals.model_fields}
    return UsageAnswer(
        days=days,
        timezone=context.timezone,
        rows=rows,
        totals=UsageTotals.model_validate(totals),
    )


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/usage",
        usage,
        UsageAnswer,
        "LLM calls per day, model and purpose, with totals",
        params=UsageQuery,
    ),
)
