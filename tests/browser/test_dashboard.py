"""The dashboard's pages in a real headless Chromium (playwright), over data made through the real
paths (chat turns with the fake Anthropic server calling tools, `artifact_save`, a task created
by the task service, a reply to a chat that blocked the bot): every page loads after login
without console errors and shows that data, the nav bar links them, Cancel, the settings editor
and the signed-in browsers list work, and markup in the data is shown as text, never run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.domain import SessionKey
from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.scheduler.service import job_id
from bruce_bot.settings.editable import SYSTEM_PROMPT_SETTING, TIMEZONE_SETTING
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.web.auth import COOKIE_NAME
from tests.browser.conftest import needs_chromium
from tests.conftest import wait_until
from tests.integration.dashboard_support import YAML_PROMPT, Dashboard, running_dashboard
from tests.integration.support import db_rows

pytestmark = needs_chromium


TOKEN = "0rNS1grzms8G94ADWW5b9i2CCD63qomfsX6rzKLkj-c"
TIMEOUT_MS = 20_000
SAO_PAULO = ZoneInfo("America/Sao_Paulo")
# Markup in data (a message, a tool's error, a task and an artifact title) must stay text.
INJECTION = '<img src=x onerror="window.__pwned = 1"><b>bold?</b>'
PAGES = [
    "Chat",
    "Sessions",
    "Schedules",
    "Artifacts",
    "Memory",
    "People",
    "Logs",
    "Settings",
    "Usage",
]
expect.set_options(timeout=TIMEOUT_MS)


@dataclass
class Seeded:
    dashboard: Dashboard
    task: TaskRecord
    tmp_path: Path


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[Seeded]:
    async with running_dashboard(tmp_path, TOKEN) as dashboard:
        bruce = dashboard.bruce
        assert bruce.stores is not None and bruce.tasks is not None
        await dashboard.chat("alice", f"hello {INJECTION}")
        await dashboard.use_tool("alice", "lookup", {"query": INJECTION})
        await dashboard.use_tool(
            "alice",
            "artifact_save",
            {"filename": "prices.html", "title": f"Prices {INJECTION}", "content": "<p>42</p>"},
        )
        session = await bruce.stores.sessions.get_or_create(SessionKey("chat", "alice"))
        task = await bruce.tasks.planner.create(
            NewTask(
                session_id=session.id,
                channel="chat",
                chat_id="alice",
                title=f"Call Ana {INJECTION}",
                mode="message",
                content="Call Ana about the trip",
                run_at="+3h",
                cron=None,
                timezone=None,
            )
        )
        dashboard.channel.refusing.add("gone")
        await dashboard.say("gone", "are you still there?")
        await wait_until(lambda: bruce.stores.deliveries.not_delivered(("failed",)))  # type: ignore[union-attr]
        yield Seeded(dashboard, task, tmp_path)


@pytest.fixture
async def page(browser: Browser, seeded: Seeded) -> AsyncIterator[Page]:
    context = await browser.new_context(
        base_url=seeded.dashboard.url, viewport={"width": 1280, "height": 800}
    )
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    tab.on(
        "console",
        lambda message: (
            errors.append(f"console: {message.text}") if message.type == "error" else None
        ),
    )
    yield tab
    pwned = await tab.evaluate("window.__pwned")
    await context.close()
    assert errors == [], f"errors in the browser: {errors}"
    assert pwned is None, "markup from the data ran in the page"


async def log_in(page: Page, path: str) -> None:
    await page.goto(path)
    assert "/login" in page.url
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"**{path}")


async def no_injected_markup(page: Page) -> None:
    assert await page.locator("main img").count() == 0
    assert await page.locator("main b").count() == 0


async def test_every_page_opens_from_the_nav_bar_after_login(page: Page) -> None:
    await log_in(page, "/sessions")
    for title in PAGES:
        await page.locator("nav.nav a", has_text=title).click()
        path = f"/{title.lower()}"
        await page.wait_for_url(f"**{path}")
        await expect(page).to_have_title(f"Bruce · {title}")
        current = page.locator('nav.nav a[aria-current="page"]')
        await expect(current).to_have_text(title)
        await expect(page.locator("nav.nav a")).to_have_count(len(PAGES))
        await expect(page.locator("#error")).to_have_text("")
    # Signing out ends the session: pages ask for the token again.
    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url("**/login")
    await page.goto("/usage")
    assert "/login" in page.url


async def test_sessions_lists_the_chat_and_opens_its_messages_as_text(page: Page) -> None:
    await log_in(page, "/sessions")
    row = page.locator("#sessions tr", has_text="alice")
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text("chat")
    await row.get_by_role("link").click()
    await page.wait_for_url("**/sessions?id=*")
    messages = page.locator("#messages .message")
    await expect(messages.first).to_contain_text(f"hello {INJECTION}")
    await expect(page.locator("#messages .message.assistant").first).to_contain_text(
        f"You said: hello {INJECTION}"
    )
    await expect(page.locator("#meta")).to_contain_text("chat · alice · last activity")
    await no_injected_markup(page)
    await page.get_by_role("link", name="← All sessions").click()
    await expect(page.locator("#sessions tr", has_text="alice")).to_have_count(1)


async def test_schedules_shows_the_task_in_the_app_timezone_and_cancel_works(
    page: Page, seeded: Seeded
) -> None:
    task = seeded.task
    assert task.next_run_at is not None
    await log_in(page, "/schedules")
    row = page.locator(f'tr[data-task-id="{task.id}"]')
    await expect(row).to_contain_text(f"Call Ana {INJECTION}")
    await expect(row).to_contain_text("Call Ana about the trip")
    local = task.next_run_at.astimezone(SAO_PAULO).strftime("%Y-%m-%d %H:%M")
    await expect(row.locator(".next-run")).to_have_text(local)
    await expect(row.locator(".badge")).to_have_text(["active"])
    await no_injected_markup(page)
    await row.get_by_role("button", name="Runs").click()
    await expect(page.locator("tr.runs")).to_contain_text("has not fired yet")
    await page.screenshot(path="/tmp/bruce-schedules.png", full_page=True)

    page.once("dialog", lambda dialog: dialog.accept())
    await row.get_by_role("button", name="Cancel").click()
    await expect(page.locator("#notice")).to_contain_text("Cancelled")
    await expect(row.locator(".badge")).to_have_text(["cancelled"])
    await expect(row.get_by_role("button", name="Cancel")).to_have_count(0)
    stores = seeded.dashboard.bruce.stores
    assert stores is not None
    cancelled = await stores.tasks.get(task.id)
    assert cancelled is not None and cancelled.status == "cancelled"
    jobs = {r["id"] for r in db_rows(seeded.tmp_path, "SELECT id FROM apscheduler_jobs")}
    assert job_id(task.id) not in jobs

    await page.select_option("#status", "active")
    await expect(page.locator("#tasks")).to_have_text("No active tasks.")


async def test_a_timezone_saved_in_settings_is_the_schedules_pages_at_once(
    page: Page, seeded: Seeded
) -> None:
    await log_in(page, "/settings")
    form = page.locator(f"form.setting[data-key='{TIMEZONE_SETTING}']")
    await form.locator("input.editor-line").fill("Asia/Tokyo")
    await form.get_by_role("button", name="Save").click()
    await expect(form.locator(".status-line")).to_contain_text("Saved")

    await page.goto("/schedules")
    assert seeded.task.next_run_at is not None
    tokyo = seeded.task.next_run_at.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%Y-%m-%d %H:%M")
    row = page.locator(f'tr[data-task-id="{seeded.task.id}"]')
    await expect(row.locator(".next-run")).to_have_text(tokyo)
    await expect(page.get_by_text("Next runs in Asia/Tokyo.")).to_be_visible()


async def test_a_dismissed_cancel_keeps_the_task(page: Page, seeded: Seeded) -> None:
    await log_in(page, "/schedules")
    row = page.locator(f'tr[data-task-id="{seeded.task.id}"]')
    page.once("dialog", lambda dialog: dialog.dismiss())
    await row.get_by_role("button", name="Cancel").click()
    await expect(row.locator(".badge")).to_have_text(["active"])
    stores = seeded.dashboard.bruce.stores
    assert stores is not None
    kept = await stores.tasks.get(seeded.task.id)
    assert kept is not None and kept.status == "active"


async def test_artifacts_links_to_the_saved_file(page: Page) -> None:
    await log_in(page, "/artifacts")
    link = page.locator("#artifacts a", has_text="Prices")
    await expect(link).to_have_text(f"Prices {INJECTION}")
    await expect(link).to_have_attribute("target", "_blank")
    href = await link.get_attribute("href")
    assert href is not None and href.startswith("/artifacts/") and href.endswith("/prices.html")
    await expect(page.locator("#artifacts tbody tr")).to_contain_text(["prices.html"])
    await expect(page.locator("#artifacts tbody tr")).to_contain_text(["chat · alice"])
    served = await page.request.get(href)
    assert served.status == 200 and await served.text() == "<p>42</p>"
    await no_injected_markup(page)


async def test_logs_highlight_tool_errors_and_list_the_refused_reply(page: Page) -> None:
    await log_in(page, "/logs")
    failed = page.locator("#executions tr.error")
    await expect(failed).to_have_count(1)
    await expect(failed).to_contain_text("lookup")
    await expect(failed).to_contain_text(f"the index is offline; could not look up {INJECTION}")
    await expect(page.locator("#executions tbody tr")).to_have_count(2)  # lookup, artifact_save

    delivery = page.locator("#deliveries tbody tr")
    await expect(delivery).to_have_count(1)
    await expect(delivery).to_contain_text("chat · gone")
    await expect(delivery).to_contain_text("Forbidden: bot was blocked by the user")
    await expect(delivery).to_contain_text("You said: are you still there?")
    await no_injected_markup(page)
    await page.screenshot(path="/tmp/bruce-logs.png", full_page=True)

    await page.check("#errors-only")
    await page.get_by_role("button", name="Apply").click()
    await expect(page.locator("#executions tbody tr")).to_have_count(1)
    assert "errors_only=true" in page.url
    await page.fill("#tool", "artifact_save")
    await page.get_by_role("button", name="Apply").click()
    await expect(page.locator("#executions")).to_have_text("No tool executions match.")


async def test_settings_saves_the_system_prompt_and_resets_it_to_the_config(
    page: Page, seeded: Seeded
) -> None:
    stores = seeded.dashboard.bruce.stores
    assert stores is not None
    await log_in(page, "/settings")
    # The system prompt's form (the page has the LLM's, the timezone's and max turns' too).
    form = page.locator(f"form.setting[data-key='{SYSTEM_PROMPT_SETTING}']")
    editor = form.locator("textarea.editor")
    await expect(editor).to_have_value(YAML_PROMPT)
    await expect(form.locator(".source")).to_contain_text("config.yml")
    reset = form.get_by_role("button", name="Reset to config")
    await expect(reset).to_be_disabled()

    await editor.fill("You are the dashboard's Bruce.")
    await form.get_by_role("button", name="Save").click()
    await expect(form.locator(".status-line")).to_contain_text("Saved")
    assert await stores.settings.get(SYSTEM_PROMPT_SETTING) == "You are the dashboard's Bruce."
    await page.reload()
    await expect(editor).to_have_value("You are the dashboard's Bruce.")
    await expect(form.locator(".source")).to_contain_text("Set here")

    await editor.fill("   ")
    await form.get_by_role("button", name="Save").click()
    await expect(page.locator("#error")).to_contain_text("The text is empty")
    assert await stores.settings.get(SYSTEM_PROMPT_SETTING) == "You are the dashboard's Bruce."

    page.once("dialog", lambda dialog: dialog.accept())
    await reset.click()
    await expect(editor).to_have_value(YAML_PROMPT)
    await expect(form.locator(".status-line")).to_contain_text("Reset")
    await expect(reset).to_be_disabled()
    assert await stores.settings.get(SYSTEM_PROMPT_SETTING) is None


async def test_settings_lists_the_signed_in_browsers_and_revokes_them(
    page: Page, seeded: Seeded
) -> None:
    async with httpx.AsyncClient(base_url=seeded.dashboard.url) as http:
        other = await http.post(
            "/login", data={"token": TOKEN}, headers={"User-Agent": f"curl/8.5.0 {INJECTION}"}
        )
        cookie = {"Cookie": f"{COOKIE_NAME}={other.cookies[COOKIE_NAME]}"}
        http.cookies.clear()
        await log_in(page, "/settings")
        rows = page.locator("#browsers tbody tr")
        await expect(rows).to_have_count(2)
        await expect(page.locator("#browsers-count")).to_have_text("(2)")
        mine = rows.filter(has=page.locator(".this-browser"))
        await expect(mine).to_contain_text("HeadlessChrome")
        await expect(mine).to_contain_text("127.0.0.1")
        theirs = rows.filter(has_text="curl/8.5.0")
        await expect(theirs).to_contain_text(INJECTION)  # a user agent is text, never markup
        await no_injected_markup(page)

        await theirs.get_by_role("button", name="Revoke").click()
        await expect(page.locator("#browsers-notice")).to_contain_text("Revoked: curl/8.5.0")
        await expect(rows).to_have_count(1)
        assert (await http.get("/api/sessions", headers=cookie)).status_code == 401

    # Revoking this browser signs it out.
    page.once("dialog", lambda dialog: dialog.accept())
    await mine.get_by_role("button", name="Revoke").click()
    await page.wait_for_url("**/login")
    await page.goto("/settings")
    assert "/login" in page.url


async def test_usage_shows_a_row_per_day_and_model(page: Page, seeded: Seeded) -> None:
    await log_in(page, "/usage")
    model = seeded.dashboard.bruce.config.llm.model
    row = page.locator("#usage tbody tr", has_text=model)
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text("agent")
    calls = len(seeded.dashboard.fake.requests)
    await expect(row.locator("td.num").first).to_have_text(str(calls))
    await expect(page.locator("#usage tfoot")).to_contain_text("Total, 30 days")
    await page.select_option("#days", "7")
    await expect(page.locator("#usage tfoot")).to_contain_text("Total, 7 days")


async def test_shared_assets_are_served_and_nothing_else_under_static(page: Page) -> None:
    for name, kind in (("dashboard.css", "text/css"), ("dashboard.js", "text/javascript")):
        response = await page.request.get(f"/static/{name}")
        assert response.status == 200
        assert response.headers["content-type"].startswith(kind)
    for name in ("chat.html", "login.html", "..%2Fapp.py", "missing.js"):
        response = await page.request.get(f"/static/{name}")
        assert response.status == 404, name


async def test_the_api_page_shows_every_route_with_its_parameters_and_schemas(
    page: Page,
) -> None:
    await log_in(page, "/sessions")
    await page.goto("/api/docs")
    await expect(page).to_have_title("Bruce · API")
    sessions = page.locator("#list_sessions")
    await expect(sessions).to_contain_text("GET /api/sessions")
    await expect(sessions.locator("tr", has_text="limit")).to_contain_text("integer ≥ 1 ≤ 500")
    await expect(sessions).to_contain_text("SessionList")
    await expect(page.locator("#revoke_web_session")).to_contain_text("public_id")
    await expect(page.locator("#schema-TaskAnswer")).to_contain_text("next_run")
    await expect(page.locator("#error")).to_have_text("")
