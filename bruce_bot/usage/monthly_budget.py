"""The monthly budget (`usage.monthly_budget`): the month's estimated cost, the dashboard's
warning, and one chat message to the owner at 80 % and one at 100 % of it.

The month is the calendar month in the user's timezone (the dashboard's setting over
`app.timezone`, read again at each read of the month). Its cost so far is read from `llm_calls`
(one GROUP BY model, priced) when the watch starts and at most every `refresh_seconds` after;
between those reads each recorded call adds its own cost to a running total in memory, so the
hot path (a call recorded) costs no query. When the total reaches a level not yet told, the
month is read again (other processes may have spent too) and, if the level holds, the message
is stored once — its mark goes into `settings` in the same commit (`MessageStore.
add_outbound_once`), so it is never stored twice, across restarts and processes — and delivered
through the outbox like a reminder (a failed delivery is retried by the outbox's redelivery).
Reaching 100 % straight from below 80 % sends the 100 % message only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import structlog

from bruce_bot.domain import LLMCallRecord, OutboundMessage, SessionKey, utcnow
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.settings.editable import timezone
from bruce_bot.storage.stores import Stores
from bruce_bot.usage.costs import priced_cost
from bruce_bot.usage.prices import PriceTable

log = structlog.get_logger(__name__)

LEVELS = (80, 100)  # percent of the budget at which the owner is told, once a month each
REFRESH_SECONDS = 300.0
ONCE_KEY = "usage.budget_notice.{month}.{level}"  # in `settings`: the message was stored


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    budget: float  # USD a month
    month: str  # "2026-12", in app.timezone
    since: datetime  # the month's start (UTC)
    spent: float  # estimated USD so far this month (models without a price count nothing)
    unpriced_models: tuple[str, ...]

    @property
    def percent(self) -> float:
        return 100.0 * self.spent / self.budget

    @property
    def level(self) -> int:
        """The highest of `LEVELS` reached, 0 for none."""
        return max((level for level in LEVELS if self.percent >= level), default=0)


def month_of(now: datetime, zone: ZoneInfo) -> tuple[str, datetime]:
    """The month `now` falls in (in `zone`): its label and its start, in UTC."""
    local = now.astimezone(zone)
    # From the wall time: the 1st at midnight may have another UTC offset than now.
    start = datetime(local.year, local.month, 1, tzinfo=zone)
    return f"{local:%Y-%m}", start.astimezone(UTC)


async def month_status(
    stores: Stores, prices: PriceTable, budget: float, zone: ZoneInfo, now: datetime
) -> BudgetStatus:
    """The month's estimated cost so far, read from the database (one query)."""
    month, since = month_of(now, zone)
    spent = 0.0
    unpriced: list[str] = []
    for row in await stores.audit.usage_by_model_since(since):
        cost = prices.cost(
            row.model,
            row.input_tokens,
            row.output_tokens,
            row.cache_read_tokens,
            row.cache_write_tokens,
        )
        if cost is None:
            unpriced.append(row.model)
        else:
            spent += cost
    return BudgetStatus(budget, month, since, spent, tuple(unpriced))


def notice_text(status: BudgetStatus, level: int) -> str:
    spent = f"${status.spent:,.2f} of your ${status.budget:,.2f} monthly budget"
    share = f"{status.percent:.0f} %"
    if level >= 100:
        return (
            f"🛑 LLM budget reached: this month ({status.month}) I have used an estimated "
            f"{spent} ({share}). I keep answering; raise usage.monthly_budget in config.yml or "
            "use me less. The dashboard's Usage page shows where it went."
        )
    return (
        f"⚠️ LLM budget: this month ({status.month}) I have used an estimated {spent} "
        f"({share}). The dashboard's Usage page shows where it went."
    )


@dataclass(frozen=True, slots=True)
class BudgetPolicy:
    """What the `usage` section and `app.timezone` say of the budget."""

    prices: PriceTable
    budget: float  # USD a month
    zone: ZoneInfo  # app.timezone; the dashboard's setting wins over it
    chat: tuple[str, str] | None  # (channel, chat id) told at each level; None: the banner only


