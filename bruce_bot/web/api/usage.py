"""`/api/usage`: LLM calls, tokens and their estimated cost per day (in `app.timezone`), model,
purpose and session; the price table they are priced with; the monthly budget's state.

A model without a price shows its tokens with no cost (`cost_usd` null) and is named in
`unpriced_models`, with `how_to_price` saying how to add one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal, TypeVar
from zoneinfo import ZoneInfo

from bruce_bot import platforms
from bruce_bot.storage.audit import UsageGroup
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.usage.costs import Tally, UsageReport, summarise
from bruce_bot.usage.monthly_budget import LEVELS, month_status
from bruce_bot.usage.prices import PriceTable
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams
from bruce_bot.web.api.usage_answers import (
    BudgetAnswer,
    DayUsage,
    ModelUsageRow,
    PlatformUsage,
    PriceList,
    PriceRow,
    PurposeUsage,
    SessionUsage,
    Tallied,
    UsageAnswer,
    UsageQuery,
    UsageRow,
    UsageSummary,
    UsageTotals,
)
from bruce_bot.web.context import WebContext

HOW_TO_PRICE = (
    "Their tokens are counted but not priced. Add a price under usage.prices in config.yml "
    "(USD per million tokens; a key may be a model name or a prefix of it), for example\n"
    "usage:\n  prices:\n    {model}: {{input: 1.0, output: 2.0}}\n"
    "then restart Bruce. A model served by your own machine or network costs 0: write "
    "{{input: 0, output: 0}}."
)


def usage_days(days: int, zone: ZoneInfo, now: datetime) -> list[tuple[date, datetime]]:
    """The last `days` days in `zone` (today included), oldest first, each with its start."""
    today = now.astimezone(zone).date()
    first = today - timedelta(days=days - 1)
    return [
        (day, datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC))
        for day in (first + timedelta(days=n) for n in range(days))
    ]


def _total(tally: Tally) -> UsageTotals:
    return UsageTotals(
        calls=tally.calls,
        input_tokens=tally.input_tokens,
        output_tokens=tally.output_tokens,
        cache_read_tokens=tally.cache_read_tokens,
        cache_write_tokens=tally.cache_write_tokens,
        errors=tally.errors,
        cost_usd=tally.cost_usd,
    )


def _tallied(tally: Tally) -> Tallied:
    return Tallied.model_validate(tally)


def _fields(tally: Tally) -> dict[str, Any]:
    return dict(_tallied(tally))


K = TypeVar("K")


def _by_cost(items: Mapping[K, Tally]) -> list[tuple[K, Tally]]:
    return sorted(items.items(), key=lambda item: (-(item[1].cost_usd or 0.0), -item[1].tokens))


def how_to_price(models: list[str]) -> str | None:
    return HOW_TO_PRICE.format(model=models[0]) if models else None


async def usage(call: Call[UsageQuery, None]) -> UsageAnswer:
    """The original rows (day × model × purpose, newest day first), now with their cost."""
    context, days = call.context, call.params.days
    zone = await context.display_zone()
    window = usage_days(days, zone, context.clock())
    groups = await context.stores.audit.usage_groups(window)
    report = summarise([day for day, _ in window], groups, context.prices)
    rows = [
        UsageRow(day=day, model=model, purpose=purpose, **dict(_total(tally)))
        for (day, model, purpose), tally in _rows(groups, context.prices).items()
    ]
    return UsageAnswer(
        days=days,
        timezone=zone.key,
        rows=sorted(rows, key=lambda r: (-r.day.toordinal(), r.model, r.purpose)),
        totals=_total(report.totals),
        unpriced_models=report.unpriced_models,
    )


def _rows(groups: Sequence[UsageGroup], prices: PriceTable) -> dict[tuple[date, str, str], Tally]:
    rows: dict[tuple[date, str, str], Tally] = {}
    for group in groups:
        cost = prices.cost(
            group.model,
            group.input_tokens,
            group.output_tokens,
            group.cache_read_tokens,
            group.cache_write_tokens,
        )
        rows.setdefault((group.day, group.model, group.purpose), Tally()).add(group, cost)
    return rows


async def budget_answer(context: WebContext) -> BudgetAnswer:
    zone = await context.display_zone()
    budget = context.usage.monthly_budget
    status = await month_status(
        context.stores, context.prices, budget or 1.0, zone, context.clock()
    )
    level: Literal["none", "warning", "exceeded"] = "none"
    percent = None
    if budget is not None:
        percent = round(status.percent, 1)
        level = "exceeded" if status.level >= LEVELS[-1] else "warning" if status.level else "none"
    chat = context.budget_chat
    return BudgetAnswer(
        monthly_budget=budget,
        month=status.month,
        spent_usd=round(status.spent, 6),
        percent=percent,
        level=level,
        notify=f"{chat[0]} · {chat[1]}" if chat and budget is not None else None,
        unpriced_models=list(status.unpriced_models),
    )


async def summary(call: Call[UsageQuery, None]) -> UsageSummary:
    context, days = call.context, call.params.days
    zone = await context.display_zone()
    window = usage_days(days, zone, context.clock())
    groups = await context.stores.audit.usage_groups(window)
    report = summarise([day for day, _ in window], groups, context.prices)
    by_day = [
        DayUsage(
            day=day,
            by_model={m: _tallied(t) for (d, m), t in report.by_day_model.items() if d == day},
            by_purpose={p: _tallied(t) for (d, p), t in report.by_day_purpose.items() if d == day},
            **_fields(report.by_day[day]),
        )
        for day in report.days
    ]
    models = []
    for model, tally in _by_cost(report.by_model):
        entry = context.prices.lookup(model)
        models.append(
            ModelUsageRow(
                model=model,
                price_key=entry.key if entry else None,
                price_source=entry.source if entry else None,
                **_fields(tally),
            )
        )
    sessions = await _sessions(context, report)
    by_platform = await _by_platform(context, report, sessions, window[0][1])
    return UsageSummary(
        days=days,
        timezone=zone.key,
        totals=_tallied(report.totals),
        by_day=by_day,
        by_model=models,
        by_purpose=[
            PurposeUsage(purpose=purpose, **_fields(tally))
            for purpose, tally in _by_cost(report.by_purpose)
        ],
        by_session=[_session_usage(sid, t, sessions) for sid, t in _by_cost(report.by_session)],
        by_platform=by_platform,
        unpriced_models=report.unpriced_models,
        how_to_price=how_to_price(report.unpriced_models),
        budget=await budget_answer(context),
    )


async def _sessions(context: WebContext, report: UsageReport) -> dict[int, SessionRecord]:
    return await context.stores.sessions.get_many(sid for sid in report.by_session if sid)


def _session_usage(
    session_id: int | None, tally: Tally, sessions: Mapping[int, SessionRecord]
) -> SessionUsage:
    record = sessions.get(session_id) if session_id is not None else None
    return SessionUsage(
        session_id=session_id,
        title=record.title if record else None,
        channel=record.channel if record else None,
        chat_id=record.chat_id if record else None,
        **_fields(tally),
    )


def _platform_title(channel: str | None) -> str:
    if channel is None:
        return "No session (background work)"
    spec = platforms.find(channel)
    return spec.title if spec is not None else channel.capitalize()


async def _by_platform(
    context: WebContext,
    report: UsageReport,
    sessions: Mapping[int, SessionRecord],
    start: datetime,
) -> list[PlatformUsage]:
    """The sessions' usage summed up by their channel, with the messages of each channel."""
    tallies: dict[str | None, Tally] = {}
    for session_id, tally in report.by_session.items():
        record = sessions.get(session_id) if session_id is not None else None
        tallies.setdefault(record.channel if record else None, Tally()).merge(tally)
    messages = await context.stores.messages.counts_by_channel(start)
    for channel in messages:
        tallies.setdefault(channel, Tally())
    return [
        PlatformUsage(
            channel=channel,
            title=_platform_title(channel),
            messages_in=messages.get(channel or "", (0, 0))[0],
            messages_out=messages.get(channel or "", (0, 0))[1],
            **_fields(tally),
        )
        for channel, tally in _by_cost(tallies)
    ]


