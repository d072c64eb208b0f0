"""The first-run setup card on the chat page and the Language model section of the Settings page
in headless Chromium: a local OpenAI-compatible server (the fake) picked, its models listed from
its `/v1/models`, saved, and the next chat message answered by it, with no restart; a key the
server refuses is shown with the server's words and nothing is saved. Screenshots at desktop and
phone width."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.app import Bruce
from tests.browser.conftest import needs_chromium
from tests.browser.screenshots import at_both_widths, screenshot_dir
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.anthropic_server import last_user_text as anthropic_text
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.openai_server import last_user_text as openai_text
from tests.fakes.telegram_server import BOT_USERNAME, FakeTelegramServer

pytestmark = needs_chromium

TOKEN = "browser-test-token-llm-5c2a"
LOCAL_KEY = "sk-local-0000111122223333"
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
async def local() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(
        responder=lambda body: f"Local model: {openai_text(body).splitlines()[0]}"
    ) as server:
        server.models = ["qwen3:8b", "llama3.2:3b"]
        yield server


async def open_page(browser: Browser, bruce: Bruce, path: str) -> tuple[Page, list[str]]:
    context = await browser.new_context(
        base_url=bruce.web_url, viewport={"width": 1280, "height": 800}
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(path)
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    return page, errors


async def send(page: Page, text: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")


async def test_the_setup_card_connects_a_local_server_and_the_next_message_is_answered(
    browser: Browser, local: FakeOpenAIServer, tmp_path: Path
) -> None:
    config = make_config(tmp_path, web={"auth_token": TOKEN}, llm={"api_key": ""})
    async with running_bruce(config) as bruce:
        page, errors = await open_page(browser, bruce, "/chat")
        card = page.locator("#setup-llm")
        await expect(page.locator("#setup")).to_be_visible()
        await card.get_by_label("Provider").select_option("local")
        # Ollama's address comes prefilled; the fake listens elsewhere.
        await expect(card.get_by_label("Base URL")).to_have_value("http://127.0.0.1:11434/v1")
        await card.get_by_label("Base URL").fill(local.base_url)
        await card.get_by_role("button", name="List models").click()
        await expect(card.get_by_role("status")).to_contain_text("llama3.2:3b, qwen3:8b")
        await expect(card.get_by_label("Model")).to_have_value("llama3.2:3b")
        await at_both_widths(page, screenshot_dir(tmp_path), "chat-setup-card")

        await card.get_by_role("button", name="Save").click()
        await expect(page.locator("#setup")).to_be_hidden()
        await send(page, "hello there")
        await expect(page.locator("#log")).to_contain_text("Local model: hello there")
        assert local.requests[-1]["model"] == "llama3.2:3b"
        await page.context.close()
        assert errors == []


async def test_the_settings_page_changes_the_provider_live_and_refuses_a_wrong_key(
    browser: Browser, local: FakeOpenAIServer, tmp_path: Path
) -> None:
    local.api_key = LOCAL_KEY
    async with (
        FakeAnthropicServer(responder=lambda body: f"Claude: {anthropic_text(body)}") as claude,
        FakeTelegramServer() as bot,
    ):
        config = make_config(
            tmp_path,
            claude.base_url,
            web={"auth_token": TOKEN},
            channels={"telegram": {"token": "", "base_url": bot.base_url}},
        )
        async with running_bruce(config) as bruce:
            page, errors = await open_page(browser, bruce, "/settings")
            form = page.locator("#llm")
            await expect(form.locator("[data-field=provider]")).to_contain_text("config.yml")
            await form.get_by_label("Provider").select_option("local")
            await form.get_by_label("Base URL").fill(local.base_url)
            await form.get_by_label("Model", exact=True).fill("qwen3:8b")
            await form.get_by_label("API key").fill("sk-wrong-999999999999")
            await form.get_by_role("button", name="Save").click()
            status = form.get_by_role("status")
            await expect(status).to_contain_text("not saved, the old settings stay")
            await expect(status).to_contain_text("Incorrect API key provided")
            await at_both_widths(page, screenshot_dir(tmp_path), "settings-llm-refused")

            await form.get_by_label("API key").fill(LOCAL_KEY)
            await form.get_by_role("button", name="Test connection").click()
            await expect(status).to_contain_text("✓ openai / qwen3:8b answers")
            await form.get_by_role("button", name="Save").click()
            await expect(status).to_contain_text("Saved: openai / qwen3:8b")
            await expect(form.get_by_label("API key")).to_have_attribute(
                "placeholder", "sk-…3333 (unchanged)"
            )
            await expect(form.locator("[data-field=model]")).to_contain_text("dashboard")
            assert LOCAL_KEY not in await page.content()
            await at_both_widths(page, screenshot_dir(tmp_path), "settings-llm-saved")

            # A Telegram token is tried with getMe; a wrong one is told as Telegram said it.
            telegram = page.locator("[data-channel=telegram]")
            await telegram.get_by_label("Telegram bot token").fill("1:WRONG")
            await telegram.get_by_role("button", name="Test connection").click()
            await expect(telegram.get_by_role("status")).to_contain_text(
                "Telegram refused the token"
            )
            await telegram.get_by_label("Telegram bot token").fill(bot.token)
            await telegram.get_by_role("button", name="Test connection").click()
            await expect(telegram.get_by_role("link")).to_have_attribute(
                "href", f"https://t.me/{BOT_USERNAME}"
            )

            await page.goto("/chat")
            await expect(page.locator("#setup")).to_be_hidden()
            await send(page, "who is this?")
            await expect(page.locator("#log")).to_contain_text("Local model: who is this?")
            await page.context.close()
            assert errors == []


async def test_the_settings_page_saves_a_new_telegram_token_and_the_channel_reconnects(
    browser: Browser, tmp_path: Path
) -> None:
    alice = FakeTelegramServer.user(1001, "Alice", "alice")
    async with (
        FakeAnthropicServer(responder=lambda body: f"Claude: {anthropic_text(body)}") as claude,
        FakeTelegramServer(token="111:OLD-token-aaaa") as bot,
    ):
        telegram = {
            "enabled": True,
            "token": bot.token,
            "base_url": bot.base_url,
            "allowed_user_ids": [alice.id],
            "streaming": False,
        }
        config = make_config(
            tmp_path, claude.base_url, web={"auth_token": TOKEN}, channels={"telegram": telegram}
        )
        async with running_bruce(config) as bruce:
            page, errors = await open_page(browser, bruce, "/settings")
            section = page.locator("[data-channel=telegram]")
            await expect(section).to_contain_text("In use: 111…aaaa (from config.yml)")
            bot.token = "222:NEW-token-bbbb"  # revoked at @BotFather, a new one issued
            await section.get_by_label("Telegram bot token").fill(bot.token)
            await section.get_by_role("button", name="Save and reconnect").click()
            await expect(section.get_by_role("status")).to_contain_text(
                f"Reconnected as @{BOT_USERNAME}"
            )
            await expect(section).to_contain_text("In use: 222…bbbb (set in the dashboard)")
            await at_both_widths(page, screenshot_dir(tmp_path), "settings-telegram-token")

            bot.private_text(alice, "still there?")
            [reply] = await bot.wait_for_messages(alice.id, 1)
            assert reply.text.startswith("Claude: still there?")
            await page.context.close()
            assert errors == []
