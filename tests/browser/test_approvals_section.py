"""The Sessions page's "Waiting for your approval" section in headless Chromium: a run waiting for
the user's answer is listed with its whole code and why it was asked; Run answers it (recorded as
the dashboard's answer) and the section goes; the code is shown as text, never as markup."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.agent.asking import APPROVED
from bruce_bot.domain import SessionKey
from bruce_bot.storage.approvals import ASKING
from tests.browser.conftest import needs_chromium
from tests.integration.dashboard_support import Dashboard, running_dashboard
from tests.integration.support import db_rows

pytestmark = needs_chromium

TOKEN = "Aq7Wm2Kc9Rt4Lp1Zx8Nv3Bd6Hs0Fg5Jk-AeUiOoPuW"
TIMEOUT_MS = 20_000
CODE = 'print("<img src=x onerror=window.__pwned=1>")'
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        await running.chat("alice", "hello")
        stores = running.bruce.stores
        assert stores is not None
        session = await stores.sessions.find(SessionKey("chat", "alice"))
        assert session is not None
        await stores.approvals.hold(
            session.id,
            "run_code",
            CODE,
            reason="this turn read outside content (web_fetch)",
            origin="m1|run_code|x",
            person="chat:alice",
            task_run=False,
            status=ASKING,
        )
        yield running


@pytest.fixture
async def page(browser: Browser, dashboard: Dashboard) -> AsyncIterator[Page]:
    context = await browser.new_context(base_url=dashboard.url)
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield tab
    await context.close()
    assert errors == [], f"errors in the browser: {errors}"


async def test_a_waiting_run_is_listed_and_run_answers_it(
    page: Page, dashboard: Dashboard, tmp_path: Path
) -> None:
    await page.goto("/sessions")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/sessions")
    section = page.locator("#approvals-section")
    await expect(section).to_be_visible()
    await expect(section.locator("pre")).to_have_text(CODE)
    await expect(section).to_contain_text("web_fetch")
    await section.get_by_role("button", name="Run").click()
    await expect(page.locator("#approvals-notice")).to_have_text(APPROVED)
    await expect(section).to_be_hidden()
    assert await page.evaluate("window.__pwned") is None
    (row,) = db_rows(tmp_path, "SELECT status, result FROM pending_actions")
    assert (row["status"], row["result"]) == ("approved", "dashboard")
