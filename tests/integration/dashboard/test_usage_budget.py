"""The monthly budget against a running Bruce (real SQLite, the real outbox and a recording
channel): the owner gets one message at 80 % and one at 100 % of the month's estimated cost,
each exactly once — also when Bruce restarts on the same database with the month already past
a level — only the 100 % one when the month jumps past both at once, and none again in the
month; a new month starts from nothing. The clock is Bruce's injected one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bruce_bot.config import UsageConfig
from bruce_bot.domain import LLMCallRecord, Usage
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.storage.messages import usage_row
from bruce_bot.storage.models import LLMCallRow
from bruce_bot.usage.monthly_budget import BudgetPolicy, BudgetWatch
from bruce_bot.usage.prices import PriceTable
from tests.conftest import wait_until
from tests.integration.dashboard_support import Dashboard, running_dashboard
from tests.integration.support import db_rows

TOKEN = "Vb3nQ8rTzL5kWm1XcJ7pHs0dGf4yAe9UoKi2RwNtE6q"
SAO_PAULO = ZoneInfo("America/Sao_Paulo")
OWNER = ("chat", "owner")
# m-big: $1 a thousand input tokens.
PRICES = PriceTable.from_config(
    UsageConfig.model_validate({"prices": {"m-big": {"input": 1000, "output": 1000}}})
)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        yield running


def watch_of(dashboard: Dashboard, clock: Callable[[], datetime]) -> BudgetWatch:
    """A watch over Bruce's stores and outbox, as `parts.py` builds one (the configured one,
    hooked to the stores, is tested last); the monotonic clock stands still, so only a level
    reached makes it read again."""
    bruce = dashboard.bruce
    assert bruce.stores is not None and isinstance(bruce.outbox, Outbox)
    watch = BudgetWatch(
        bruce.stores,
        bruce.outbox,
        BudgetPolicy(PRICES, 10.0, SAO_PAULO, OWNER),
        clock=clock,
        monotonic=lambda: 0.0,
    )
    return watch


async def spend(dashboard: Dashboard, watch: BudgetWatch, clock: Clock, dollars: float) -> None:
    """An LLM call costing `dollars`, stored at the clock's time (the store would stamp the
    wall clock's), then told to the watch as the store's hook tells it; the watch settles."""
    stores = dashboard.bruce.stores
    assert stores is not None
    record = LLMCallRecord("agent", "m-big", Usage(input_tokens=round(dollars * 1000)))
    async with stores.database.engine.begin() as connection:
        await connection.execute(
            LLMCallRow.__table__.insert(), [usage_row(None, record, clock.now.astimezone(UTC))]
        )
    watch.recorded([record])
    await watch.settled()


def told(dashboard: Dashboard) -> list[str]:
    return dashboard.channel.texts(OWNER[1])


async def test_80_and_100_percent_are_told_once_each_also_after_a_restart(
    tmp_path: Path,
) -> None:
    clock = Clock(datetime(2026, 12, 10, 12, tzinfo=SAO_PAULO))
    async with running_dashboard(tmp_path, TOKEN) as first:
        watch = watch_of(first, clock)
        watch.start()
        await watch.settled()
        await spend(first, watch, clock, 7.0)
        assert told(first) == []
        await spend(first, watch, clock, 1.5)  # $8.50 of $10
        await wait_until(lambda: len(told(first)) == 1)
        [warning] = told(first)
        assert "$8.50 of your $10.00 monthly budget (85 %)" in warning and "2026-12" in warning
        await spend(first, watch, clock, 0.5)  # still between 80 and 100 %
        assert len(told(first)) == 1

    # Bruce restarts on the same database: its watch knows nothing, reads the month (90 %)
    # and finds 80 % told already.
    async with running_dashboard(tmp_path, TOKEN) as second:
        restarted = watch_of(second, clock)
        restarted.start()
        await restarted.settled()
        assert told(second) == []
        await spend(second, restarted, clock, 1.5)  # $10.50
        await wait_until(lambda: len(told(second)) == 1)
        [reached] = told(second)
        assert "budget reached" in reached and "(105 %)" in reached

        again = watch_of(second, clock)  # and once more, within the same process
        again.start()
        await again.settled()
        await spend(second, again, clock, 5.0)
        assert len(told(second)) == 1

    # Stored before sent, like a reminder: two notices, delivered; two marks in settings.
    notices = db_rows(
        tmp_path, "SELECT content, status FROM messages WHERE kind = 'notice' ORDER BY id"
    )
    assert [n["status"] for n in notices] == ["sent", "sent"]
    assert [n["content"] for n in notices] == [warning, reached]
    marks = db_rows(
        tmp_path, "SELECT key FROM settings WHERE key LIKE 'usage.budget%' ORDER BY key"
    )
    assert [m["key"] for m in marks] == [
        "usage.budget_notice.2026-12.100",
        "usage.budget_notice.2026-12.80",
    ]


async def test_a_jump_past_both_levels_tells_100_percent_only(dashboard: Dashboard) -> None:
    clock = Clock(datetime(2026, 12, 10, 12, tzinfo=SAO_PAULO))
    watch = watch_of(dashboard, clock)
    watch.start()
    await watch.settled()
    await spend(dashboard, watch, clock, 12.0)
    await wait_until(lambda: told(dashboard))
    [reached] = told(dashboard)
    assert "budget reached" in reached and "(120 %)" in reached
    await spend(dashboard, watch, clock, 1.0)
    assert len(told(dashboard)) == 1


async def test_a_new_month_starts_from_nothing(dashboard: Dashboard) -> None:
    # 23:30 on 30 November in São Paulo is already December in UTC: still November here.
    clock = Clock(datetime(2026, 11, 30, 23, 30, tzinfo=SAO_PAULO))
    watch = watch_of(dashboard, clock)
    watch.start()
    await watch.settled()
    await spend(dashboard, watch, clock, 8.5)
    await wait_until(lambda: len(told(dashboard)) == 1)
    assert "2026-11" in told(dashboard)[0]
    clock.now = datetime(2026, 12, 1, 0, 30, tzinfo=SAO_PAULO)
    await spend(dashboard, watch, clock, 1.0)  # December: $1 of $10
    assert watch.spent == pytest.approx(1.0)
    assert len(told(dashboard)) == 1
    await spend(dashboard, watch, clock, 7.5)  # $8.50 in December: told again, for December
    await wait_until(lambda: len(told(dashboard)) == 2)
    assert "2026-12" in told(dashboard)[1]


async def test_a_turns_usage_reaches_the_configured_watch(tmp_path: Path) -> None:
    # A budget so small that one chat turn (claude-sonnet-4-6, $3/$15 a million) passes it.
    usage = {"monthly_budget": 0.000001}
    async with running_dashboard(tmp_path, TOKEN, usage=usage) as dashboard:
        parts = dashboard.bruce.parts
        assert parts is not None and parts.budget is not None
        await parts.budget.settled()
        assert parts.budget.spent == 0.0
        await dashboard.chat("alice", "hello")
        await wait_until(lambda: parts.budget.spent > 0)  # type: ignore[union-attr]
        await parts.budget.settled()
        status = await parts.budget.check()
        assert status.level == 100 and status.spent == pytest.approx(parts.budget.spent)
        # Usage the audit store records at once (summaries, the brain, sub-agents) counts too:
        # 1000 input tokens at $3 a million.
        stores = dashboard.bruce.stores
        assert stores is not None
        before = parts.budget.spent
        summary = LLMCallRecord("summary", "claude-sonnet-4-6", Usage(input_tokens=1000))
        await stores.audit.record_usage(None, [summary])
        assert parts.budget.spent == pytest.approx(before + 0.003)
