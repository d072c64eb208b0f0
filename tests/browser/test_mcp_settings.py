"""The MCP servers on the Settings page in a real headless Chromium: one server that came up (its
tools, one of them denied and so not offered) and one that never started (failed, with the tail
of its stderr). Screenshots at desktop and phone width (tests/browser/screenshots.py)."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, expect

from tests.browser.conftest import needs_chromium
from tests.browser.screenshots import at_both_widths, screenshot_dir
from tests.browser.test_llm_setup import TIMEOUT_MS
from tests.integration.dashboard_support import running_dashboard
from tests.integration.tools.test_mcp import TOKEN, failing_server, stdio_server, wait_for_state

pytestmark = needs_chromium
expect.set_options(timeout=TIMEOUT_MS)


async def test_the_settings_page_shows_each_mcp_servers_state_and_tools(
    browser: Browser, tmp_path: Path
) -> None:
    servers = {
        "notes": stdio_server(tools={"deny": ["secret_note"]}),
        "github": failing_server("GITHUB_TOKEN is not set"),
    }
    async with running_dashboard(tmp_path, TOKEN, mcp={"servers": servers}) as dash:
        await wait_for_state(dash, "notes", "ready")
        await wait_for_state(dash, "github", "failed")
        context = await browser.new_context(
            base_url=dash.url, viewport={"width": 1280, "height": 800}
        )
        context.set_default_timeout(TIMEOUT_MS)
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto("/settings")
        await page.fill("#token", TOKEN)
        await page.click("button[type=submit]")

        notes = page.locator('[data-mcp-server="notes"]')
        await expect(notes.locator("[data-state]")).to_have_text("ready")
        await expect(notes.locator('[data-mcp-tool="notes__echo"]')).to_contain_text("offered")
        denied = notes.locator('[data-mcp-tool="notes__secret_note"]')
        await expect(denied).to_contain_text("not offered: denied by mcp.servers.notes.tools.deny")
        github = page.locator('[data-mcp-server="github"]')
        await expect(github.locator("[data-state]")).to_have_text("failed")
        await expect(github.locator(".mcp-error")).to_contain_text("GITHUB_TOKEN is not set")
        await expect(page.locator("#mcp-count")).to_have_text("(2)")
        await page.locator("#mcp-section").scroll_into_view_if_needed()
        await at_both_widths(page, screenshot_dir(tmp_path), "settings-mcp")
        await context.close()
    assert errors == [], errors
