"""run_code's approvals end to end, with the real tool in the real bubblewrap sandbox: after a
fetched page the run waits for Run and runs once; Deny and expiry reach the model as errors with
the reason; a clean turn runs without asking; a briefing's run and a sub-agent's run ask in the
chat; the audit row says who approved it and when. Real python-telegram-bot inside a running
Bruce against the fake Bot API, the real Anthropic provider against the fake Messages API, the
real web_fetch against a local page, the SQLite file. Every wait is for a condition."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bruce_bot.agent.asking import APPROVED, DENIED
from bruce_bot.app import Bruce
from bruce_bot.channels.policy import PRESS_NOT_ALLOWED
from bruce_bot.domain import SessionKey
from bruce_bot.sandbox.probe import probe
from bruce_bot.scheduler.new_task import NewTask
from tests.conftest import make_config, running_bruce, wait_until, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.discord_server import FakeDiscordServer, user_payload
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage
from tests.fakes.web_server import FakeWebServer
from tests.integration.crash.test_restart import Daemon
from tests.integration.support import block_text, db_rows, last_tool_results, tool_uses

pytestmark = pytest.mark.skipif(
    not probe().works, reason="bubblewrap cannot run here (`make test` installs it)"
)

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
WITHIN = 20.0
CODE = "print(6 * 7)"
RUN = {"language": "python", "code": CODE}


@contextlib.asynccontextmanager
async def bruce_on_telegram(
    tmp_path: Path, telegram: FakeTelegramServer, llm: FakeAnthropicServer, wait: int = 300
) -> AsyncIterator[Bruce]:
    channel = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id],
        "streaming": False,
    }
    tools = {
        "web_fetch": {"allow_private_addresses": True},  # the page is on 127.0.0.1
        "web_search": {"enabled": False},
        "run_code": {"enabled": True, "approval_timeout_seconds": wait},
    }
    config = make_config(
        tmp_path, llm.base_url, web={"enabled": False}, channels={"telegram": channel}, tools=tools
    )
    async with running_bruce(config) as bruce:
        yield bruce


async def question_after_a_page(
    telegram: FakeTelegramServer, llm: FakeAnthropicServer, page: FakeWebServer, answer: str
) -> SentMessage:
    llm.script(tool_calls=[("web_fetch", {"url": f"{page.url}/article"})])
    llm.script(tool_calls=[("run_code", RUN)])
    llm.script(answer)
    telegram.private_text(ALICE, "Read this article and compute the answer.")
    (question,) = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
    assert question.plain.startswith("⏳ Waiting for your approval")
    assert CODE in question.plain and "web_fetch" in question.plain
    assert [b["text"] for b in question.buttons] == ["Run", "Deny"]
    return question


async def press(telegram: FakeTelegramServer, question: SentMessage, label: str) -> None:
    query = telegram.press(question, ALICE, label)
    await telegram.wait_for(lambda: query in telegram.callback_answers, WITHIN)


def run_result(llm: FakeAnthropicServer) -> dict[str, Any]:
    """run_code's result as the model read it."""
    for body in llm.requests:
        ids = {use["id"] for use in tool_uses(body) if use["name"] == "run_code"}
        if body["messages"][-1]["role"] != "user":
            continue
        for result in last_tool_results(body):
            if result["tool_use_id"] in ids:
                return result
    raise AssertionError("the model never saw run_code's result")


def runs(data_dir: Path) -> list[Any]:
    return db_rows(data_dir, "SELECT * FROM tool_executions WHERE tool_name = 'run_code'")


