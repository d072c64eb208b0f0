"""The allowlist editor of the Settings page in headless Chromium, with the real
python-telegram-bot against the fake Telegram server: a stranger is refused, the owner adds
their id on the page and the stranger's next message is answered (no restart); a wrong id is
refused naming it, nothing changes; Remove and Reset to config. Screenshots at desktop and phone
width."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, expect

from tests.browser.conftest import needs_chromium
from tests.browser.screenshots import at_both_widths, screenshot_dir
from tests.browser.test_llm_setup import TOKEN, open_page
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text
from tests.fakes.telegram_server import FakeTelegramServer

pytestmark = needs_chromium

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
BOB = FakeTelegramServer.user(2002, "Bob", "bob")


async def test_an_id_added_on_the_settings_page_is_answered_from_its_next_message(
    browser: Browser, tmp_path: Path
) -> None:
    async with (
        FakeAnthropicServer(responder=lambda body: f"Claude: {last_user_text(body)}") as claude,
        FakeTelegramServer() as bot,
    ):
        telegram = {
            "enabled": True,
            "token": bot.token,
            "base_url": bot.base_url,
            "allowed_user_ids": [ALICE.id],
            "streaming": False,
        }
        config = make_config(
            tmp_path, claude.base_url, web={"auth_token": TOKEN}, channels={"telegram": telegram}
        )
        async with running_bruce(config) as bruce:
            bot.private_text(BOB, "hello?")
            [refused] = await bot.wait_for_messages(BOB.id, 1)
            assert "pairing code" in refused.text

            page, errors = await open_page(browser, bruce, "/settings")
            editor = page.locator("[data-allowlist=telegram]")
            await expect(editor).to_contain_text("From config.yml")
            await expect(editor.locator("[data-user-id='1001']")).to_be_visible()
            field = editor.get_by_label("Who may talk on Telegram")

            await field.fill("bob")
            await editor.get_by_role("button", name="Add").click()
            await expect(editor.get_by_role("status")).to_contain_text("'bob' is not a user id")
            await expect(editor).to_contain_text("From config.yml")

            await field.fill(str(BOB.id))
            await editor.get_by_role("button", name="Add").click()
            await expect(editor.get_by_role("status")).to_contain_text("Added 2002")
            await expect(editor).to_contain_text("Saved in the dashboard")
            await expect(editor.locator("[data-user-id='2002']")).to_be_visible()
            await at_both_widths(page, screenshot_dir(tmp_path), "settings-allowlist")

            bot.private_text(BOB, "now?")
            answered = await bot.wait_for_messages(BOB.id, 2)
            assert answered[1].text == "Claude: now?"

            await editor.locator("[data-user-id='1001']").get_by_role("button").click()
            await expect(editor.locator("[data-user-id='1001']")).to_have_count(0)
            await editor.get_by_role("button", name="Reset to config").click()
            await expect(editor).to_contain_text("From config.yml")
            await expect(editor.locator("[data-user-id='2002']")).to_have_count(0)
            await expect(page.locator("[data-allowlist=discord]")).to_contain_text(
                "Nobody (people approved by pairing still are)."
            )
            await page.context.close()
            assert errors == []
