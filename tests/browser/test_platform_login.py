"""The chat page's setup card in headless Chromium lists every platform of the registry, each
with the login form its fields describe (`GET /api/platforms`): Matrix's homeserver, user id and
password are filled in and saved, and the channel connects to a real Synapse with them, no
restart; the password is never put back into the page. Settings draws the same form."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, expect

from bruce_bot.tools.registry import ToolRegistry
from tests.browser.conftest import needs_chromium
from tests.browser.screenshots import at_both_widths, screenshot_dir
from tests.browser.test_llm_setup import TOKEN, open_page
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.channels.synapse import Synapse
from tests.integration.channels.test_matrix import (
    fresh,
    synapse,  # noqa: F401 (the fixture)
)

pytestmark = needs_chromium


async def test_the_setup_card_lists_matrix_and_its_login_connects_it(
    browser: Browser,
    tmp_path: Path,
    anthropic_fake: FakeAnthropicServer,
    synapse: Synapse,  # noqa: F811 (the fixture)
) -> None:
    bot = fresh(synapse, "bruce")
    config = make_config(
        tmp_path,
        anthropic_fake.base_url,
        web={"auth_token": TOKEN},
        llm={"api_key": ""},  # no model yet: the chat page shows the setup card
        channels={"matrix": {"enabled": True}},
    )
    async with running_bruce(config, tools=ToolRegistry()) as bruce:
        page, errors = await open_page(browser, bruce, "/chat")
        card = page.locator("#setup-channels")
        await expect(page.locator("#setup")).to_be_visible()
        for name in ("telegram", "discord", "matrix"):
            await expect(card.locator(f"[data-channel={name}]")).to_be_visible()
        await expect(
            card.locator("[data-channel=telegram]").get_by_label("Telegram bot token")
        ).to_be_visible()

        matrix = card.locator("[data-channel=matrix]")
        await expect(matrix).to_contain_text("No login yet: Matrix starts once you save one.")
        await expect(matrix.get_by_label("Matrix password (optional)")).to_have_attribute(
            "type", "password"
        )
        await matrix.get_by_label("Matrix homeserver").fill(synapse.url)
        await matrix.get_by_label("Matrix user id").fill(bot.user_id)
        await matrix.get_by_label("Matrix password (optional)").fill("not-the-password")
        await matrix.get_by_role("button", name="Save and reconnect").click()
        status = matrix.get_by_role("status")
        await expect(status).to_contain_text("not saved, the old login stays")

        await matrix.get_by_label("Matrix password (optional)").fill(bot.password)
        await matrix.get_by_role("button", name="Save and reconnect").click()
        await expect(status).to_contain_text(f"Reconnected as {bot.user_id}")
        await expect(matrix).to_contain_text(f"homeserver {synapse.url}")
        await expect(matrix).to_contain_text("(set in the dashboard)")
        await expect(matrix.get_by_label("Matrix password (optional)")).to_have_value("")
        await expect(matrix.get_by_label("Matrix homeserver")).to_have_value(synapse.url)
        await wait_until(lambda: bruce.channels["matrix"].connected, timeout=20)  # type: ignore[attr-defined]
        assert bot.password not in await page.content()
        await at_both_widths(page, screenshot_dir(tmp_path), "chat-setup-matrix")

        # Settings draws the same form, with the login in use.
        await page.goto("/settings")
        settings = page.locator("#channels [data-channel=matrix]")
        await expect(settings.get_by_label("Matrix user id")).to_have_value(bot.user_id)
        await expect(settings.get_by_label("Matrix password (optional)")).to_have_attribute(
            "placeholder", "sec…word (unchanged)"
        )
        await settings.get_by_role("button", name="Test connection").click()
        await expect(settings.get_by_role("status")).to_contain_text(f"logged in as {bot.user_id}")
        await page.context.close()
        assert errors == [], errors
