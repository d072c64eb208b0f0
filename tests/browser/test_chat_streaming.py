"""Live replies in the dashboard's chat page, in a real headless Chromium (playwright): the answer
appears while the fake Anthropic server streams it, a tool's status line shows in between, and
the stored reply then takes the live bubble's place, once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.app import Bruce
from tests.browser.conftest import needs_chromium
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer

pytestmark = needs_chromium

TOKEN = "browser-test-token-live-51c2"
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)
REPORT = "<html><body><h1>Rain in Lisbon</h1></body></html>"
ANSWER = (
    "Lisbon will be **rainy** on Monday and Tuesday, sunny from Wednesday on, and warm again "
    "by the weekend: take an umbrella for the first two days."
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as server:
        yield server


@pytest.fixture
async def bruce(tmp_path: Path, fake: FakeAnthropicServer) -> AsyncIterator[Bruce]:
    config = make_config(tmp_path, fake.base_url, web={"auth_token": TOKEN})
    async with running_bruce(config) as running:
        yield running


@pytest.fixture
async def page(browser: Browser, bruce: Bruce) -> AsyncIterator[Page]:
    context = await browser.new_context(base_url=bruce.web_url)
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    await tab.goto("/chat")
    await tab.fill("#token", TOKEN)
    await tab.click("button[type=submit]")
    await expect(tab.locator("#composer")).to_be_visible()
    yield tab
    await context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


async def test_the_answer_appears_while_it_is_written_then_the_stored_reply_replaces_it(
    page: Page, fake: FakeAnthropicServer
) -> None:
    fake.script(
        "Let me write that down.",
        tool_calls=[
            ("artifact_save", {"filename": "lisbon.html", "title": "L", "content": REPORT})
        ],
    )
    fake.script(ANSWER, delay_seconds=0.5)  # the model thinks a moment after the tool
    fake.stream_pause_seconds = 0.08  # and writes over a second or two, as models do
    live = page.locator(".msg.assistant.live")
    final = page.locator(".msg.assistant:not(.live)")

    await page.fill("#text", "how will the weather be in Lisbon?")
    await page.press("#text", "Enter")

    await expect(live).to_contain_text("Let me")  # the model's first words, before it is done
    await expect(live).to_have_text("💾 Saving lisbon.html …")  # while the tool runs
    await expect(live).to_contain_text("Lisbon will be rainy")  # the answer, growing
    partial = await live.text_content()
    assert partial is not None and len(partial) < len(ANSWER.replace("**", ""))
    assert await final.count() == 0  # still being written
    await expect(final).to_have_count(1)
    await expect(final).to_have_text(ANSWER.replace("**", ""))
    await expect(final.locator("strong")).to_have_text("rainy")  # Markdown, as every reply
    await expect(live).to_have_count(0)  # the live bubble is gone: one reply on the page
