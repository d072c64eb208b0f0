"""Sending a file from the dashboard's chat page in a real headless Chromium: the file input,
the upload route, the file's name under the user's bubble and the reply."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.browser.conftest import needs_chromium
from tests.browser.test_chat_page import bruce, log_in, page, send

pytestmark = needs_chromium
__all__ = ["bruce", "page"]  # the fixtures this module shares with test_chat_page


async def test_a_file_chosen_in_the_chat_is_sent_with_the_message(page: Page) -> None:
    await log_in(page)
    await page.set_input_files(
        "#files",
        files=[{"name": "notes.md", "mimeType": "text/markdown", "buffer": b"# Shopping\nmilk"}],
    )
    await send(page, "what is on my list?")
    user = page.locator(".msg.user")
    await expect(user).to_have_count(1)
    await expect(user).to_contain_text("what is on my list?")
    await expect(user.locator(".file")).to_have_text("📎 notes.md")
    assistant = page.locator(".msg.assistant")
    await expect(assistant).to_have_count(1)
    # The echoing model read the document's text (fenced as untrusted content).
    await expect(assistant).to_contain_text("# Shopping")
    await expect(page.locator("#files")).to_have_value("")
