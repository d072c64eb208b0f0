"""The one-time sign-in link Bruce prints on its first start, opened in headless Chromium as the
owner opens it: it lands on the chat, signed in, with the token gone from the address bar (and so
from the history and any Referer); the same link opened in another browser grants nothing and
says why."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, Request, expect

from tests.browser.conftest import needs_chromium
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text

pytestmark = needs_chromium

TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)


async def test_the_printed_link_signs_in_once_and_leaves_no_token_behind(
    tmp_path: Path, browser: Browser
) -> None:
    async with FakeAnthropicServer(responder=lambda body: f"You said: {last_user_text(body)}") as (
        fake
    ):
        async with running_bruce(make_config(tmp_path, fake.base_url)) as bruce:
            link = bruce.login_url
            assert link is not None and "/login?token=" in link
            nonce = link.split("token=", 1)[1]

            owner = await browser.new_context(base_url=bruce.web_url)
            owner.set_default_timeout(TIMEOUT_MS)
            page = await owner.new_page()
            sent: list[Request] = []
            page.on("request", lambda request: sent.append(request))
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(link)
            await page.wait_for_url("**/chat")

            assert nonce not in page.url
            assert nonce not in await page.evaluate("location.href + document.referrer")
            # Only the first request carried it: the page's own requests (scripts, API) do not,
            # not even in a Referer.
            later = [request for request in sent if request.url != link]
            assert later, "the chat page made requests"
            for request in later:
                assert nonce not in request.url
                assert nonce not in (await request.all_headers()).get("referer", "")

            # Signed in: the chat answers.
            await page.fill("#text", "hello from the link")
            await page.press("#text", "Enter")
            await expect(page.locator(".msg.assistant").last).to_contain_text(
                "You said: hello from the link"
            )
            await page.goto("/settings")
            assert page.url.endswith("/settings")  # no detour through /login

            # The same link in another browser: spent, and the login page says so.
            stranger = await browser.new_context(base_url=bruce.web_url)
            stranger.set_default_timeout(TIMEOUT_MS)
            other = await stranger.new_page()
            await other.goto(link)
            await other.wait_for_url("**/login?error=link")
            await expect(other.locator("#error")).to_contain_text("already used")
            await other.goto("/chat")
            await other.wait_for_url("**/login?next=/chat")

            await stranger.close()
            await owner.close()
            assert errors == []
