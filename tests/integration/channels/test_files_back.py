"""Files back: an artifact saved in a Telegram or Discord chat arrives there as a document too,
after the reply with its link, through the real python-telegram-bot and discord.py against
the fake platforms. Bigger than `tools.artifacts.send_file_max_bytes`: the link only. A file
the platform refuses leaves the reply delivered; a redelivered reply sends only what is
missing."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bruce_bot.app import Bruce
from bruce_bot.domain import OutboundFile, SessionKey
from bruce_bot.storage.deliveries import DeliveryAttempt
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.discord_server import FakeDiscordServer, user_payload
from tests.fakes.telegram_server import FakeTelegramServer
from tests.integration.support import db_rows, messages_of

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
OWNER_ID = 111_000_000_000_000_001
OWNER = user_payload(OWNER_ID, "ada", global_name="Ada Lovelace")
WITHIN = 15.0
REPORT = "<!doctype html><html><body><h1>Weekly report</h1><p>All good.</p></body></html>"
LINK = re.compile(r"/artifacts/([0-9a-f-]{36})/report\.html")


def script_a_saved_report(llm: FakeAnthropicServer, content: str = REPORT) -> None:
    """The model saves a report, then answers with the link the tool returned."""
    llm.script(tool_calls=[("artifact_save", {"title": "Weekly", "filename": "report.html",
                                              "content": content})])  # fmt: skip

    def answer(body: dict[str, Any]) -> str:
        result = body["messages"][-1]["content"][0]
        text = result["content"] if isinstance(result["content"], str) else ""
        if not text:
            text = "".join(part.get("text", "") for part in result["content"])
        return "Here is your report: " + text.removeprefix("Artifact saved at ")

    llm.responder = answer


def config_on_telegram(
    tmp_path: Path, telegram: FakeTelegramServer, llm: FakeAnthropicServer, **artifacts: Any
) -> Any:
    channel = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id],
    }
    return make_config(
        tmp_path,
        llm.base_url,
        web={"enabled": False},
        channels={"telegram": channel},
        tools={"artifacts": artifacts},
    )


@contextlib.asynccontextmanager
async def telegram_and_bruce(
    tmp_path: Path, llm: FakeAnthropicServer, **artifacts: Any
) -> AsyncIterator[tuple[FakeTelegramServer, Bruce]]:
    async with FakeTelegramServer() as telegram:
        config = config_on_telegram(tmp_path, telegram, llm, **artifacts)
        async with running_bruce(config) as bruce:
            yield telegram, bruce


def reply_statuses(data_dir: Path) -> list[str]:
    return [row["status"] for row in messages_of(data_dir, "assistant")]


async def test_a_saved_report_arrives_as_a_document_after_the_reply_with_its_link(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    script_a_saved_report(anthropic_fake)
    async with telegram_and_bruce(tmp_path, anthropic_fake) as (telegram, _):
        telegram.private_text(ALICE, "make me the weekly report")
        await telegram.wait_for(lambda: telegram.documents.get(ALICE.id), WITHIN)
        await wait_until(lambda: reply_statuses(tmp_path) == ["sent"], WITHIN)
    [reply] = telegram.sent_to(ALICE.id)
    assert LINK.search(reply.plain), reply.plain
    [document] = telegram.documents[ALICE.id]
    assert document.filename == "report.html"
    assert document.data.decode() == REPORT
    assert document.message_id > reply.message_id  # the text first, then its file
    # Both pieces are recorded as parts of the one reply.
    parts = db_rows(tmp_path, "SELECT part, status FROM deliveries ORDER BY part")
    assert [(row["part"], row["status"]) for row in parts] == [(0, "sent"), (1, "sent")]


async def test_a_report_over_the_size_limit_is_only_linked(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    script_a_saved_report(anthropic_fake)
    async with telegram_and_bruce(tmp_path, anthropic_fake, send_file_max_bytes=50) as (
        telegram,
        _,
    ):
        telegram.private_text(ALICE, "make me the weekly report")
        [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        await wait_until(lambda: reply_statuses(tmp_path) == ["sent"], WITHIN)
    assert LINK.search(reply.plain)
    assert telegram.documents == {}


async def test_a_document_telegram_refuses_leaves_the_reply_delivered(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    script_a_saved_report(anthropic_fake)
    async with telegram_and_bruce(tmp_path, anthropic_fake) as (telegram, _):
        telegram.fail_next("sendDocument", status=400)
        telegram.private_text(ALICE, "make me the weekly report")
        [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        await telegram.wait_for(
            lambda: any(method == "sendDocument" for method, _ in telegram.calls), WITHIN
        )
        await wait_until(lambda: reply_statuses(tmp_path) == ["sent"], WITHIN)
    assert LINK.search(reply.plain)
    assert telegram.documents == {}


async def test_a_redelivered_reply_sends_only_its_missing_file(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    """A crash after the text went out and before the file did: the next start sends the file
    alone, once."""
    async with FakeTelegramServer() as telegram:
        config = config_on_telegram(tmp_path, telegram, anthropic_fake)
        artifact = "0b9c7a4e-3f5d-4c1e-9a8b-7d6e5f4a3b2c"
        anthropic_fake.responder = lambda body: "Hello Alice."
        async with running_bruce(config) as bruce:
            telegram.private_text(ALICE, "hi")  # the chat exists for Telegram from now on
            await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
            await wait_until(lambda: reply_statuses(tmp_path) == ["sent"], WITHIN)
            assert bruce.stores is not None
            stores = bruce.stores
            folder = config.app.data_dir / "artifacts" / artifact
            folder.mkdir(parents=True)
            (folder / "report.html").write_text(REPORT, encoding="utf-8")
            session = await stores.sessions.get_or_create(SessionKey("telegram", str(ALICE.id)))
            # What a turn leaves when the process dies between the text and the file.
            reply_id, _ = await stores.messages.finish_turn(
                session.id,
                [],
                "done",
                f"Here it is: http://x/artifacts/{artifact}/report.html",
                "chat",
                files=[OutboundFile(artifact, "report.html", "text/html")],
            )
            sent_text = DeliveryAttempt("telegram", str(ALICE.id), 0, 1, "sent")
            await stores.deliveries.record(reply_id, [sent_text])
        assert reply_statuses(tmp_path) == ["sent", "pending"]
        async with running_bruce(config):  # start-up redelivers what is missing
            await telegram.wait_for(lambda: telegram.documents.get(ALICE.id), WITHIN)
            await wait_until(lambda: reply_statuses(tmp_path) == ["sent", "sent"], WITHIN)
    # The text had gone out before the crash: only the greeting's reply is a message.
    assert [m.plain for m in telegram.sent_to(ALICE.id)] == ["Hello Alice."]
    [document] = telegram.documents[ALICE.id]
    assert document.data.decode() == REPORT


async def test_a_saved_report_arrives_on_discord_as_an_attachment(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    script_a_saved_report(anthropic_fake)
    async with FakeDiscordServer() as discord_fake:
        config = make_config(
            tmp_path,
            anthropic_fake.base_url,
            web={"enabled": False},
            channels={"discord": discord_fake.discord_config([OWNER_ID])},
        )
        async with running_bruce(config):
            await discord_fake.send_dm(OWNER, "make me the weekly report")
            await wait_until(lambda: discord_fake.uploads, WITHIN)
            await wait_until(lambda: reply_statuses(tmp_path) == ["sent"], WITHIN)
    dm = discord_fake.dm_channel_id(OWNER_ID)
    [(channel_id, filename, data)] = discord_fake.uploads
    assert (channel_id, filename, data.decode()) == (dm, "report.html", REPORT)
    text, upload = discord_fake.sent
    # The reply was written into the message that showed it live (its last edit).
    assert LINK.search((discord_fake.edits.get(int(text["id"])) or [text["content"]])[-1])
    assert upload["content"] == "" and upload["attachments"][0]["filename"] == "report.html"