async def budget(call: Call[NoParams, None]) -> BudgetAnswer:
    return await budget_answer(call.context)


async def prices(call: Call[NoParams, None]) -> PriceList:
    table = call.context.prices
    return PriceList(
        prices=[
            PriceRow(
                key=entry.key,
                input=entry.price.input,
                output=entry.price.output,
                cache_read=entry.price.cache_read,
                cache_write=entry.price.cache_write,
                input_includes_cache_read=entry.price.input_includes_cache_read,
                source=entry.source,
            )
            for entry in table.entries()
        ],
        local_server=table.local_server,
    )


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/usage",
        usage,
        UsageAnswer,
        "LLM calls per day, model and purpose, with their estimated cost and totals",
        params=UsageQuery,
    ),
    Endpoint(
        "GET",
        "/api/usage/summary",
        summary,
        UsageSummary,
        "Tokens and estimated cost per day, model, purpose and session, and the budget",
        params=UsageQuery,
    ),
    Endpoint(
        "GET",
        "/api/usage/budget",
        budget,
        BudgetAnswer,
        "The monthly budget: the month's estimated cost so far and the warning level",
    ),
    Endpoint(
        "GET",
        "/api/usage/prices",
        prices,
        PriceList,
        "The price table (built-in, usage.prices, local server) usage is priced with",
    ),
)
