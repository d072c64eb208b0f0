"""`/api/usage/*` against a running Bruce on a real SQLite file, with Bruce's clock set to five
minutes after midnight in São Paulo: tokens and estimated cost are summed per day (São Paulo's
days), model, purpose and session; a model without a price keeps its tokens, gets no cost, and
the answer names it and says how to price it; the month's cost is measured against
`usage.monthly_budget`; the price table in use is listed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from bruce_bot.domain import SessionKey
from bruce_bot.storage.models import LLMCallRow, MessageRow
from tests.conftest import clock_from
from tests.integration.dashboard_support import Dashboard, running_dashboard

TOKEN = "Qy7fRk2mZpL0vXc9WnB4sTj6HdGa1Ue8KoPi3YrNwEb"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SAO_PAULO = ZoneInfo("America/Sao_Paulo")
START = datetime(2026, 3, 29, 0, 5, tzinfo=SAO_PAULO)  # 03:05 UTC
TODAY = START.date()
YESTERDAY = TODAY - timedelta(days=1)
# m-big: $10 a million input tokens, $20 output; cache reads and writes priced as input.
PRICES = {"m-big": {"input": 10, "output": 20}}


async def seed(dashboard: Dashboard) -> dict[str, int]:
    """Calls of two sessions, one model with a price and one without, and one call too old."""
    stores = dashboard.bruce.stores
    assert stores is not None
    alice = await stores.sessions.get_or_create(SessionKey("chat", "alice"))
    bob = await stores.sessions.get_or_create(SessionKey("chat", "bob"))
    await stores.sessions.set_title(bob.id, "Trip planning")

    def call(
        session: int | None, purpose: str, model: str, at: datetime, **tokens: int
    ) -> dict[str, Any]:
        counts = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0}
        return {
            "session_id": session,
            "purpose": purpose,
            "model": model,
            "error": None,
            "created_at": at,
            "cache_write_tokens": 0,
            **counts,
            **tokens,
        }

    late_yesterday = datetime.combine(YESTERDAY, time(23, 30), tzinfo=SAO_PAULO)  # 02:30 UTC today
    rows = [
        call(alice.id, "agent", "m-big", late_yesterday, input_tokens=1000, output_tokens=500),
        call(
            alice.id,
            "summary",
            "m-small",
            datetime.combine(YESTERDAY, time(12), tzinfo=SAO_PAULO),
            input_tokens=200,
            output_tokens=100,
        ),
        call(
            bob.id,
            "agent",
            "m-big",
            START - timedelta(minutes=4),
            input_tokens=3000,
            cache_read_tokens=1000,
        ),
        call(None, "brain", "m-big", START - timedelta(days=40), input_tokens=100_000),
    ]
    async with stores.database.engine.begin() as connection:
        await connection.execute(LLMCallRow.__table__.insert(), rows)
    return {"alice": alice.id, "bob": bob.id}


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    usage = {"prices": PRICES, "monthly_budget": 0.07}
    async with running_dashboard(tmp_path, TOKEN, clock_from(START), usage=usage) as running:
        yield running


@pytest.fixture
async def client(dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as http:
        yield http


async def get_json(client: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def tokens(row: dict[str, Any]) -> tuple[int, int, int, int]:
    return (
        row["input_tokens"],
        row["output_tokens"],
        row["cache_read_tokens"],
        row["cache_write_tokens"],
    )


async def test_the_summary_sums_and_prices_per_day_model_purpose_and_session(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    ids = await seed(dashboard)
    data = await get_json(client, "/api/usage/summary", days=7)
    assert data["days"] == 7 and data["timezone"] == "America/Sao_Paulo"

    # alice's m-big call: (1000 x $10 + 500 x $20) / 1M = $0.02; bob's: 4000 x $10 / 1M = $0.04.
    totals = data["totals"]
    assert totals["cost_usd"] == pytest.approx(0.06)
    assert totals["calls"] == 3 and totals["unpriced_calls"] == 1
    assert totals["tokens"] == 1000 + 500 + 200 + 100 + 3000 + 1000

    # Every day of the range, oldest first; 23:30 in São Paulo counts for São Paulo's yesterday.
    days = {day["day"]: day for day in data["by_day"]}
    assert list(days) == [(TODAY - timedelta(days=n)).isoformat() for n in range(6, -1, -1)]
    yesterday, today = days[YESTERDAY.isoformat()], days[TODAY.isoformat()]
    assert yesterday["cost_usd"] == pytest.approx(0.02) and yesterday["calls"] == 2
    assert yesterday["by_model"]["m-small"]["cost_usd"] is None
    assert yesterday["by_purpose"]["summary"]["input_tokens"] == 200
    assert today["cost_usd"] == pytest.approx(0.04)
    assert set(today["by_model"]) == {"m-big"} and set(today["by_purpose"]) == {"agent"}
    assert days[(TODAY - timedelta(days=3)).isoformat()]["calls"] == 0

    big, small = data["by_model"]  # the most expensive first
    assert (big["model"], big["price_key"], big["price_source"]) == ("m-big", "m-big", "config")
    assert big["cost_usd"] == pytest.approx(0.06) and tokens(big) == (4000, 500, 1000, 0)
    assert (small["model"], small["cost_usd"], small["price_key"]) == ("m-small", None, None)
    assert small["unpriced_calls"] == 1

    purposes = {row["purpose"]: row for row in data["by_purpose"]}
    assert purposes["agent"]["cost_usd"] == pytest.approx(0.06)
    assert purposes["summary"]["cost_usd"] is None and "brain" not in purposes  # 40 days ago

    bob, alice = data["by_session"]
    assert (bob["session_id"], bob["title"], bob["chat_id"]) == (ids["bob"], "Trip planning", "bob")
    assert bob["cost_usd"] == pytest.approx(0.04)
    assert alice["session_id"] == ids["alice"] and alice["cost_usd"] == pytest.approx(0.02)
    assert alice["unpriced_calls"] == 1

    # The unknown model is named, with how to give it a price.
    assert data["unpriced_models"] == ["m-small"]
    assert "usage.prices" in data["how_to_price"] and "m-small:" in data["how_to_price"]


async def test_a_longer_range_counts_older_calls_and_one_day_only_today(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    await seed(dashboard)
    ninety = await get_json(client, "/api/usage/summary", days=90)
    assert len(ninety["by_day"]) == 90
    # The brain's call 40 days ago: 100k input tokens at $10 a million.
    assert ninety["totals"]["cost_usd"] == pytest.approx(0.06 + 1.0)
    assert {row["purpose"] for row in ninety["by_purpose"]} == {"agent", "summary", "brain"}
    assert ninety["by_session"][0]["session_id"] is None  # no session, $1
    one = await get_json(client, "/api/usage/summary", days=1)
    assert one["totals"]["cost_usd"] == pytest.approx(0.04) and one["unpriced_models"] == []
    assert one["how_to_price"] is None


async def test_the_usage_rows_carry_their_cost_and_name_unpriced_models(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    await seed(dashboard)
    data = await get_json(client, "/api/usage", days=7)
    rows = {(r["day"], r["model"], r["purpose"]): r for r in data["rows"]}
    assert rows[(TODAY.isoformat(), "m-big", "agent")]["cost_usd"] == pytest.approx(0.04)
    assert rows[(YESTERDAY.isoformat(), "m-small", "summary")]["cost_usd"] is None
    assert data["totals"]["cost_usd"] == pytest.approx(0.06)
    assert data["unpriced_models"] == ["m-small"]
    assert [r["day"] for r in data["rows"]] == sorted(
        (r["day"] for r in data["rows"]), reverse=True
    )


async def test_the_budget_is_this_months_cost_against_the_monthly_budget(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    empty = await get_json(client, "/api/usage/budget")
    assert (empty["month"], empty["spent_usd"], empty["level"]) == ("2026-03", 0.0, "none")
    await seed(dashboard)
    data = await get_json(client, "/api/usage/budget")
    # March so far: $0.06 of $0.07 (the call 40 days ago was in February).
    assert data["monthly_budget"] == 0.07 and data["spent_usd"] == pytest.approx(0.06)
    assert data["percent"] == pytest.approx(85.7, abs=0.05) and data["level"] == "warning"
    assert data["unpriced_models"] == ["m-small"]
    assert data["notify"] is None  # no Telegram, no usage.notify: the dashboard only
    summary = await get_json(client, "/api/usage/summary", days=7)
    assert summary["budget"] == data


async def test_the_price_table_lists_built_in_and_configured_entries(
    client: httpx.AsyncClient,
) -> None:
    data = await get_json(client, "/api/usage/prices")
    prices = {row["key"]: row for row in data["prices"]}
    assert data["local_server"] is False
    assert prices["m-big"] == {
        "key": "m-big",
        "input": 10.0,
        "output": 20.0,
        "cache_read": 10.0,
        "cache_write": 10.0,
        "input_includes_cache_read": False,
        "source": "config",
    }
    assert prices["claude-sonnet-4"]["source"] == "built-in"
    assert prices["gpt-4o"]["input_includes_cache_read"] is True


async def test_without_a_budget_the_level_is_none(tmp_path: Path) -> None:
    async with (
        running_dashboard(tmp_path, TOKEN, clock_from(START)) as dashboard,
        httpx.AsyncClient(base_url=dashboard.url, headers=AUTH) as client,
    ):
        await seed(dashboard)
        data = await get_json(client, "/api/usage/budget")
        assert (data["monthly_budget"], data["percent"], data["level"]) == (None, None, "none")
        # Without usage.prices nothing here has a price: tokens, no cost, both models named.
        summary = await get_json(client, "/api/usage/summary", days=7)
        assert summary["totals"]["cost_usd"] is None
        assert summary["unpriced_models"] == ["m-big", "m-small"]


async def test_the_summary_adds_up_each_platform_with_its_messages(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    """Sessions on Telegram and on Matrix: their calls, tokens and cost summed by the session's
    channel, with the messages written there (and Bruce's replies) in the range."""
    stores = dashboard.bruce.stores
    assert stores is not None
    tg_one = await stores.sessions.get_or_create(SessionKey("telegram", "111"))
    tg_two = await stores.sessions.get_or_create(SessionKey("telegram", "222"))
    room = await stores.sessions.get_or_create(SessionKey("matrix", "!room:localhost"))
    at = START - timedelta(minutes=3)

    def call(session: int | None, input_tokens: int) -> dict[str, Any]:
        return {
            "session_id": session,
            "purpose": "agent" if session else "brain",
            "model": "m-big",
            "error": None,
            "created_at": at,
            "input_tokens": input_tokens,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
        }

    def message(session: int, role: str, when: datetime = at) -> dict[str, Any]:
        status = "done" if role == "user" else "sent"
        return {
            "session_id": session,
            "role": role,
            "content": "hi",
            "status": status,
            "kind": "chat",
            "created_at": when,
        }

    calls = [call(tg_one.id, 1000), call(tg_two.id, 2000), call(room.id, 500), call(None, 100)]
    messages = [
        message(tg_one.id, "user"),
        message(tg_one.id, "assistant"),
        message(tg_two.id, "user"),
        message(tg_two.id, "user"),
        message(tg_two.id, "assistant"),
        message(room.id, "user"),
        message(room.id, "user", START - timedelta(days=30)),  # before the range
    ]
    async with stores.database.engine.begin() as connection:
        await connection.execute(LLMCallRow.__table__.insert(), calls)
        await connection.execute(MessageRow.__table__.insert(), messages)

    data = await get_json(client, "/api/usage/summary", days=7)
    rows = {row["channel"]: row for row in data["by_platform"]}
    assert [row["channel"] for row in data["by_platform"]] == ["telegram", "matrix", None]
    telegram, matrix, background = rows["telegram"], rows["matrix"], rows[None]
    assert (telegram["title"], telegram["calls"], telegram["input_tokens"]) == (
        "Telegram",
        2,
        3000,
    )
    assert telegram["cost_usd"] == pytest.approx(0.03)  # 3000 x $10 / 1M
    assert (telegram["messages_in"], telegram["messages_out"]) == (3, 2)
    assert (matrix["title"], matrix["tokens"], matrix["messages_in"]) == ("Matrix", 500, 1)
    assert matrix["messages_out"] == 0 and matrix["cost_usd"] == pytest.approx(0.005)
    assert background["calls"] == 1 and background["messages_in"] == 0
    assert background["title"] == "No session (background work)"
    assert sum(row["cost_usd"] for row in data["by_platform"]) == pytest.approx(
        data["totals"]["cost_usd"]
    )
