"""The Schedules page in headless Chromium: creating a reminder with the form (the chat chosen
among the sessions, a time in a chosen timezone), its next run counting down live, running it now
(the reminder reaches the chat and the last run shows as delivered, on time), a cron schedule
shown in words, pausing and resuming, a refused cron naming the field in the form, and a task
awaiting the user's confirmation shown as such; a watch (on a local page) with its target,
condition, interval in words, last check's verdict and reason, its runs, and cancelling it.
Screenshots at desktop and phone width."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.domain import SessionKey, utcnow
from bruce_bot.scheduler.new_task import NewTask, NewWatch
from tests.browser.conftest import needs_chromium
from tests.browser.screenshots import DESKTOP, at_both_widths, screenshot_dir
from tests.conftest import wait_until
from tests.fakes.web_server import FakeWebServer
from tests.integration.dashboard_support import Dashboard, running_dashboard

pytestmark = needs_chromium

TOKEN = "Zq3Wm1Kc7Rt2Lp9Zx4Nv8Bd5Hs6Fg1Jk-AeUiOoPuR"
TIMEOUT_MS = 20_000
LISBON = ZoneInfo("Europe/Lisbon")
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
async def web() -> AsyncIterator[FakeWebServer]:
    async with FakeWebServer() as server:
        server.extra_pages["/tickets"] = ("text/html", "<p>On sale now: 40 EUR.</p>")
        yield server


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    # The watch's page is on 127.0.0.1: the fetcher may reach loopback here.
    loopback = {"web_fetch": {"allow_private_addresses": True}}
    async with running_dashboard(tmp_path, TOKEN, tools=loopback) as running:
        await running.chat("alice", "hello")
        await running.chat("bob", "hi")
        stores, tasks = running.bruce.stores, running.bruce.tasks
        assert stores is not None and tasks is not None
        session = await stores.sessions.find(SessionKey("chat", "bob"))
        assert session is not None
        await tasks.planner.create(
            NewTask(
                session_id=session.id,
                channel="chat",
                chat_id="bob",
                title="Fetch the news page",
                mode="agent",
                content="Fetch https://example.com/news",
                run_at="+5h",
                confirmed=False,
            )
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


async def test_a_watch_shows_what_it_checks_and_its_last_result_and_can_be_cancelled(
    page: Page, dashboard: Dashboard, web: FakeWebServer, tmp_path: Path
) -> None:
    bruce = dashboard.bruce
    assert bruce.tasks is not None and bruce.stores is not None
    session = await bruce.stores.sessions.get_or_create(SessionKey("chat", "alice"))
    verdict = {"verdict": "MATCH", "reason": "tickets are on sale for 40 EUR"}
    dashboard.fake.script(tool_calls=[("watch_verdict", verdict)])  # the first check's answer
    task = await bruce.tasks.planner.create_watch(
        NewWatch(
            session_id=session.id,
            channel="chat",
            chat_id="alice",
            title="Concert tickets",
            condition="tickets are on sale",
            interval="every 2 hours",
            url=f"{web.url}/tickets",
        )
    )
    alert = f"🔔 Watch «Concert tickets»: “tickets are on sale” — {verdict['reason']}"
    await wait_until(lambda: any(t.startswith(alert) for t in dashboard.channel.texts("alice")))

    await log_in(page, "/schedules")
    row = page.locator(f"#task-{task.id}")
    await expect(row.locator(".watch-target")).to_have_text(f"watches {web.url}/tickets")
    await expect(row.locator(".watch-condition")).to_have_text("for “tickets are on sale”")
    await expect(row.locator(".schedule")).to_have_text("checks every 2 hours")
    await expect(row.locator(".last-run .badge")).to_have_text("MATCH")
    await expect(row.locator(".verdict-reason")).to_have_text(verdict["reason"])
    await expect(row.locator(".countdown")).to_have_text(re.compile(r"^in 1 h 5\d min$"))
    await expect(row.get_by_role("button", name="Edit Concert tickets")).to_have_count(0)
    await row.get_by_role("button", name="Runs of Concert tickets").click()
    runs = page.locator("tr.runs")
    await expect(runs).to_contain_text("checked")
    await expect(runs).to_contain_text(f"MATCH {verdict['reason']}")
    await at_both_widths(page, screenshot_dir(tmp_path), "schedules-watch")

    page.once("dialog", lambda dialog: dialog.accept())
    await row.get_by_role("button", name="Cancel Concert tickets").click()
    await expect(page.locator("#notice")).to_contain_text('Cancelled "Concert tickets"')
    await expect(row.locator(".status .badge")).to_have_text("cancelled")