async def test_after_a_page_the_run_waits_for_run_and_runs_once(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    anthropic_fake: FakeAnthropicServer,
    page: FakeWebServer,
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        question = await question_after_a_page(telegram, anthropic_fake, page, "It is 42.")
        assert runs(tmp_path) == []  # nothing ran yet
        await press(telegram, question, "Run")
        sent = await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
        assert [m.plain for m in sent[1:]] == [APPROVED, "It is 42."]
    result = run_result(anthropic_fake)
    assert not result.get("is_error") and "stdout:\n42" in block_text(result)
    (row,) = runs(tmp_path)
    approval = json.loads(row["details"])["approval"]
    assert approval["asked"] is True and approval["approved"] is True
    assert approval["by"] == f"telegram:{ALICE.id}" and approval["at"]


async def test_a_denial_reaches_the_model_as_an_error_with_the_reason(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    anthropic_fake: FakeAnthropicServer,
    page: FakeWebServer,
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        question = await question_after_a_page(telegram, anthropic_fake, page, "Not run.")
        await press(telegram, question, "Deny")
        sent = await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
        assert [m.plain for m in sent[1:]] == [DENIED, "Not run."]
    result = run_result(anthropic_fake)
    assert result.get("is_error") is True
    text = block_text(result)
    assert "did not run" in text and f"denied by telegram:{ALICE.id}" in text
    assert "web_fetch" in text  # why it asked
    (row,) = runs(tmp_path)
    assert json.loads(row["details"])["approval"]["approved"] is False


async def test_no_answer_in_time_reaches_the_model_as_an_error(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    anthropic_fake: FakeAnthropicServer,
    page: FakeWebServer,
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake, wait=1):
        await question_after_a_page(telegram, anthropic_fake, page, "Nobody answered.")
        sent = await telegram.wait_for_messages(ALICE.id, 2, WITHIN)
        assert sent[1].plain == "Nobody answered."
    result = run_result(anthropic_fake)
    assert result.get("is_error") is True and "no answer within 1 s" in block_text(result)
    (question,) = db_rows(tmp_path, "SELECT status FROM pending_actions")
    assert question["status"] == "expired"


async def test_a_clean_turn_runs_without_asking(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        anthropic_fake.script(tool_calls=[("run_code", RUN)])
        anthropic_fake.script("It is 42.")
        telegram.private_text(ALICE, "What is 6 times 7? Compute it.")
        (answer,) = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        assert answer.plain == "It is 42."
    assert db_rows(tmp_path, "SELECT * FROM pending_actions") == []
    (row,) = runs(tmp_path)
    assert json.loads(row["details"])["approval"] == {"asked": False}


async def test_a_briefings_run_waits_for_the_user_in_its_chat(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake) as bruce:
        assert bruce.stores is not None and bruce.tasks is not None
        anthropic_fake.script("Hello Alice.")  # the chat exists: Alice wrote to Bruce before
        telegram.private_text(ALICE, "Hi!")
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        session = await bruce.stores.sessions.find(SessionKey("telegram", str(ALICE.id)))
        assert session is not None
        task = await bruce.tasks.planner.create(
            NewTask(
                session_id=session.id,
                channel="telegram",
                chat_id=str(ALICE.id),
                title="Daily number",
                mode="agent",
                content="Compute today's number",
                run_at="+1h",
            )
        )
        anthropic_fake.script(tool_calls=[("run_code", RUN)])
        anthropic_fake.script("Today's number is 42.")
        firing = asyncio.create_task(bruce.tasks.editor.run_now(task.id))
        question = (await telegram.wait_for_messages(ALICE.id, 2, WITHIN))[1]
        assert CODE in question.plain and "scheduled task" in question.plain
        assert runs(tmp_path) == []
        await press(telegram, question, "Run")
        sent = await telegram.wait_for_messages(ALICE.id, 4, WITHIN)
        assert [m.plain for m in sent[2:]] == [APPROVED, "📋 Daily number\n\nToday's number is 42."]
        await firing
    assert "stdout:\n42" in block_text(run_result(anthropic_fake))


async def test_a_sub_agents_run_asks_in_the_chat_it_works_for(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        anthropic_fake.script(tool_calls=[("spawn_subagent", {"task": "Compute 6 times 7."})])
        anthropic_fake.script(tool_calls=[("run_code", RUN)])  # the sub-agent's
        anthropic_fake.script("42")  # the sub-agent's answer
        anthropic_fake.script("My helper computed 42.")
        telegram.private_text(ALICE, "Have a helper compute 6 times 7.")
        (question,) = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        assert CODE in question.plain and "sub-agent" in question.plain
        await press(telegram, question, "Run")
        sent = await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
        assert [m.plain for m in sent[1:]] == [APPROVED, "My helper computed 42."]
    (row,) = runs(tmp_path)
    assert json.loads(row["details"])["approval"]["by"] == f"telegram:{ALICE.id}"


# ---- a crash while waiting ---------------------------------------------------------------------


@pytest.fixture
async def daemon(
    tmp_path: Path,
    anthropic_fake: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    page: FakeWebServer,
) -> AsyncIterator[Daemon]:
    channel = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id],
        "streaming": False,
    }
    tools = {
        "web_fetch": {"enabled": True, "allow_private_addresses": True},
        "run_code": {"enabled": True},
    }
    bruce = Daemon(tmp_path, anthropic_fake.base_url, channels={"telegram": channel}, tools=tools)
    try:
        yield bruce
    finally:
        await bruce.kill()


async def test_after_a_crash_while_waiting_the_resumed_turn_waits_for_the_same_question(
    daemon: Daemon,
    anthropic_fake: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    page: FakeWebServer,
) -> None:
    await daemon.start()
    anthropic_fake.script(tool_calls=[("web_fetch", {"url": f"{page.url}/article"})])
    anthropic_fake.script(tool_calls=[("run_code", RUN)])
    telegram.private_text(ALICE, "Read this article and compute the answer.")
    (question,) = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
    asked = "SELECT m.status FROM pending_actions a JOIN messages m ON m.id = a.question_message_id"
    # The question's delivery recorded (a kill before that would send it again at the start).
    await wait_until(
        lambda: [r["status"] for r in db_rows(daemon.data_dir, asked)] == ["sent"], WITHIN
    )
    await daemon.kill()  # while the run waits for Alice: nothing ran
    assert runs(daemon.data_dir) == []

    # The resumed turn: the model asks for the same run again; it finds the same question.
    anthropic_fake.script(tool_calls=[("run_code", RUN)])
    anthropic_fake.script("It is 42.")
    await daemon.start()
    await wait_until(lambda: len(anthropic_fake.requests) == 3, WITHIN)
    await press(telegram, question, "Run")  # the button of the question asked before the crash
    await wait_until(lambda: "It is 42." in telegram.texts_to(ALICE.id), WITHIN)
    await daemon.kill()
    assert telegram.texts_to(ALICE.id)[1:] == [APPROVED, "It is 42."]  # asked once, ran once
    (row,) = db_rows(daemon.data_dir, "SELECT status FROM pending_actions")
    assert row["status"] == "approved"
    assert len(runs(daemon.data_dir)) == 1


# ---- the web chat ------------------------------------------------------------------------------


async def test_in_the_web_chat_the_question_has_run_and_deny_and_run_runs_it(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, page: FakeWebServer
) -> None:
    tools = {
        "web_fetch": {"allow_private_addresses": True},
        "web_search": {"enabled": False},
        "run_code": {"enabled": True},
    }
    config = make_config(tmp_path, anthropic_fake.base_url, tools=tools)
    anthropic_fake.script(tool_calls=[("web_fetch", {"url": f"{page.url}/article"})])
    anthropic_fake.script(tool_calls=[("run_code", RUN)])
    anthropic_fake.script("It is 42.")
    async with running_bruce(config) as bruce, web_client(bruce) as http:
        posted = await http.post("/api/chat/messages", json={"text": "Read it and compute."})
        assert posted.status_code == 202

        async def listed() -> list[dict[str, Any]]:
            return list((await http.get("/api/chat/messages")).json()["messages"])

        async def question() -> dict[str, Any] | None:
            return next((m for m in await listed() if m["choices"]), None)

        asked = await wait_until(question, WITHIN)
        assert asked["kind"] == "notice" and CODE in asked["content"]
        assert [c["label"] for c in asked["choices"]] == ["Run", "Deny"]
        assert runs(tmp_path) == []
        pressed = await http.post("/api/chat/choices", json={"data": asked["choices"][0]["data"]})
        assert pressed.status_code == 200 and pressed.json()["reply"] == APPROVED

        async def answered() -> bool:
            return any(m["content"] == "It is 42." for m in await listed())

        await wait_until(answered, WITHIN)
    (row,) = runs(tmp_path)
    assert json.loads(row["details"])["approval"]["by"] == "web"


# ---- Discord -----------------------------------------------------------------------------------

DISCORD_OWNER_ID = 111_000_000_000_000_001
DISCORD_OWNER = user_payload(DISCORD_OWNER_ID, "ada", global_name="Ada Lovelace")
DISCORD_STRANGER = user_payload(222_000_000_000_000_001, "mallory")


async def test_on_discord_the_question_has_run_and_deny_buttons_and_run_runs_it(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, page: FakeWebServer
) -> None:
    tools = {
        "web_fetch": {"allow_private_addresses": True},
        "web_search": {"enabled": False},
        "run_code": {"enabled": True},
    }
    async with FakeDiscordServer() as discord_fake:
        channel = discord_fake.discord_config([DISCORD_OWNER_ID], streaming=False)
        config = make_config(
            tmp_path,
            anthropic_fake.base_url,
            web={"enabled": False},
            channels={"discord": channel},
            tools=tools,
        )
        async with running_bruce(config):
            await discord_fake.wait_for_session(within=WITHIN)
            dm = discord_fake.dm_channel_id(DISCORD_OWNER_ID)
            anthropic_fake.script(tool_calls=[("web_fetch", {"url": f"{page.url}/article"})])
            anthropic_fake.script(tool_calls=[("run_code", RUN)])
            anthropic_fake.script("It is 42.")
            await discord_fake.send_dm(DISCORD_OWNER, "Read this article and compute it.")
            await discord_fake.wait_for_sent(dm, 1, WITHIN)
            (question,) = [m for m in discord_fake.sent if int(m["channel_id"]) == dm]
            assert CODE in question["content"] and "web_fetch" in question["content"]
            buttons = discord_fake.buttons(question["id"])
            assert [b["label"] for b in buttons] == ["Run", "Deny"]

            refused = await discord_fake.press(question, DISCORD_STRANGER, "Run")
            response = await discord_fake.wait_for_response(refused, WITHIN)
            assert response["data"]["content"] == PRESS_NOT_ALLOWED
            assert runs(tmp_path) == []

            interaction = await discord_fake.press(question, DISCORD_OWNER, "Run")
            response = await discord_fake.wait_for_response(interaction, WITHIN)
            assert response["type"] == 7 and response["data"]["components"] == []
            texts = await discord_fake.wait_for_sent(dm, 3, WITHIN)
            assert texts[1:] == [APPROVED, "It is 42."]
    (row,) = runs(tmp_path)
    assert json.loads(row["details"])["approval"]["by"] == f"discord:{DISCORD_OWNER_ID}"
