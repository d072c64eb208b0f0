"""The answers of `/api/usage` (web/api/usage.py), as typed JSON: totals and rows per day, model,
purpose and session, the monthly budget's state and the price table."""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_USAGE_DAYS = 366


class UsageTotals(BaseModel):
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    errors: int
    cost_usd: float | None = Field(
        None, description="estimated cost in USD; null when none of these calls has a price"
    )


class UsageRow(UsageTotals):
    day: date
    model: str
    purpose: str = Field(description="what the call was for: agent turns, summaries, the brain")


class UsageAnswer(BaseModel):
    days: int
    timezone: str = Field(description="app.timezone: the days are its days")
    rows: list[UsageRow]
    totals: UsageTotals
    unpriced_models: list[str] = Field(description="models with calls here and no price")


class UsageQuery(BaseModel):
    days: int = Field(30, ge=1, le=MAX_USAGE_DAYS, description="how many days back, today included")


class Tallied(BaseModel):
    """Calls, tokens and estimated cost of a part of the usage."""

    model_config = ConfigDict(from_attributes=True)

    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    tokens: int = Field(description="the four token counts added up")
    errors: int
    cost_usd: float | None = Field(description="estimated USD; null: none of them has a price")
    unpriced_calls: int = Field(description="calls of models without a price (not in the cost)")


class DayUsage(Tallied):
    day: date
    by_model: dict[str, Tallied]
    by_purpose: dict[str, Tallied]


class ModelUsageRow(Tallied):
    model: str
    price_key: str | None = Field(description="the price table's entry it was priced by")
    price_source: Literal["built-in", "config", "local server"] | None


class PurposeUsage(Tallied):
    purpose: str = Field(
        description="agent (chat turns), briefing, summary, brain, subagent, or another caller"
    )


class SessionUsage(Tallied):
    session_id: int | None = Field(description="null: calls no session made")
    title: str | None
    channel: str | None
    chat_id: str | None


class PlatformUsage(Tallied):
    channel: str | None = Field(
        description="the sessions' channel (telegram, discord, matrix, web…); null: calls no "
        "session made (summaries, the brain's background work)"
    )
    title: str = Field(description="as a person writes it: Telegram")
    messages_in: int = Field(description="messages people wrote in the range")
    messages_out: int = Field(description="Bruce's replies in the range")


class BudgetAnswer(BaseModel):
    monthly_budget: float | None = Field(description="usage.monthly_budget, USD; null: none")
    month: str = Field(description="the calendar month in app.timezone, like 2026-12")
    spent_usd: float = Field(description="the month's estimated cost so far")
    percent: float | None
    level: Literal["none", "warning", "exceeded"] = Field(
        description="warning from 80 %, exceeded from 100 % of the budget"
    )
    notify: str | None = Field(description="the chat the warnings go to; null: nowhere")
    unpriced_models: list[str] = Field(description="this month's models without a price")


class UsageSummary(BaseModel):
    days: int
    timezone: str = Field(description="app.timezone: the days are its days")
    currency: Literal["USD"] = "USD"
    totals: Tallied
    by_day: list[DayUsage] = Field(description="every day of the range, oldest first")
    by_model: list[ModelUsageRow] = Field(description="the most expensive first")
    by_purpose: list[PurposeUsage]
    by_session: list[SessionUsage] = Field(description="the most expensive first")
    by_platform: list[PlatformUsage] = Field(
        description="per chat platform (the sessions' channel), the most expensive first"
    )
    unpriced_models: list[str] = Field(description="models with calls here and no price")
    how_to_price: str | None = Field(description="how to price them; null when all have a price")
    budget: BudgetAnswer


class PriceRow(BaseModel):
    key: str = Field(description="a model name or a prefix of one (the longest match wins)")
    input: float = Field(description="USD per million input tokens")
    output: float
    cache_read: float
    cache_write: float
    input_includes_cache_read: bool = Field(
        description="the provider counts cache reads inside the input tokens (OpenAI)"
    )
    source: Literal["built-in", "config", "local server"]


class PriceList(BaseModel):
    prices: list[PriceRow]
    local_server: bool = Field(
        description="llm.base_url is local: models without a price are priced at 0"
    )
