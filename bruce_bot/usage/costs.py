"""Stored LLM usage summed up and priced: per day, model, purpose and session, with totals.

Storage groups the calls (SQL GROUP BY day × model × purpose × session, `AuditStore.
usage_groups`); here each group is priced by its model (a cost is linear in the tokens, so a
group's cost is the sum of its calls') and summed each way the Usage page shows. A model with
no price adds tokens but no cost, and is named in `unpriced_models`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date

from bruce_bot.storage.audit import UsageGroup
from bruce_bot.usage.prices import PriceTable


@dataclass(slots=True)
class Tally:
    """Calls, tokens and estimated cost of some of the usage. `cost_usd` is None when none of
    its calls has a price; `unpriced_calls` counts those without one."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    errors: int = 0
    cost_usd: float | None = None
    unpriced_calls: int = 0

    @property
    def tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def add(self, group: UsageGroup, cost: float | None) -> None:
        self.calls += group.calls
        self.input_tokens += group.input_tokens
        self.output_tokens += group.output_tokens
        self.cache_read_tokens += group.cache_read_tokens
        self.cache_write_tokens += group.cache_write_tokens
        self.errors += group.errors
        if cost is None:
            self.unpriced_calls += group.calls
        else:
            self.cost_usd = (self.cost_usd or 0.0) + cost

    def merge(self, other: Tally) -> None:
        """`other`'s calls added to these (the sessions of one platform summed up)."""
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.errors += other.errors
        self.unpriced_calls += other.unpriced_calls
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd


@dataclass(slots=True)
class UsageReport:
    days: list[date]  # every day of the range, oldest first, those without calls too
    totals: Tally = field(default_factory=Tally)
    by_day: dict[date, Tally] = field(default_factory=dict)
    by_day_model: dict[tuple[date, str], Tally] = field(default_factory=dict)
    by_day_purpose: dict[tuple[date, str], Tally] = field(default_factory=dict)
    by_model: dict[str, Tally] = field(default_factory=dict)
    by_purpose: dict[str, Tally] = field(default_factory=dict)
    by_session: dict[int | None, Tally] = field(default_factory=dict)
    unpriced_models: list[str] = field(default_factory=list)


def summarise(
    days: Sequence[date], groups: Iterable[UsageGroup], prices: PriceTable
) -> UsageReport:
    report = UsageReport(list(days))
    report.by_day = {day: Tally() for day in days}
    unpriced: set[str] = set()
    for group in groups:
        cost = prices.cost(
            group.model,
            group.input_tokens,
            group.output_tokens,
            group.cache_read_tokens,
            group.cache_write_tokens,
        )
        if cost is None:
            unpriced.add(group.model)
        for tally in (
            report.totals,
            report.by_day.setdefault(group.day, Tally()),
            report.by_day_model.setdefault((group.day, group.model), Tally()),
            report.by_day_purpose.setdefault((group.day, group.purpose), Tally()),
            report.by_model.setdefault(group.model, Tally()),
            report.by_purpose.setdefault(group.purpose, Tally()),
            report.by_session.setdefault(group.session_id, Tally()),
        ):
            tally.add(group, cost)
    report.unpriced_models = sorted(unpriced)
    return report


def priced_cost(
    prices: PriceTable,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
) -> float:
    """A cost for running totals: a model without a price counts as nothing."""
    cost = prices.cost(model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
    return cost or 0.0