class BudgetWatch:
    def __init__(
        self,
        stores: Stores,
        outbox: Outbox,
        policy: BudgetPolicy,
        *,
        clock: Callable[[], datetime] = utcnow,
        refresh_seconds: float = REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stores = stores
        self._outbox = outbox
        self.prices = policy.prices
        self.budget = policy.budget
        self._configured_zone = policy.zone
        self._zone = policy.zone  # the one the month was last read in
        self._chat = policy.chat
        self._clock = clock
        self._refresh_seconds = refresh_seconds
        self._monotonic = monotonic
        self._month: str | None = None
        self._spent = 0.0  # the running total of `_month`
        self._read_at: float | None = None  # monotonic time of the last read; None: never
        self._told: set[tuple[str, int]] = set()  # (month, level) stored or found stored
        self._check: asyncio.Task[None] | None = None
        self._again = False

    @property
    def spent(self) -> float:
        """The running total of the month (an estimate between reads)."""
        return self._spent

    def start(self) -> None:
        """Read the month once now (in the background)."""
        self._spawn()

    async def settled(self) -> None:
        """Wait for the check under way, if any (and the one it asked for after it)."""
        while self._check is not None and not self._check.done():
            await asyncio.shield(self._check)

    async def stop(self) -> None:
        if self._check is not None:
            self._check.cancel()
            await asyncio.gather(self._check, return_exceptions=True)

    def recorded(self, records: Sequence[LLMCallRecord]) -> None:
        """A hook of the stores, called after LLM calls were recorded: no I/O here."""
        month, _ = month_of(self._clock(), self._zone)
        if month != self._month:
            self._spawn()  # a new month (or never read): start from the database
            return
        for record in records:
            usage = record.usage
            self._spent += priced_cost(
                self.prices,
                record.model,
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            )
        stale = self._read_at is None or self._monotonic() - self._read_at >= self._refresh_seconds
        if stale or self._untold_level() is not None:
            self._spawn()

    def _untold_level(self) -> int | None:
        percent = 100.0 * self._spent / self.budget
        reached = max((level for level in LEVELS if percent >= level), default=0)
        if reached and (self._month, reached) not in self._told:
            return reached
        return None

    def _spawn(self) -> None:
        if self._check is not None and not self._check.done():
            self._again = True  # read once more when this one ends: the calls since count
            return
        self._check = asyncio.get_running_loop().create_task(self._checking(), name="budget")

    async def _checking(self) -> None:
        while True:
            self._again = False
            try:
                await self.check()
            except Exception as exc:  # told next time; never breaks the turn that spent
                log.warning("budget_check_failed", error=repr(exc))
            if not self._again:
                return

    async def check(self) -> BudgetStatus:
        """Read the month's cost, and tell the owner of a level reached and not yet told."""
        self._zone = await timezone(self._configured_zone).value(self._stores.settings)
        status = await month_status(
            self._stores, self.prices, self.budget, self._zone, self._clock()
        )
        self._month, self._spent, self._read_at = status.month, status.spent, self._monotonic()
        level = status.level
        if level and (status.month, level) not in self._told:
            await self._tell(status, level)
            self._told.add((status.month, level))
        return status

    async def _tell(self, status: BudgetStatus, level: int) -> None:
        if self._chat is None:
            log.warning("budget_level_reached", level=level, month=status.month, chat=None)
            return
        channel, chat_id = self._chat
        text = notice_text(status, level)
        session = await self._stores.sessions.get_or_create(SessionKey(channel, chat_id))
        key = ONCE_KEY.format(month=status.month, level=level)
        message_id = await self._stores.messages.add_outbound_once(session.id, text, "notice", key)
        if message_id is None:
            return  # told before (another process, or before a restart)
        log.info("budget_notice", level=level, month=status.month, spent=round(status.spent, 4))
        await self._outbox.deliver(OutboundMessage(channel, chat_id, text, message_id, "notice"))
