"""The People page in a real headless Chromium: a stranger on Telegram (the real
python-telegram-bot against the fake Bot API) is given a pairing code, the owner approves it on
the page, and the stranger's next message is answered; the page lists who is allowed (from
config.yml, not revocable; approved, with Revoke). Screenshots at desktop and phone width go to
$BRUCE_SCREENSHOTS, or the test's tmp_path."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.browser.conftest import needs_chromium
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.channels.test_pairing import ALICE, MALLORY, TOKEN, WITHIN, Running, running

pytestmark = needs_chromium

TIMEOUT_MS = 20_000
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
async def bruce(tmp_path: Path, anthropic_fake: FakeAnthropicServer) -> AsyncIterator[Running]:
    async with running(tmp_path, anthropic_fake) as it:
        yield it


@pytest.fixture
async def page(browser: Browser, bruce: Running) -> AsyncIterator[Page]:
    context = await browser.new_context(base_url=bruce.url, viewport=DESKTOP)
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    yield tab
    await context.close()
    assert errors == [], errors


def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("BRUCE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def test_approving_a_code_on_the_people_page_lets_the_stranger_in(
    page: Page, bruce: Running, tmp_path: Path
) -> None:
    telegram = bruce.telegram
    telegram.private_text(MALLORY, "hello, may I talk to you?")
    code, _ = await bruce.code_for(MALLORY)

    await page.goto("/people")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/people")
    await expect(page.locator("nav [aria-current=page]")).to_have_text("People")
    row = page.locator(f'#pending tr[data-code="{code}"]')
    await expect(row).to_contain_text("6666 @mallory — name they chose: “Mallory”")
    await expect(row).to_contain_text("telegram")
    await expect(page.locator("#pairing-state")).to_contain_text("telegram")
    alice = page.locator(f'#people tr[data-person="telegram:{ALICE.id}"]')
    await expect(alice).to_contain_text("config.yml")
    await expect(alice.locator("button")).to_have_count(0)  # only the file removes her
    folder = screenshots(tmp_path)
    await page.screenshot(path=str(folder / "people-desktop.png"), full_page=True)
    await page.set_viewport_size(PHONE)
    await page.screenshot(path=str(folder / "people-phone.png"), full_page=True)
    await page.set_viewport_size(DESKTOP)

    await row.get_by_role("button", name="Approve").click()
    await expect(page.locator("#notice")).to_contain_text(
        "Approved 6666 @mallory — name they chose: “Mallory” on telegram"
    )
    await expect(page.locator("#pending .empty")).to_be_visible()
    mallory = page.locator(f'#people tr[data-person="telegram:{MALLORY.id}"]')
    await expect(mallory).to_contain_text("approved (dashboard)")
    await expect(mallory.get_by_role("button", name="Revoke")).to_be_visible()
    await page.screenshot(path=str(folder / "people-approved-desktop.png"), full_page=True)

    welcome = (await telegram.wait_for_messages(MALLORY.id, 2, WITHIN))[1]
    assert welcome.plain.startswith("You're in")
    telegram.private_text(MALLORY, "thank you!")
    replies = await telegram.wait_for_messages(MALLORY.id, 3, WITHIN)
    assert replies[2].plain == "You said: thank you!"

    # A code typed by hand that is no longer valid: the page says why.
    await page.fill("#code", code.lower())
    await page.click("#code-form button[type=submit]")
    await expect(page.locator("#error")).to_contain_text("used, denied or has expired")
    await expect(page.locator("#code")).to_have_value(code.lower())  # kept, to fix

    page.once("dialog", lambda dialog: dialog.accept())
    await mallory.get_by_role("button", name="Revoke").click()
    await expect(page.locator("#notice")).to_contain_text(
        "Revoked 6666 @mallory — name they chose: “Mallory” on telegram"
    )
    await expect(mallory).to_have_count(0)
    assert (folder / "people-desktop.png").stat().st_size > 0
    assert (folder / "people-phone.png").stat().st_size > 0
