"""The Memory page in a real headless Chromium: memories made in chat turns (the fake model calls
memory_save) are listed per person, edited in place and deleted, and what is typed there is what
Bruce keeps; markup in a memory stays text, and a secret typed into one is refused on the page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.browser.conftest import needs_chromium
from tests.integration.dashboard_support import Dashboard, running_dashboard
from tests.integration.support import db_rows

pytestmark = needs_chromium

TOKEN = "Qk0pYc3Lw9-memory-page-token-1vX8sZr2Jt5nB"
TIMEOUT_MS = 20_000
MARKUP = '<img src=x onerror="window.__pwned = 1">'
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        await running.use_tool(
            "alice", "memory_save", {"text": "Lives in Lisbon", "tags": ["home"]}
        )
        await running.use_tool("alice", "memory_save", {"text": f"Likes tags like {MARKUP}"})
        await running.use_tool("bob", "memory_save", {"text": "Plays the cello"})
        yield running


@pytest.fixture
async def page(browser: Browser, dashboard: Dashboard) -> AsyncIterator[Page]:
    context = await browser.new_context(base_url=dashboard.url)
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    yield tab
    pwned = await tab.evaluate("window.__pwned")
    await context.close()
    assert errors == [], errors
    assert pwned is None, "markup from a memory ran in the page"


async def test_the_memory_page_reads_edits_and_deletes_a_persons_memories(
    page: Page, dashboard: Dashboard, tmp_path: Path
) -> None:
    await page.goto("/memory")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/memory")
    people = page.locator("#people tbody tr")
    await expect(people).to_have_count(2)
    await expect(page.locator("#memories tbody tr")).to_have_count(3)  # everyone's at first

    await expect(page.locator("#link-form")).to_be_visible()  # two owners: they may be linked
    await page.get_by_role("button", name="Show the memories of chat:alice").click()
    await expect(page.locator("#memories-title")).to_contain_text("Memories of alice (chat:alice)")
    rows = page.locator("#memories tbody tr")
    await expect(rows).to_have_count(2)
    await expect(page.get_by_label("Text of memory 2")).to_have_value(f"Likes tags like {MARKUP}")
    assert await page.locator("main img").count() == 0

    text = page.get_by_label("Text of memory 1")
    await expect(text).to_have_value("Lives in Lisbon")
    await expect(page.get_by_label("Tags of memory 1")).to_have_value("home")
    await text.fill("Lives in Porto since May")
    await page.get_by_label("Tags of memory 1").fill("home, city")
    await page.get_by_role("button", name="Save memory 1").click()
    await expect(page.locator("#notice")).to_have_text("Saved memory #1.")
    [row] = db_rows(tmp_path, "SELECT content, tags FROM memories WHERE id = 1")
    assert (row["content"], row["tags"]) == ("Lives in Porto since May", '["home", "city"]')

    await text.fill("Door code: 4471")  # a secret is refused, and the memory kept as it was
    await page.get_by_role("button", name="Save memory 1").click()
    await expect(page.locator("#error")).to_contain_text("looks like a password or PIN")
    [row] = db_rows(tmp_path, "SELECT content FROM memories WHERE id = 1")
    assert row["content"] == "Lives in Porto since May"

    page.once("dialog", lambda dialog: dialog.accept())
    await page.get_by_role("button", name="Delete memory 2").click()
    await expect(page.locator("#notice")).to_have_text("Deleted memory #2.")
    await expect(rows).to_have_count(1)
    assert [r["id"] for r in db_rows(tmp_path, "SELECT id FROM memories ORDER BY id")] == [1, 3]
    # What the page keeps is what the next turn shows the model.
    await dashboard.chat("alice", "where do I live?")
    assert "Lives in Porto since May" in str(dashboard.fake.requests[-1]["messages"])
