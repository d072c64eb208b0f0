"""The Usage page in a real headless Chromium, over calls made through the real path (chat turns
with the fake Anthropic server, priced by the built-in price of claude-sonnet-4) and two stored
calls of a model with no price: the chart is drawn with cost per day, stacked by model or by
purpose, the totals match the API's, the tables show each model, purpose and session, the model
without a price is named with how to price it, and a month past its budget shows the banner on
every page. Screenshots at desktop and phone width go to $BRUCE_SCREENSHOTS (default: the
test's tmp_path)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.domain import SessionKey, utcnow
from bruce_bot.storage.models import LLMCallRow, MessageRow
from tests.browser.conftest import needs_chromium
from tests.integration.dashboard_support import Dashboard, running_dashboard

pytestmark = needs_chromium

TOKEN = "Lm4xQ9pWz2RkT7vNc0HsJ5dYg8BfAe3UoKi1XrEtG6w"
TIMEOUT_MS = 20_000
UNPRICED = "mystery-model-7b"
expect.set_options(timeout=TIMEOUT_MS)
SIZES = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


def screenshot_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("BRUCE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    # A budget the turns below pass: the banner shows "exceeded".
    usage = {"monthly_budget": 0.0001}
    async with running_dashboard(tmp_path, TOKEN, usage=usage) as running:
        await running.chat("alice", "hello")
        await running.use_tool("alice", "add", {"a": 1, "b": 2})
        stores = running.bruce.stores
        assert stores is not None
        bob = await stores.sessions.get_or_create(SessionKey("chat", "bob"))
        now = utcnow()
        rows = [
            {
                "session_id": bob.id,
                "purpose": "summary",
                "model": UNPRICED,
                "input_tokens": 1200,
                "output_tokens": 300,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "error": None,
                "created_at": now,
            }
        ] * 2
        async with stores.database.engine.begin() as connection:
            await connection.execute(LLMCallRow.__table__.insert(), rows)
        yield running


async def open_page(browser: Browser, dashboard: Dashboard, size: str) -> tuple[Page, list[str]]:
    context = await browser.new_context(base_url=dashboard.url, viewport=SIZES[size])  # type: ignore[arg-type]
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: errors.append(message.text) if message.type == "error" else None,
    )
    await page.goto("/usage")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/usage")
    return page, errors


async def api(dashboard: Dashboard, path: str) -> dict[str, Any]:
    async with httpx.AsyncClient(
        base_url=dashboard.url, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as client:
        response = await client.get(path)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


def usd(value: float) -> str:
    return f"${value:,.4f}" if 0 < abs(value) < 0.01 else f"${value:,.2f}"


CHART = """() => {
  const chart = Chart.getChart(document.getElementById("usage-chart"));
  return {
    measure: chart.canvas.dataset.measure,
    stacked: chart.options.scales.y.stacked,
    labels: chart.data.labels,
    datasets: chart.data.datasets.map((d) => ({ label: d.label, data: d.data })),
  };
}"""


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_the_chart_shows_cost_per_day_with_the_totals(
    browser: Browser, dashboard: Dashboard, tmp_path: Path, size: str
) -> None:
    summary = await api(dashboard, "/api/usage/summary?days=30")
    model = dashboard.bruce.config.llm.model
    cost = summary["totals"]["cost_usd"]
    assert cost > 0
    page, errors = await open_page(browser, dashboard, size)

    await expect(page.locator("#total-cost")).to_have_text(usd(cost))
    await expect(page.locator("#total-tokens")).to_have_text(f"{summary['totals']['tokens']:,}")
    await expect(page.locator("#usage-chart")).to_have_attribute("data-measure", "cost")
    chart = await page.evaluate(CHART)
    assert chart["stacked"] is True and len(chart["labels"]) == 30
    by_label = {d["label"]: d["data"] for d in chart["datasets"]}
    assert set(by_label) == {model, f"{UNPRICED} (no price)"}
    assert sum(by_label[model]) == pytest.approx(cost)  # the priced model's bars add up
    assert sum(by_label[f"{UNPRICED} (no price)"]) == 0  # no price: no cost drawn
    box = await page.locator("#usage-chart").bounding_box()
    assert box is not None and box["width"] > 200 and box["height"] > 150

    # The model without a price: named, with how to add one; its rows say "no price".
    note = page.locator("#unpriced")
    await expect(note).to_contain_text(f"No price for {UNPRICED}.")
    await expect(note).to_contain_text("usage.prices")
    await expect(page.locator("#by-model tr", has_text=UNPRICED)).to_contain_text("no price")
    await expect(page.locator("#by-model tr", has_text=model)).to_contain_text(usd(cost))
    await expect(page.locator("#by-purpose")).to_contain_text("chat turns")
    await expect(page.locator("#by-purpose")).to_contain_text("summaries")
    await expect(page.locator("#by-session tbody tr")).to_have_count(2)
    await expect(page.locator("#budget-banner")).to_contain_text("Monthly LLM budget exceeded")

    await page.screenshot(path=str(screenshot_dir(tmp_path) / f"usage-{size}.png"), full_page=True)
    # Stacked by purpose: the same days, the same cost, split another way.
    await page.select_option("#stack", "purpose")
    await page.wait_for_function(
        "() => Chart.getChart(document.getElementById('usage-chart'))"
        ".data.datasets.some((d) => d.label === 'chat turns')"
    )
    chart = await page.evaluate(CHART)
    purposes = {d["label"]: sum(d["data"]) for d in chart["datasets"]}
    assert set(purposes) == {"chat turns", "summaries"}
    assert purposes["chat turns"] == pytest.approx(cost)
    await page.context.close()
    assert errors == [], errors


async def test_the_price_table_opens_with_the_built_in_prices(
    browser: Browser, dashboard: Dashboard
) -> None:
    page, errors = await open_page(browser, dashboard, "desktop")
    await page.locator("#prices summary").click()
    row = page.locator("#price-table tr", has_text="claude-sonnet-4")
    await expect(row.first).to_contain_text("built-in")
    await expect(row.first.locator("td.num").first).to_have_text("3")
    await page.context.close()
    assert errors == [], errors


async def test_the_budget_banner_shows_on_other_pages(
    browser: Browser, dashboard: Dashboard
) -> None:
    page, errors = await open_page(browser, dashboard, "desktop")
    await page.goto("/sessions")
    banner = page.locator("#budget-banner")
    await expect(banner).to_contain_text("exceeded")
    await expect(banner.locator("a")).to_have_attribute("href", "/usage")
    await page.context.close()
    assert errors == [], errors


async def test_the_chart_library_is_served_same_origin(
    browser: Browser, dashboard: Dashboard
) -> None:
    page, _ = await open_page(browser, dashboard, "desktop")
    response = await page.request.get("/static/vendor/chart.umd.min.js")
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/javascript")
    for name in ("vendor/README.md", "vendor/chart.js-LICENSE.md", "vendor/../app.py"):
        assert (await page.request.get(f"/static/{name}")).status == 404, name
    await page.context.close()


async def test_with_no_price_at_all_the_chart_shows_tokens_and_says_so(
    browser: Browser, tmp_path: Path
) -> None:
    async with running_dashboard(tmp_path, TOKEN) as dashboard:
        stores = dashboard.bruce.stores
        assert stores is not None
        row = {
            "session_id": None,
            "purpose": "brain",
            "model": UNPRICED,
            "input_tokens": 5000,
            "output_tokens": 250,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "error": None,
            "created_at": utcnow(),
        }
        async with stores.database.engine.begin() as connection:
            await connection.execute(LLMCallRow.__table__.insert(), [row])
        page, errors = await open_page(browser, dashboard, "desktop")
        await expect(page.locator("#usage-chart")).to_have_attribute("data-measure", "tokens")
        await expect(page.locator("#total-cost")).to_have_text("no price")
        await expect(page.locator("#total-tokens")).to_have_text("5,250")
        await expect(page.locator("#unpriced")).to_contain_text(f"No price for {UNPRICED}.")
        chart = await page.evaluate(CHART)
        assert [(d["label"], sum(d["data"])) for d in chart["datasets"]] == [(UNPRICED, 5250)]
        await expect(page.locator("#budget-banner")).to_have_count(0)  # no budget, no banner
        await page.context.close()
        assert errors == [], errors


async def test_the_usage_page_shows_each_platform(browser: Browser, dashboard: Dashboard) -> None:
    """A Telegram and a Matrix session besides the test's chat: a row per platform with its
    messages, replies, calls and tokens, as the API adds them up."""
    stores = dashboard.bruce.stores
    assert stores is not None
    telegram = await stores.sessions.get_or_create(SessionKey("telegram", "111"))
    matrix = await stores.sessions.get_or_create(SessionKey("matrix", "!room:localhost"))
    now = utcnow()
    calls = [
        {
            "session_id": session,
            "purpose": "agent",
            "model": UNPRICED,
            "input_tokens": tokens,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "error": None,
            "created_at": now,
        }
        for session, tokens in ((telegram.id, 4000), (matrix.id, 250))
    ]
    messages = [
        {"session_id": session, "role": role, "content": "hi", "status": "done", "created_at": now}
        for session, role in (
            (telegram.id, "user"),
            (telegram.id, "user"),
            (telegram.id, "assistant"),
            (matrix.id, "user"),
        )
    ]
    async with stores.database.engine.begin() as connection:
        await connection.execute(LLMCallRow.__table__.insert(), calls)
        await connection.execute(MessageRow.__table__.insert(), messages)
    page, errors = await open_page(browser, dashboard, "desktop")
    table = page.locator("#by-platform")
    row = table.locator("tr[data-platform=telegram]")
    await expect(row.locator("td")).to_have_text(["Telegram", "2", "1", "no price", "1", "4,000"])
    matrix_row = table.locator("tr[data-platform=matrix]")
    await expect(matrix_row.locator("td")).to_have_text(
        ["Matrix", "1", "0", "no price", "1", "250"]
    )
    await expect(table.locator("tbody tr", has_text="Chat")).to_have_count(1)  # the test's chat
    await page.context.close()
    assert errors == [], errors
