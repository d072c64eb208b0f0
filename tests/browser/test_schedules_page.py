"""The Schedules page in headless Chromium: creating a reminder with the form (the chat chosen
among the sessions, a time in a chosen timezone), its next run counting down live, running it now
(the reminder reaches the chat and the last run shows as delivered, on time), a cron schedule
shown in words, pausing and resuming, a refused cron naming the field in the form, and a task
awaiting the user's confirmation shown as such. Screenshots at desktop and phone width."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.domain import SessionKey, utcnow
from tests.browser.conftest import needs_chromium
from tests.browser.screenshots import DESKTOP, at_both_widths, screenshot_dir
from tests.integration.dashboard_support import Dashboard, running_dashboard

pytestmark = needs_chromium

TOKEN = "Zq3Wm1Kc7Rt2Lp9Zx4Nv8Bd5Hs6Fg1Jk-AeUiOoPuR"
TIMEOUT_MS = 20_000
LISBON = ZoneInfo("Europe/Lisbon")
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        await running.chat("alice", "hello")
        await running.chat("bob", "hi")
        stores, tasks = running.bruce.stores, running.bruce.tasks
        assert stores is not None and tasks is not None
        session = await stores.sessions.find(SessionKey("chat", "bob"))
        assert session is not None
        await tasks.create(
            session_id=session.id,
            channel="chat",
            chat_id="bob",
            title="Fetch the news page",
            mode="agent",
            content="Fetch https://example.com/news",
            run_at="+5h",
            confirmed=False,
        )
        yield running


@pytest.fixture
async def page(browser: Browser, dashboard: Dashboard) -> AsyncIterator[Page]:
    context = await browser.new_context(base_url=dashboard.url, viewport=DESKTOP)
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    tab.on(
        "console",
        lambda message: (
            errors.append(message.text)
            if message.type == "error" and "400" not in message.text  # the refused save
            else None
        ),
    )
    yield tab
    await context.close()
    assert errors == [], f"errors in the browser: {errors}"


async def log_in(page: Page, path: str) -> None:
    await page.goto(path)
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"**{path}")


async def test_a_reminder_made_in_the_form_counts_down_runs_now_and_reaches_the_chat(
    page: Page, dashboard: Dashboard, tmp_path: Path
) -> None:
    await log_in(page, "/schedules")
    waiting = page.locator("#tasks tr", has_text="Fetch the news page")
    await expect(waiting.locator(".status")).to_contain_text("awaiting confirmation")

    await page.get_by_role("button", name="New task…").click()
    chat = page.locator("#f-session option", has_text="alice")
    await page.select_option("#f-session", await chat.get_attribute("value"))
    await page.fill("#f-title", "Stretch")
    await page.fill("#f-content", "Time to stretch your legs")
    soon = (utcnow() + timedelta(minutes=40)).astimezone(LISBON)
    await page.fill("#f-run-at", f"{soon:%Y-%m-%dT%H:%M}")
    await page.fill("#f-timezone", "Europe/Lisbon")
    await page.get_by_role("button", name="Save").click()

    row = page.locator("#tasks tr", has_text="Stretch")
    await expect(page.locator("#notice")).to_contain_text("Created “Stretch”")
    await expect(row.locator(".schedule")).to_have_text(
        f"once, {soon:%a %Y-%m-%d} at {soon:%H:%M} Europe/Lisbon"
    )
    await expect(row).to_contain_text("chat · alice")
    countdown = row.locator(".countdown")
    await expect(countdown).to_have_text(re.compile(r"^in \d+ min \d\d s$"))
    first = await countdown.text_content()
    await expect(countdown).not_to_have_text(first or "")  # it counts down by itself
    await at_both_widths(page, screenshot_dir(tmp_path), "schedules")

    await row.get_by_role("button", name="Run Stretch now").click()
    await expect(page.locator("#notice")).to_contain_text('Ran "Stretch" now')
    await expect(row.locator(".last-run .badge")).to_have_text("delivered")
    await expect(row.locator(".last-run")).to_contain_text("on time")
    assert "⏰ Time to stretch your legs" in dashboard.channel.texts("alice")
    await expect(row.locator(".status .badge")).to_have_text("active")  # still due later

    await row.get_by_role("button", name="Pause Stretch").click()
    await expect(row.locator(".status .badge")).to_have_text("paused")
    await expect(row.locator(".countdown")).to_have_count(0)
    await row.get_by_role("button", name="Resume Stretch").click()
    await expect(row.locator(".status .badge")).to_have_text("active")


async def test_a_cron_schedule_reads_in_words_and_a_bad_one_is_refused_naming_the_field(
    page: Page, dashboard: Dashboard, tmp_path: Path
) -> None:
    await log_in(page, "/schedules")
    await page.get_by_role("button", name="New task…").click()
    await page.fill("#f-title", "Standup")
    await page.fill("#f-content", "Standup in 5 minutes")
    await page.select_option("#f-kind", "cron")
    await page.fill("#f-cron", "0 8 * * 1-7x")
    await page.fill("#f-timezone", "America/Sao_Paulo")
    await page.get_by_role("button", name="Save").click()
    await expect(page.locator("#form-error")).to_contain_text("field 'cron'")
    await expect(page.locator("#f-cron")).to_have_attribute("aria-invalid", "true")
    await at_both_widths(page, screenshot_dir(tmp_path), "schedules-refused")

    await page.fill("#f-cron", "0 8 * * 1-5")
    await page.get_by_role("button", name="Save").click()
    row = page.locator("#tasks tr", has_text="Standup")
    await expect(row.locator(".schedule")).to_contain_text(
        "every weekday at 08:00 America/Sao_Paulo"
    )
    await expect(page.locator("#form")).to_be_hidden()

    # Editing keeps the task and changes its schedule.
    await row.get_by_role("button", name="Edit Standup").click()
    await expect(page.locator("#f-cron")).to_have_value("0 8 * * 1-5")
    await page.fill("#f-cron", "30 9 * * 1")
    await page.get_by_role("button", name="Save").click()
    await expect(row.locator(".schedule")).to_contain_text("every Monday at 09:30")
    next_run = await row.locator(".next-run").text_content()
    assert next_run and datetime.strptime(next_run, "%Y-%m-%d %H:%M")
    await expect(page.locator("#tasks tr", has_text="Standup")).to_have_count(1)
