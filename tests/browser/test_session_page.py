"""A session's page in headless Chromium: the conversation with each turn's tool calls folded under
its reply (opened, they show input, output or error, and duration), the summary, goals as a
checklist, skills and workflow, sub-agents, tasks and artifacts; then deleting the session after
confirming, which takes it off the list. Screenshots at desktop and phone width are saved (see
screenshots.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from bruce_bot.config import RunCodeConfig
from bruce_bot.domain import SessionKey
from bruce_bot.sandbox.probe import probe
from bruce_bot.tools.run_code import CodeFiles, RunCodeTool
from tests.browser.conftest import needs_chromium
from tests.browser.screenshots import DESKTOP, at_both_widths, screenshot_dir
from tests.integration.dashboard_support import Dashboard, create_task, running_dashboard
from tests.integration.support import db_rows

pytestmark = needs_chromium

TOKEN = "Yq7Wm2Kc9Rt4Lp1Zx8Nv3Bd6Hs0Fg5Jk-AeUiOoPuQ"
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        await running.chat("alice", "hello")
        await running.use_tool("alice", "add", {"a": 20, "b": 22})
        await running.use_tool("alice", "lookup", {"query": "flights to Lisbon"})
        await running.use_tool(
            "alice", "artifact_save", {"filename": "plan.html", "title": "Plan", "content": "x"}
        )
        await create_task(running, "alice", title="Pack bags", content="Pack", run_at="+3h")
        stores = running.bruce.stores
        assert stores is not None
        session = await stores.sessions.find(SessionKey("chat", "alice"))
        assert session is not None
        trip = await stores.goals.add(session.id, "Plan the trip to Lisbon", None)
        done = await stores.goals.add(session.id, "Book the flights", trip.id)
        await stores.goals.complete(done)
        await stores.goals.add(session.id, "Find a hotel", trip.id)
        await stores.summaries.save(session.id, "Alice plans a trip to Lisbon.", 2)
        await stores.sessions.set_active_skills(session.id, ["travel"])
        await stores.sessions.create_child(session.id, SessionKey("chat", "alice/researcher"))
        await running.chat("bob", "I stay")
        yield running


@pytest.fixture
async def page(browser: Browser, dashboard: Dashboard) -> AsyncIterator[Page]:
    context = await browser.new_context(base_url=dashboard.url, viewport=DESKTOP)
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    tab.on(
        "console",
        lambda message: errors.append(message.text) if message.type == "error" else None,
    )
    yield tab
    await context.close()
    assert errors == [], f"errors in the browser: {errors}"


async def log_in(page: Page, path: str) -> None:
    await page.goto(path)
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"**{path}")


async def test_a_session_page_folds_tool_calls_under_their_reply_and_deletes_on_confirm(
    page: Page, dashboard: Dashboard, tmp_path: Path
) -> None:
    await log_in(page, "/sessions")
    await page.locator("#sessions tr", has_text="alice").first.get_by_role("link").click()
    await page.wait_for_url("**/sessions?id=*")

    replies = page.locator("#messages .message.assistant")
    await expect(replies).to_have_count(4)
    await expect(replies.nth(0).locator("details.tool-calls")).to_have_count(0)
    folded = replies.nth(1).locator("details.tool-calls")
    await expect(folded.locator("summary")).to_have_text("1 tool call")
    call = folded.locator(".tool-call")
    await expect(call).to_be_hidden()  # folded until asked for
    await folded.locator("summary").click()
    await expect(call).to_be_visible()
    await expect(call.locator("strong")).to_have_text("add")
    await expect(call.locator("pre.input")).to_contain_text('"a": 20')
    await expect(call.locator("pre.output")).to_have_text("42")
    await expect(call.locator(".duration")).to_have_text(re.compile(r"^\d+(\.\d)? m?s$"))
    failed = replies.nth(2).locator("details.tool-calls")
    await expect(failed.locator("summary")).to_have_text("1 tool call, 1 failed")
    await failed.locator("summary").click()
    await expect(failed.locator("pre.output")).to_contain_text("the index is offline")

    facts = page.locator("#facts")
    await expect(facts).to_contain_text("Alice plans a trip to Lisbon.")
    goals = facts.locator("ul.checklist li")
    await expect(goals).to_have_count(3)
    await expect(facts.get_by_role("checkbox", name="Book the flights")).to_be_checked()
    await expect(facts.get_by_role("checkbox", name="Find a hotel")).not_to_be_checked()
    await expect(facts.get_by_role("checkbox", name="Plan the trip to Lisbon")).not_to_be_checked()
    await expect(facts).to_contain_text("Skills: travel")
    await expect(facts.get_by_role("link", name="Pack bags")).to_be_visible()
    await expect(facts.get_by_role("link", name="Plan")).to_have_attribute(
        "href", re.compile(r"^/artifacts/.+/plan\.html$")
    )
    await expect(facts.locator(".fact", has_text="Sub-agents").locator("a")).to_have_count(1)
    await at_both_widths(page, screenshot_dir(tmp_path), "session-detail")

    # Dismissing the confirmation keeps everything; accepting deletes the session.
    page.once("dialog", lambda dialog: dialog.dismiss())
    await page.get_by_role("button", name="Delete session…").click()
    await expect(page.locator("#messages .message")).to_have_count(8)
    assert "/sessions?id=" in page.url
    assert db_rows(tmp_path, "SELECT id FROM sessions WHERE chat_id = 'alice'") != []

    questions: list[str] = []

    async def accept(dialog: object) -> None:
        questions.append(dialog.message)  # type: ignore[attr-defined]
        await dialog.accept()  # type: ignore[attr-defined]

    page.once("dialog", accept)
    await page.get_by_role("button", name="Delete session…").click()
    await page.wait_for_url("**/sessions")
    assert "cannot be undone" in questions[0] and "1 sub-agent" in questions[0]
    await expect(page.locator("#notice")).to_contain_text("Deleted")
    await expect(page.locator("#notice")).to_contain_text("8 messages")
    await expect(page.locator("#sessions tr", has_text="bob")).to_have_count(1)
    await expect(page.locator("#sessions tr", has_text="alice")).to_have_count(0)
    assert db_rows(tmp_path, "SELECT id FROM sessions WHERE chat_id LIKE 'alice%'") == []
    await at_both_widths(page, screenshot_dir(tmp_path), "sessions-after-delete")


@pytest.mark.skipif(not probe().works, reason=f"no sandbox: {probe().detail}")
async def test_a_session_page_lists_its_code_runs_with_their_files(
    page: Page, dashboard: Dashboard, tmp_path: Path
) -> None:
    bruce = dashboard.bruce
    assert bruce.parts is not None and bruce.stores is not None
    settings = RunCodeConfig(enabled=True, approval="never")
    bruce.parts.tools.add(
        RunCodeTool(settings, tmp_path, CodeFiles(bruce.stores.messages, None, 1_000_000))
    )
    code = "open('/workspace/out/table.csv', 'w').write('a,b\\n1,2\\n'); print('saved')"
    await dashboard.use_tool("alice", "run_code", {"language": "python", "code": code})

    await log_in(page, "/sessions")
    await page.locator("#sessions tr", has_text="alice").first.get_by_role("link").click()
    await page.wait_for_url("**/sessions?id=*")
    run = page.locator("#facts ul.code-runs li")
    await expect(run).to_have_count(1)
    await expect(run.locator("pre.code")).to_have_text(code)
    await expect(run).to_contain_text("python")
    await expect(run).to_contain_text("exit 0")
    await expect(run).to_contain_text("not asked")
    await expect(run).to_contain_text("Files: out/table.csv")
