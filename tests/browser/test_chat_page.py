"""The dashboard's chat page in a real headless Chromium (playwright): login, sending with Enter,
the user's bubble and Bruce's reply (from the fake Anthropic server), links rendered as anchors,
and HTML in messages shown as text, never injected into the page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.app import Bruce
from tests.browser.conftest import needs_chromium
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text

pytestmark = needs_chromium


TOKEN = "browser-test-token-7d1e"
SCREENSHOT = Path("/tmp/bruce-chat.png")
REPORT_URL = "https://example.com/reports/42"
INJECTION = '<img src=x onerror="window.__pwned = 1"><b>bold?</b>'
MARKDOWN_REPLY = (
    "**Top story** is *big* news: see [the source](https://example.com/s) and run `pip install`:\n"
    "```python\nprint('<b>not bold</b>')\n```\nDone."
)
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)


def reply_to(body: dict[str, Any]) -> str:
    text = last_user_text(body)
    if "report" in text:
        return f"Your report is ready: {REPORT_URL} (open it in a new tab)."
    if "markdown" in text:
        return MARKDOWN_REPLY
    return f"You said: {text}"


@pytest.fixture
async def bruce(tmp_path: Path) -> AsyncIterator[Bruce]:
    async with FakeAnthropicServer(responder=reply_to) as fake:
        config = make_config(tmp_path, fake.base_url, web={"auth_token": TOKEN})
        async with running_bruce(config) as running:
            yield running


@pytest.fixture
async def page(browser: Browser, bruce: Bruce) -> AsyncIterator[Page]:
    context = await browser.new_context(
        base_url=bruce.web_url, viewport={"width": 900, "height": 640}
    )
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    await context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


async def log_in(page: Page) -> None:
    await page.goto("/chat")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await expect(page.locator("#composer")).to_be_visible()


async def send(page: Page, text: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")


async def test_opening_the_chat_without_a_session_lands_on_the_login_page(page: Page) -> None:
    await page.goto("/chat")
    assert page.url.split("?")[0].endswith("/login")
    await expect(page.locator("#token")).to_be_visible()
    await expect(page.locator("#composer")).to_have_count(0)


async def test_a_wrong_token_shows_an_error_on_the_login_page(page: Page) -> None:
    await page.goto("/chat")
    await page.fill("#token", "not-the-token")
    await page.click("button[type=submit]")
    await expect(page.locator("#error")).to_contain_text("Wrong token")
    assert "/login" in page.url
    await expect(page.locator("#composer")).to_have_count(0)


async def test_logging_in_with_the_token_shows_the_chat(page: Page) -> None:
    await log_in(page)
    assert page.url.endswith("/chat")
    await expect(page.locator("#text")).to_be_editable()
    cookies = await page.context.cookies()
    session = next(c for c in cookies if c["name"] == "bruce_session")
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Strict"
    assert TOKEN not in session["value"]


async def test_enter_sends_the_message_and_the_reply_appears_as_an_assistant_bubble(
    page: Page,
) -> None:
    await log_in(page)
    await send(page, "hello from the browser")
    user = page.locator(".msg.user")
    await expect(user).to_have_count(1)
    await expect(user).to_have_text("hello from the browser")
    assistant = page.locator(".msg.assistant")
    await expect(assistant).to_have_count(1)
    await expect(assistant).to_have_text("You said: hello from the browser")
    await expect(page.locator("#text")).to_have_value("")
    await expect(page.locator("#typing")).to_have_text("")

    # Shift+Enter makes a new line instead of sending.
    await page.fill("#text", "line one")
    await page.press("#text", "Shift+Enter")
    await page.keyboard.type("line two")
    await expect(page.locator("#text")).to_have_value("line one\nline two")
    await page.press("#text", "Enter")
    await expect(page.locator(".msg.assistant")).to_have_count(2)
    await expect(page.locator(".msg.user").nth(1)).to_have_text("line one\nline two")
    await page.screenshot(path=str(SCREENSHOT), full_page=True)


async def test_a_link_in_the_reply_is_rendered_as_an_anchor(page: Page) -> None:
    await log_in(page)
    await send(page, "make me a report please")
    link = page.locator(".msg.assistant a")
    await expect(link).to_have_count(1)
    await expect(link).to_have_attribute("href", REPORT_URL)
    await expect(link).to_have_attribute("target", "_blank")
    await expect(link).to_have_attribute("rel", "noopener noreferrer")
    await expect(page.locator(".msg.assistant")).to_contain_text("(open it in a new tab).")


async def test_markdown_in_a_reply_is_rendered_safely(page: Page) -> None:
    await log_in(page)
    await send(page, "show me **markdown** please")
    reply = page.locator(".msg.assistant")
    await expect(reply.locator("strong")).to_have_text("Top story")
    await expect(reply.locator("em")).to_have_text("big")
    await expect(reply.locator("a")).to_have_attribute("href", "https://example.com/s")
    await expect(reply.locator("a")).to_have_text("the source")
    await expect(reply.locator("p code, code").first).to_have_text("pip install")
    await expect(reply.locator("pre code")).to_have_text("print('<b>not bold</b>')")
    assert await reply.locator("b").count() == 0  # HTML inside code stays text
    # The user's own message is shown as typed: no formatting applied to it.
    await expect(page.locator(".msg.user")).to_have_text("show me **markdown** please")
    assert await page.locator(".msg.user strong").count() == 0


async def test_html_in_messages_is_shown_as_text_not_injected(page: Page) -> None:
    await log_in(page)
    await send(page, INJECTION)
    await expect(page.locator(".msg.user")).to_have_text(INJECTION)
    await expect(page.locator(".msg.assistant")).to_have_text(f"You said: {INJECTION}")
    assert await page.locator("#log img").count() == 0
    assert await page.locator("#log b").count() == 0
    assert await page.evaluate("window.__pwned") is None


async def test_history_is_shown_again_after_a_reload(page: Page) -> None:
    await log_in(page)
    await send(page, "remember this")
    await expect(page.locator(".msg.assistant")).to_have_count(1)
    await page.reload()
    await expect(page.locator(".msg")).to_have_count(2)
    await expect(page.locator(".msg.user")).to_have_text("remember this")


async def test_a_refused_or_failed_send_keeps_the_text_and_says_why(page: Page) -> None:
    await log_in(page)

    async def refuse(route: Any) -> None:
        if route.request.method == "POST":
            await route.fulfill(
                status=503,
                content_type="application/json",
                body='{"error": "Bruce is shutting down; try again in a moment"}',
            )
        else:
            await route.fallback()

    await page.route("**/api/chat/messages*", refuse)
    await send(page, "are you there?")
    await expect(page.locator("#error")).to_have_text(
        "Bruce is shutting down; try again in a moment"
    )
    await expect(page.locator("#text")).to_have_value("are you there?")

    await page.unroute("**/api/chat/messages*")

    async def cut(route: Any) -> None:
        if route.request.method == "POST":
            await route.abort("connectionrefused")
        else:
            await route.fallback()

    await page.route("**/api/chat/messages*", cut)
    await send(page, "still there?")
    await expect(page.locator("#error")).to_contain_text("not sent")
    await expect(page.locator("#text")).to_have_value("still there?")

    await page.unroute("**/api/chat/messages*")
    await page.press("#text", "Enter")
    await expect(page.locator(".msg.assistant")).to_have_text("You said: still there?")
    await expect(page.locator("#error")).to_have_text("")
    await expect(page.locator(".msg.user")).to_have_count(1)
