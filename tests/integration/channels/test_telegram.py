"""The Telegram channel end to end: real python-telegram-bot inside a running Bruce, talking over
HTTP to the fake Bot API (tests/fakes/telegram_server.py), with the fake Anthropic server as the
model and the SQLite file on disk. Each test checks what a Telegram user (or the owner reading
the database) would notice. Nothing sleeps for a fixed time: every wait is for a condition, with
a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from bruce_bot.app import Bruce, StartupError
from bruce_bot.channels.base import DeliveryError, Submission
from bruce_bot.channels.telegram.channel import COMMANDS, ONLY_TEXT, TelegramChannel
from bruce_bot.channels.telegram.intake import DurableUpdateQueue
from bruce_bot.config import TelegramConfig
from bruce_bot.domain import InboundMessage, OutboundMessage
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, images_of, last_user_text
from tests.fakes.telegram_server import BOT_USERNAME, FakeTelegramServer, SendLimits, utf16_len
from tests.integration.support import awaiting, db_rows, messages_of, user_texts

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
BOB = FakeTelegramServer.user(1002, "Bob")
MALLORY = FakeTelegramServer.user(6666, "Mallory", "mallory")
GROUP = -500
WITHIN = 15.0


def echo(body: dict[str, Any]) -> str:
    return f"You said: {last_user_text(body)}"


def telegram_config(
    tmp_path: Path, telegram: FakeTelegramServer, llm_url: str, **channel: Any
) -> Any:
    settings = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id, BOB.id],
        # The plain path: each reply one sendMessage (live replies: test_telegram_live.py).
        "streaming": False,
        **channel,
    }
    return make_config(tmp_path, llm_url, web={"enabled": False}, channels={"telegram": settings})


@contextlib.asynccontextmanager
async def bruce_on_telegram(
    tmp_path: Path, telegram: FakeTelegramServer, llm: FakeAnthropicServer, **channel: Any
) -> AsyncIterator[Bruce]:
    async with running_bruce(telegram_config(tmp_path, telegram, llm.base_url, **channel)) as bruce:
        yield bruce


async def settled_reply_count(tmp_path: Path, count: int) -> list[Any]:
    """Wait until `count` assistant replies are stored and their delivery is settled."""

    def settled() -> list[Any] | None:
        rows = messages_of(tmp_path, "assistant")
        if len(rows) >= count and all(row["status"] in ("sent", "failed") for row in rows):
            return rows
        return None

    return await wait_until(settled, WITHIN)


# ---- conversations ---------------------------------------------------------------------------


async def test_private_message_is_answered_and_stored(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        sent = telegram.private_text(ALICE, "hello Bruce")
        [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        assert reply.plain == "You said: hello Bruce"
        assert reply.reply_to is None  # no quoting in a private chat
        await settled_reply_count(tmp_path, 1)
    [row] = messages_of(tmp_path, "user")
    assert row["content"] == "hello Bruce"
    assert row["platform_message_id"] == str(sent["message_id"])
    assert row["author"] == "Alice"
    [session] = db_rows(tmp_path, "SELECT channel, chat_id FROM sessions")
    assert (session["channel"], session["chat_id"]) == ("telegram", str(ALICE.id))


async def test_group_answers_only_when_mentioned_and_names_the_speaker(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.group_text(GROUP, ALICE, "lunch at noon, everyone?")  # not for the bot
        asked = telegram.group_text(GROUP, ALICE, "what's the capital of Peru?", mention=True)
        [reply] = await telegram.wait_for_messages(GROUP, 1, WITHIN)
        assert reply.reply_to == asked["message_id"]
        # Updates are handled in order: the unmentioned one was done before the answer.
        assert len(anthropic_fake.requests) == 1
        assert user_texts(anthropic_fake.requests[0]) == ["Alice: what's the capital of Peru?"]
        assert reply.plain == "You said: Alice: what's the capital of Peru?"

        # Bob replies to the bot's message: addressed without a mention, and named too.
        telegram.group_text(GROUP, BOB, "and of Chile?", reply_to=reply)
        await telegram.wait_for_messages(GROUP, 2, WITHIN)
        assert user_texts(anthropic_fake.requests[1])[-1] == "Bob: and of Chile?"
        assert "Alice: what's the capital of Peru?" in user_texts(anthropic_fake.requests[1])
        await settled_reply_count(tmp_path, 2)
    stored = [row["content"] for row in messages_of(tmp_path, "user")]
    assert stored == ["what's the capital of Peru?", "and of Chile?"]


async def test_text_mention_and_supergroup_are_addressed(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.group_text(-100777, BOB, "help me", text_mention=True, chat_type="supergroup")
        [reply] = await telegram.wait_for_messages(-100777, 1, WITHIN)
    assert reply.plain == "You said: Bob: Bruce, help me"


async def test_long_answer_arrives_in_order_in_parts_within_the_limit(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    paragraphs = [
        f"**Point {n:03d}.** Prices rose 3% <i>quickly</i> & then fell; see `code {n}`. " + "x" * 60
        for n in range(1, 91)
    ]
    answer = "\n\n".join(paragraphs)
    assert len(answer) >= 9000
    anthropic_fake.script(answer)
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "tell me everything")
        [row] = await settled_reply_count(tmp_path, 1)
        assert row["status"] == "sent"
    parts = telegram.sent_to(ALICE.id)
    assert len(parts) >= 3
    assert all(utf16_len(part.plain) <= 4096 for part in parts)
    assert all(part.parse_mode == "HTML" for part in parts)
    seen = "\n".join(part.plain for part in parts)
    positions = [seen.index(f"Point {n:03d}.") for n in range(1, 91)]
    assert positions == sorted(positions)
    assert "<i>quickly</i> & then" in seen  # the model's "<" and "&" reached the user as text


async def test_a_long_answer_waits_out_telegrams_429s_and_arrives_whole_in_order(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    # Telegram's pace for one chat with no burst room: each part after the first meets a 429
    # ("retry after 1"); Bruce waits as told and every part arrives once, in order.
    paragraphs = [f"Point {n:03d}. " + "y" * 90 for n in range(1, 91)]
    anthropic_fake.script("\n\n".join(paragraphs))
    limits = SendLimits(chat_burst=1)
    async with FakeTelegramServer(limits=limits) as telegram:
        async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
            telegram.private_text(ALICE, "tell me everything")
            [row] = await settled_reply_count(tmp_path, 1)
            assert row["status"] == "sent"
        parts = telegram.sent_to(ALICE.id)
        assert len(parts) >= 3
        assert telegram.rate_limited and all(chat == ALICE.id for chat, _ in telegram.rate_limited)
        seen = "\n".join(part.plain for part in parts)
        positions = [seen.index(f"Point {n:03d}.") for n in range(1, 91)]
        assert positions == sorted(positions)
        assert all(seen.count(f"Point {n:03d}.") == 1 for n in range(1, 91))


async def test_a_second_instance_polling_the_same_token_is_logged_and_the_bot_keeps_answering(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    with capture_logs() as logs:
        async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
            await telegram.wait_for(lambda: telegram._long_poll is not None, WITHIN)
            # Another copy of the bot polls once: Telegram ends Bruce's held poll with 409.
            async with aiohttp.ClientSession() as session:
                url = f"{telegram.base_url}{telegram.token}/getUpdates"
                async with session.post(url, data={"timeout": "1", "offset": "-1"}) as answer:
                    assert answer.status == 200
            await telegram.wait_for(lambda: telegram.conflicts >= 1, WITHIN)
            telegram.private_text(ALICE, "are you there?")
            [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
            assert reply.plain == "You said: are you there?"
    failed = [entry for entry in logs if entry["event"] == "telegram_polling_failed"]
    assert failed and "terminated by other getUpdates request" in failed[0]["error"]


async def test_answer_whose_html_outgrows_the_limit_is_split_again(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    # 3700 characters (one outbox part) that become 14,000+ characters of escaped HTML.
    answer = "\n".join("<&>" * 40 for _ in range(30)) + "\n" + "😀" * 100
    anthropic_fake.script(answer)
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "symbols please")
        [row] = await settled_reply_count(tmp_path, 1)
        assert row["status"] == "sent"
    parts = telegram.sent_to(ALICE.id)
    assert len(parts) >= 2
    assert all(utf16_len(part.plain) <= 4096 for part in parts)
    assert "".join(part.plain for part in parts).replace("\n", "") == answer.replace("\n", "")


async def test_refused_markup_is_resent_as_plain_text(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("**Done**: saved it")
    telegram.reject_markup_next()
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "save it")
        [row] = await settled_reply_count(tmp_path, 1)
        assert row["status"] == "sent"
    [delivered] = telegram.sent_to(ALICE.id)
    assert delivered.parse_mode is None
    assert delivered.plain == "**Done**: saved it"
    attempts = telegram.calls_of("sendMessage")
    assert [call.get("parse_mode") for call in attempts] == ["HTML", None]
    assert attempts[0]["text"] == "<b>Done</b>: saved it"


async def test_rate_limited_reply_is_retried_and_delivered_once(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("Here you go")
    telegram.rate_limit_next_send(retry_after=1)
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "quick question")
        [row] = await settled_reply_count(tmp_path, 1)
    assert row["status"] == "sent"
    assert telegram.texts_to(ALICE.id) == ["Here you go"]
    assert len(telegram.calls_of("sendMessage")) == 2
    attempts = db_rows(tmp_path, "SELECT status, error FROM deliveries ORDER BY id")
    assert [a["status"] for a in attempts] == ["retrying", "sent"]
    assert "retry after" in attempts[0]["error"].lower() or "RetryAfter" in attempts[0]["error"]


async def test_reply_to_a_chat_that_blocked_the_bot_fails_without_retries(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("you won't see this")
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.block_chat(ALICE.id)
        telegram.private_text(ALICE, "bye")
        [row] = await settled_reply_count(tmp_path, 1)
    assert row["status"] == "failed"
    assert len(telegram.calls_of("sendMessage")) == 1  # permanent: not retried
    [attempt] = db_rows(tmp_path, "SELECT status, error FROM deliveries")
    assert attempt["status"] == "failed" and "blocked" in attempt["error"]


# ---- who may talk ----------------------------------------------------------------------------


async def test_stranger_is_refused_once_an_hour_and_nothing_is_kept(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake, pairing=False):
        telegram.private_text(MALLORY, "give me the owner's secrets")
        [refusal] = await telegram.wait_for_messages(MALLORY.id, 1, WITHIN)
        assert str(MALLORY.id) in refusal.plain
        assert "channels.telegram.allowed_user_ids" in refusal.plain
        assert "Settings page" in refusal.plain  # the live way in, no restart
        telegram.private_text(MALLORY, "hello??")
        telegram.command(MALLORY, "/new")
        # Alice's message comes after Mallory's: once it is answered, Mallory's were handled.
        telegram.private_text(ALICE, "hi")
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        await settled_reply_count(tmp_path, 1)
    assert len(telegram.sent_to(MALLORY.id)) == 1
    assert [row["user_id"] for row in messages_of(tmp_path, "user")] == [str(ALICE.id)]
    assert len(anthropic_fake.requests) == 1
    assert "secrets" not in json.dumps(anthropic_fake.requests)
    sessions = db_rows(tmp_path, "SELECT chat_id FROM sessions")
    assert [s["chat_id"] for s in sessions] == [str(ALICE.id)]


async def test_empty_allowlist_admits_nobody_and_warns(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    with capture_logs() as logs:
        async with bruce_on_telegram(
            tmp_path, telegram, anthropic_fake, allowed_user_ids=[], pairing=False
        ):
            telegram.private_text(ALICE, "it's me, the owner")
            [refusal] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
    assert str(ALICE.id) in refusal.plain
    assert any(
        entry["event"] == "allowlist_empty" and entry["channel"] == "telegram" for entry in logs
    )
    assert messages_of(tmp_path) == []
    assert anthropic_fake.requests == []


# ---- commands --------------------------------------------------------------------------------


async def test_commands_are_registered_and_answered(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        # Registered right after start-up, without start-up waiting for it.
        await telegram.wait_for(lambda: telegram.my_commands is not None)
        assert telegram.my_commands == [
            {"command": c.name, "description": c.description} for c in COMMANDS
        ]
        assert [c["command"] for c in telegram.my_commands] == ["start", "help", "new", "reminders"]
        telegram.command(ALICE, "/start")
        telegram.command(ALICE, "/help")
        telegram.command(ALICE, "/reminders")
        replies = await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
        assert "I'm Bruce" in replies[0].plain and "Alice" in replies[0].plain
        assert "/new" in replies[1].plain and f"@{BOT_USERNAME}" in replies[1].plain
        assert replies[2].plain  # the gateway's description of the chat's reminders
        # Without a bot_command entity "/start" is just text for the model.
        telegram.private_text(ALICE, "/start is what I typed")
        [*_, echoed] = await telegram.wait_for_messages(ALICE.id, 4, WITHIN)
        assert echoed.plain == "You said: /start is what I typed"
    assert len(anthropic_fake.requests) == 1


async def test_new_sets_the_earlier_conversation_aside(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "my favourite colour is teal")
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        await settled_reply_count(tmp_path, 1)
        telegram.command(ALICE, "/new")
        replies = await telegram.wait_for_messages(ALICE.id, 2, WITHIN)
        assert "new conversation" in replies[1].plain.lower()
        telegram.private_text(ALICE, "what is my favourite colour?")
        await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
    last = anthropic_fake.requests[-1]
    assert user_texts(last) == ["what is my favourite colour?"]
    assert "teal" not in json.dumps(last["messages"])


# ---- unusual input ---------------------------------------------------------------------------


async def test_photos_are_read_and_a_sticker_gets_the_notice(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = lambda body: "A heron." if images_of(body) else echo(body)
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.photo(ALICE)
        [seen] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        assert seen.plain == "A heron."
        telegram.photo(ALICE, caption="is this a heron?")
        [_, answer] = await telegram.wait_for_messages(ALICE.id, 2, WITHIN)
        assert answer.plain == "A heron."
        assert user_texts(anthropic_fake.requests[-1])[-1] == "is this a heron?"
        telegram.sticker(ALICE)
        replies = await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
        assert replies[2].plain == ONLY_TEXT
        # Someone else's photo in a group, not addressed to the bot: no reply at all.
        telegram.photo(BOB, chat_id=GROUP, chat_type="group")
        telegram.group_text(GROUP, BOB, "ping", mention=True)
        [group_reply] = await telegram.wait_for_messages(GROUP, 1, WITHIN)
        assert group_reply.plain == "You said: Bob: ping"
    assert [row["content"] for row in messages_of(tmp_path, "user")] == [
        "",  # a photo without words: its picture is the message
        "is this a heron?",
        "ping",
    ]


async def test_odd_and_malformed_updates_do_not_stop_the_bot(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        original = telegram.private_text(ALICE, "first")
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        telegram.push_raw({"message": {"message_id": 5}})  # no date, no chat
        telegram.push_raw({"message": "garbage"})
        telegram.push_raw({"brand_new_update_kind": {"x": 1}})
        telegram.push_raw(
            {
                "message": {
                    "message_id": 9,
                    "date": 0,
                    "chat": {"id": -42, "type": "channel"},
                    "text": "a channel post in disguise",
                }
            }
        )
        telegram.edited_text(original, "first (edited)")
        telegram.group_text(GROUP, ALICE, "", mention=True)  # nothing but the mention
        rtl = "مرحبا 👋🏽 שלום — what does this say?"
        telegram.private_text(ALICE, rtl)
        telegram.private_text(ALICE, "z" * 200_000)
        telegram.private_text(ALICE, "still there?")
        # Messages that arrive while a turn runs are answered together in the next turn.
        await telegram.wait_for(
            lambda: any(text.endswith("still there?") for text in telegram.texts_to(ALICE.id)),
            WITHIN,
        )
        await telegram.wait_for_messages(GROUP, 1, WITHIN)
    stored = [row["content"] for row in messages_of(tmp_path, "user")]
    assert stored[0] == "first" and rtl in stored and "still there?" in stored
    assert "first (edited)" not in stored and "a channel post in disguise" not in stored
    [long_row] = [text for text in stored if text.startswith("zzz")]
    assert "truncated" in long_row
    assert any(rtl in text for body in anthropic_fake.requests for text in user_texts(body))
    assert telegram.texts_to(GROUP) == [f"You said: Alice: @{BOT_USERNAME}"]


async def test_redelivered_update_is_answered_once(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        message = telegram.private_text(ALICE, "only once please")
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        telegram.redeliver(message)
        telegram.private_text(ALICE, "next")
        await telegram.wait_for(lambda: "You said: next" in telegram.texts_to(ALICE.id))
    assert telegram.texts_to(ALICE.id) == ["You said: only once please", "You said: next"]
    assert len(anthropic_fake.requests) == 2


async def test_typing_is_shown_while_the_model_thinks(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("thought about it", delay_seconds=0.5)
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "think hard")
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
    assert (ALICE.id, "typing") in telegram.chat_actions
    methods = [name for name, _ in telegram.calls]
    assert methods.index("sendChatAction") < methods.index("sendMessage")


# ---- transport -------------------------------------------------------------------------------


async def test_polling_survives_a_bad_gateway_and_loses_nothing(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    telegram.fail_get_updates(2, status=502)
    telegram.private_text(ALICE, "sent while Telegram was flaky")
    with capture_logs() as logs:
        async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
            [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
            assert reply.plain == "You said: sent while Telegram was flaky"
            telegram.private_text(ALICE, "and now?")
            await telegram.wait_for_messages(ALICE.id, 2, WITHIN)
    assert len(telegram.get_updates_offsets) >= 3
    failures = [entry for entry in logs if entry["event"] == "telegram_polling_failed"]
    assert len(failures) == 2
    assert telegram.token not in json.dumps(logs, default=str)


class InboxWithoutCommands:
    """The inbox side of the chat commands, for tests that only watch `submit`."""

    async def new_conversation(self, channel: str, chat_id: str) -> str:
        return "new"

    async def describe_reminders(self, channel: str, chat_id: str) -> str:
        return "none"

    async def migrate_chat(self, channel: str, old_chat_id: str, new_chat_id: str) -> None:
        return None


async def test_update_is_confirmed_only_after_the_message_is_stored(
    telegram: FakeTelegramServer,
) -> None:
    """The offset that confirms an update to Telegram is sent only once `submit` returned."""
    release = asyncio.Event()
    submitted: list[InboundMessage] = []

    class SlowInbox(InboxWithoutCommands):
        async def submit(self, message: InboundMessage) -> Submission:
            submitted.append(message)
            await release.wait()
            return Submission(True, message_id=1)

    channel = TelegramChannel(
        TelegramConfig(
            enabled=True,
            token=telegram.token,
            base_url=telegram.base_url,
            allowed_user_ids=[ALICE.id],
        )
    )
    await channel.start(SlowInbox())
    try:
        telegram.private_text(ALICE, "keep me safe")
        await wait_until(lambda: submitted, WITHIN)
        update_id = 1
        # The updater's next getUpdates, whose offset would confirm the update, is made and
        # waits until the message is stored: none went out meanwhile.
        await wait_until(lambda: awaiting(DurableUpdateQueue.all_handled), WITHIN)
        assert max(telegram.get_updates_offsets) <= update_id
        assert telegram.pending_updates == 1
        release.set()
        await telegram.wait_for(lambda: max(telegram.get_updates_offsets) == update_id + 1)
        assert telegram.pending_updates == 0
        assert submitted[0].metadata == {}
        assert submitted[0].platform_message_id is not None
    finally:
        release.set()
        await channel.stop()
        await channel.close()
    with pytest.raises(DeliveryError) as raised:
        await channel.send(OutboundMessage("telegram", str(ALICE.id), "too late"))
    assert not raised.value.permanent


async def test_a_batch_is_stored_chat_by_chat_in_order_and_confirmed_once_all_is_stored(
    telegram: FakeTelegramServer,
) -> None:
    """A getUpdates batch is handled concurrently across chats (a slow chat holds nobody
    else's messages back), in order within each chat, and confirmed only once all is stored."""
    carol = FakeTelegramServer.user(1003, "Carol")
    release = asyncio.Event()
    submitted: list[str] = []
    stored: list[str] = []

    class SlowForAlice(InboxWithoutCommands):
        async def submit(self, message: InboundMessage) -> Submission:
            submitted.append(message.text)
            if message.text == "alice 1":
                await release.wait()
            stored.append(message.text)
            return Submission(True, message_id=len(stored))

    for user, text in [
        (ALICE, "alice 1"),
        (BOB, "bob 1"),
        (ALICE, "alice 2"),
        (carol, "carol 1"),
        (ALICE, "alice 3"),
        (BOB, "bob 2"),
    ]:
        telegram.private_text(user, text)
    channel = TelegramChannel(
        TelegramConfig(
            enabled=True,
            token=telegram.token,
            base_url=telegram.base_url,
            allowed_user_ids=[ALICE.id, BOB.id, carol.id],
        )
    )
    await channel.start(SlowForAlice())
    try:
        await wait_until(lambda: {"bob 1", "bob 2", "carol 1"} <= set(stored), WITHIN)
        assert submitted.count("alice 1") == 1
        assert "alice 2" not in submitted  # it waits for Alice's first message
        # Nothing of the batch is confirmed while one of its messages is not stored.
        assert max(telegram.get_updates_offsets) <= 1
        assert telegram.pending_updates == 6
        release.set()
        await telegram.wait_for(lambda: max(telegram.get_updates_offsets) == 7)
        assert telegram.pending_updates == 0
    finally:
        release.set()
        await channel.stop()
        await channel.close()
    assert [t for t in stored if t.startswith("alice")] == ["alice 1", "alice 2", "alice 3"]
    assert [t for t in stored if t.startswith("bob")] == ["bob 1", "bob 2"]


async def test_send_keeps_working_between_stop_and_close(
    tmp_path: Path, telegram: FakeTelegramServer
) -> None:
    class NullInbox:
        async def submit(self, message: InboundMessage) -> Submission:
            return Submission(True, message_id=1)

        async def new_conversation(self, channel: str, chat_id: str) -> str:
            return ""

        async def describe_reminders(self, channel: str, chat_id: str) -> str:
            return ""

        async def migrate_chat(self, channel: str, old_chat_id: str, new_chat_id: str) -> None:
            return None

    channel = TelegramChannel(
        TelegramConfig(enabled=True, token=telegram.token, base_url=telegram.base_url)
    )
    with pytest.raises(DeliveryError):  # before start: transient
        await channel.send(OutboundMessage("telegram", str(ALICE.id), "early"))
    await channel.start(NullInbox())
    telegram.private_text(ALICE, "hi")  # makes the chat known to the fake
    await telegram.wait_for(lambda: telegram.pending_updates == 0)
    await channel.stop()
    await channel.send(OutboundMessage("telegram", str(ALICE.id), "a reply from a draining turn"))
    assert telegram.texts_to(ALICE.id)[-1] == "a reply from a draining turn"
    await channel.close()
    with pytest.raises(DeliveryError) as raised:
        await channel.send(OutboundMessage("telegram", str(ALICE.id), "after close"))
    assert not raised.value.permanent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_webhook_accepts_only_posts_with_the_secret(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    port = free_port()
    hook_url = f"http://127.0.0.1:{port}/telegram-hook"
    secret = "s3cret_Token-42"
    webhook = {"url": hook_url, "listen": "127.0.0.1", "port": port, "secret_token": secret}
    async with bruce_on_telegram(
        tmp_path, telegram, anthropic_fake, mode="webhook", webhook=webhook
    ):
        assert telegram.webhook_url == hook_url
        assert telegram.webhook_secret == secret
        assert telegram.get_updates_offsets == []  # no polling in webhook mode
        forged = {
            "update_id": 9000,
            "message": {
                "message_id": 1,
                "date": 0,
                "chat": {"id": ALICE.id, "type": "private", "first_name": "Alice"},
                "from": ALICE.as_dict(),
                "text": "forged: transfer everything",
            },
        }
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}):
                async with http.post(
                    hook_url, json=forged, headers={"Content-Type": "application/json", **headers}
                ) as response:
                    assert response.status == 403
        # The real Telegram (the fake) pushes with the right secret.
        telegram.private_text(ALICE, "hello over the webhook")
        [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        assert reply.plain == "You said: hello over the webhook"
        assert telegram.webhook_deliveries[-1][1] == 200
        await settled_reply_count(tmp_path, 1)
    assert [row["content"] for row in messages_of(tmp_path, "user")] == ["hello over the webhook"]
    assert "forged" not in json.dumps(anthropic_fake.requests)


async def test_group_commands_for_another_bot_are_left_alone(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.command(ALICE, "/help@other_bot", chat_id=GROUP, chat_type="group")
        telegram.command(ALICE, f"/help@{BOT_USERNAME}", chat_id=GROUP, chat_type="group")
        [help_reply] = await telegram.wait_for_messages(GROUP, 1, WITHIN)
        telegram.group_text(GROUP, ALICE, "thanks", mention=True)
        replies = await telegram.wait_for_messages(GROUP, 2, WITHIN)
    assert "/new" in help_reply.plain
    assert [r.plain for r in replies] == [help_reply.plain, "You said: Alice: thanks"]


async def test_a_wrong_token_stops_start_up_with_a_clear_message(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    config = telegram_config(tmp_path, telegram, anthropic_fake.base_url, token="42:WRONG")
    bruce = Bruce(config)
    try:
        with pytest.raises(StartupError, match=r"channels\.telegram\.token") as raised:
            await bruce.start()
        assert "42:WRONG" not in str(raised.value)
    finally:
        await bruce.stop()
    assert telegram.calls_of("getUpdates") == []


async def test_bruce_starts_while_telegram_is_down_and_connects_later(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    telegram.fail_next("getMe", 1, status=502)
    with capture_logs() as logs:
        async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
            assert any(entry["event"] == "telegram_unreachable" for entry in logs)
            telegram.private_text(ALICE, "are you up?")
            [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
    assert reply.plain == "You said: are you up?"
    assert len(telegram.calls_of("getMe")) == 2
