"""The web chat's buttons in a real headless Chromium: a task the model set up after reading a
page arrives as a question with Confirm / Cancel buttons, and a click confirms it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import needs_chromium
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer
from tests.fakes.web_server import FakeWebServer

pytestmark = needs_chromium
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)


def task_statuses(data_dir: Path) -> list[str]:
    with sqlite3.connect(data_dir / "bruce.db") as connection:
        return [row[0] for row in connection.execute("SELECT status FROM proactive_tasks")]


@pytest.fixture
async def page_server() -> AsyncIterator[FakeWebServer]:
    async with FakeWebServer() as server:
        yield server


async def test_a_click_on_confirm_activates_the_task_and_the_page_says_so(
    tmp_path: Path, browser: Browser, page_server: FakeWebServer
) -> None:
    async with FakeAnthropicServer() as fake:
        task = {
            "title": "Daily sync",
            "execution_mode": "agent",
            "content": "Fetch the page again",
            "cron": "0 9 * * *",
        }
        fake.script(tool_calls=[("web_fetch", {"url": f"{page_server.url}/article"})])
        fake.enqueue(AnthropicReply(tool_calls=[("proactive_create", task)]))
        fake.script("It waits for your confirmation.")
        tools: dict[str, Any] = {"web_fetch": {"allow_private_addresses": True}}
        config = make_config(tmp_path, fake.base_url, tools=tools)
        async with running_bruce(config) as bruce:
            context = await browser.new_context(base_url=bruce.web_url)
            context.set_default_timeout(TIMEOUT_MS)
            tab = await context.new_page()
            errors: list[str] = []
            tab.on("pageerror", lambda error: errors.append(str(error)))
            # Signed in as the owner is: the one-time link Bruce printed, which lands on /chat.
            assert bruce.login_url is not None
            await tab.goto(bruce.login_url)
            await tab.wait_for_url("**/chat")
            await tab.fill("#text", "Summarise the page.")
            await tab.press("#text", "Enter")

            question = tab.locator(".msg.notice", has_text="Please confirm")
            await expect(question).to_have_count(1)
            await expect(question.locator(".choices button")).to_have_text(["Confirm", "Cancel"])
            assert task_statuses(tmp_path) == ["unconfirmed"]

            await question.get_by_role("button", name="Confirm").click()
            await expect(question.locator(".choice-answer")).to_contain_text("Confirmed")
            await expect(question.locator(".choices button").first).to_be_disabled()
            assert task_statuses(tmp_path) == ["active"]
            await context.close()
            assert errors == []
