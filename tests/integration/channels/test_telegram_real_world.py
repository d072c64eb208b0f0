"""Telegram as it really arrives: recorded payloads (tests/fixtures/telegram/, origins in its
README) replayed through the fake Bot API to the real python-telegram-bot inside a running
Bruce. Each test checks what the people in the chat see (what the fake received through
sendMessage), and that the next plain message is still answered. Waits are for conditions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from bruce_bot.app import Bruce
from bruce_bot.channels.telegram.channel import ONLY_TEXT, TelegramChannel
from bruce_bot.channels.telegram.intake import DurableUpdateQueue
from bruce_bot.channels.telegram.texts import ANONYMOUS_REPLY, UNREADABLE
from bruce_bot.config import TelegramConfig
from bruce_bot.domain import InboundMessage, SessionKey, Submission
from bruce_bot.scheduler.new_task import NewTask
from tests.conftest import wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, images_of, last_user_text
from tests.fakes.telegram_server import BOT_ID, FakeTelegramServer, load_fixture
from tests.integration.channels.test_telegram import (
    ALICE,
    MALLORY,
    WITHIN,
    bruce_on_telegram,
    echo,
    free_port,
    settled_reply_count,
)
from tests.integration.support import awaiting, db_rows, messages_of, user_texts

# Ids as recorded, mapped to the test's people and chats.
TELEGRAPH_USER = 521070000  # defstudio/telegraph#753
TELOXIDE_USER = 250918540  # teloxide's private chat captures
WAFFLE = 1253681278  # teloxide's forum captures
FORUM = -1001847508954  # teloxide's forum supergroup, kept as recorded
OLD_GROUP, NEW_SUPERGROUP = -599075523, -1001555296434  # teloxide issue 427
MIGRATOR = 729497414
CAPTION = "Which of these three is the sharpest?"
MENTION = {"type": "mention", "offset": 0, "length": len("@bruce_test_bot")}


def private_chat(user: Any) -> dict[str, Any]:
    return {"id": user.id, "first_name": user.first_name, "type": "private"}


def sessions(tmp_path: Path) -> list[str]:
    return [row["chat_id"] for row in db_rows(tmp_path, "SELECT chat_id FROM sessions ORDER BY id")]


async def reminder_for(bruce: Bruce, chat_id: str, content: str) -> Any:
    assert bruce.stores is not None and bruce.tasks is not None
    session = await bruce.stores.sessions.get_or_create(SessionKey("telegram", chat_id))
    return await bruce.tasks.planner.create(
        NewTask(
            session_id=session.id,
            channel="telegram",
            chat_id=chat_id,
            title=content,
            mode="message",
            content=content,
            run_at="+1d",
            cron=None,
            timezone=None,
        )
    )


async def still_answered(telegram: FakeTelegramServer, text: str = "still there?") -> None:
    telegram.private_text(ALICE, text)
    await telegram.wait_for(lambda: f"You said: {text}" in telegram.texts_to(ALICE.id), WITHIN)


# ---- albums ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["album_caption_on_first", "album_caption_on_last"])
async def test_album_is_one_message_answered_once(
    fixture: str,
    tmp_path: Path,
    telegram: FakeTelegramServer,
    anthropic_fake: FakeAnthropicServer,
) -> None:
    anthropic_fake.responder = echo
    telegram.serve_photos(load_fixture(fixture))
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.replay(load_fixture(fixture), ids={TELEGRAPH_USER: ALICE.id})
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        await still_answered(telegram)
        await settled_reply_count(tmp_path, 2)
    assert telegram.texts_to(ALICE.id) == [
        f"You said: {CAPTION}\n\n[album of 3 photos]",
        "You said: still there?",
    ]
    assert [row["content"] for row in messages_of(tmp_path, "user")] == [
        f"{CAPTION}\n\n[album of 3 photos]",
        "still there?",
    ]
    assert len(anthropic_fake.requests) == 2
    assert len(images_of(anthropic_fake.requests[0])) == 3  # the album's pictures, in one turn


async def test_album_of_photos_and_a_video_counts_each_kind(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    photos = load_fixture("album_caption_on_first")[:2]
    video = load_fixture("teloxide_media_group_part_video")
    telegram.serve_photos(photos)
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.replay(
            [*photos, {"update_id": 0, "message": video}],
            ids={TELEGRAPH_USER: ALICE.id, TELOXIDE_USER: ALICE.id},
            media_group_id=photos[0]["message"]["media_group_id"],
        )
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        await still_answered(telegram)
    assert telegram.texts_to(ALICE.id) == [
        f"You said: {CAPTION}\n\n[album of 2 photos and 1 video]",
        "You said: still there?",
    ]


async def test_album_without_caption_is_one_message_of_its_pictures(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    telegram.serve_photos(load_fixture("album_without_caption"))
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.replay(load_fixture("album_without_caption"), ids={TELEGRAPH_USER: ALICE.id})
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        await still_answered(telegram)
    assert telegram.texts_to(ALICE.id) == [
        "You said: [album of 3 photos]",
        "You said: still there?",
    ]
    assert [row["content"] for row in messages_of(tmp_path, "user")] == [
        "[album of 3 photos]",
        "still there?",
    ]
    assert len(images_of(anthropic_fake.requests[0])) == 3


async def test_an_album_of_videos_gets_one_notice(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    video = load_fixture("teloxide_media_group_part_video")
    second = {**video, "message_id": video["message_id"] + 1}
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        telegram.replay([video, second], ids={TELOXIDE_USER: ALICE.id}, chat=private_chat(ALICE))
        await still_answered(telegram)
    assert telegram.texts_to(ALICE.id) == [ONLY_TEXT, "You said: still there?"]


async def test_album_split_across_batches_is_still_answered_once(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    ids = {TELEGRAPH_USER: ALICE.id}
    captioned = load_fixture("album_caption_on_first")
    bare = load_fixture("album_without_caption")
    telegram.serve_photos(captioned)
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        # The captioned part comes alone; the rest of its album in a later getUpdates answer.
        telegram.replay(captioned[:1], ids=ids)
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        telegram.replay(captioned[1:], ids=ids)
        await telegram.wait_for_messages(ALICE.id, 2, WITHIN)
        # A caption-less album whose parts are split the same way.
        telegram.replay(bare[:1], ids=ids, media_group_id="another-album")
        await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
        telegram.replay(bare[1:], ids=ids, media_group_id="another-album")
        await telegram.wait_for_messages(ALICE.id, 4, WITHIN)
        await still_answered(telegram)
    # The parts that came late are a message of their own: no picture is dropped.
    assert telegram.texts_to(ALICE.id) == [
        f"You said: {CAPTION}\n\n[a photo from an album]",
        "You said: [another part of the same album]",
        "You said: [a photo from an album]",
        "You said: [another part of the same album]",
        "You said: still there?",
    ]
    assert [len(images_of(body)) for body in anthropic_fake.requests] == [1, 2, 1, 2, 0]


async def test_album_caption_is_stored_before_its_update_is_confirmed(
    telegram: FakeTelegramServer,
) -> None:
    """The part that carries the caption is confirmed only once the album's message is
    stored; the handler never waits for later parts (they are handled after it returned)."""
    release = asyncio.Event()
    submitted: list[InboundMessage] = []

    class SlowInbox:
        async def submit(self, message: InboundMessage) -> Submission:
            submitted.append(message)
            await release.wait()
            return Submission(True, message_id=1)

        async def new_conversation(self, channel: str, chat_id: str) -> str:
            return ""

        async def describe_reminders(self, channel: str, chat_id: str) -> str:
            return ""

        async def migrate_chat(self, channel: str, old_chat_id: str, new_chat_id: str) -> None:
            return None

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
        [first, *_] = telegram.replay(
            load_fixture("album_caption_on_last"), ids={TELEGRAPH_USER: ALICE.id}
        )
        await wait_until(lambda: submitted, WITHIN)
        captioned_update = first["update_id"] + 2
        # The updater's next getUpdates, which would confirm the album, is made and waits
        # until the caption is stored: none went out meanwhile.
        await wait_until(lambda: awaiting(DurableUpdateQueue.all_handled), WITHIN)
        assert max(telegram.get_updates_offsets) <= captioned_update
        assert telegram.pending_updates == 3  # none confirmed while the caption is not stored
        release.set()
        await telegram.wait_for(lambda: telegram.pending_updates == 0, WITHIN)
    finally:
        release.set()
        await channel.stop()
        await channel.close()
    [message] = submitted
    assert message.text == f"{CAPTION}\n\n[album of 3 photos]"
    assert telegram.texts_to(ALICE.id) == []  # no notice for the parts before the caption


async def test_album_over_a_webhook_is_answered_once(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    port = free_port()
    webhook = {"url": f"http://127.0.0.1:{port}/hook", "listen": "127.0.0.1", "port": port}
    telegram.serve_photos(load_fixture("album_caption_on_first"))
    async with bruce_on_telegram(
        tmp_path, telegram, anthropic_fake, mode="webhook", webhook=webhook
    ):
        telegram.replay(load_fixture("album_caption_on_first"), ids={TELEGRAPH_USER: ALICE.id})
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        await still_answered(telegram)
    # Telegram posts one update at a time here: the count is what had arrived with the caption;
    # the parts posted after it came as messages of their own (answered together or apart, as
    # they arrived during the first turn or after it).
    texts = telegram.texts_to(ALICE.id)
    assert texts[0] == f"You said: {CAPTION}\n\n[a photo from an album]"
    assert texts[-1] == "You said: still there?"
    assert texts[1:-1] and all(
        text.startswith("You said: [another part of the same album]") for text in texts[1:-1]
    )
    assert sum(len(images_of(body)) for body in anthropic_fake.requests) == 3


# ---- service messages and other content --------------------------------------------------------


async def test_service_messages_in_a_private_chat_are_ignored_and_content_gets_the_notice(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    alice = ALICE.as_dict()
    ids = {TELOXIDE_USER: ALICE.id, 408258968: ALICE.id}
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        # Service messages: the user pinned a message, set auto-delete, shared a chat.
        telegram.replay(
            load_fixture("teloxide_pinned_message_update"), ids=ids, chat=private_chat(ALICE)
        )
        telegram.replay(load_fixture("built_auto_delete_timer_private"), ids=ids)
        telegram.replay(load_fixture("teloxide_chat_shared_private"), ids=ids, **{"from": alice})
        telegram.replay(load_fixture("teloxide_empty_message_private"), ids={1234567890: ALICE.id})
        # Real content Bruce cannot read.
        telegram.replay(load_fixture("teloxide_sticker_private"), ids=ids)
        telegram.replay(
            load_fixture("teloxide_location_venue_private"),
            chat=private_chat(ALICE),
            **{"from": alice},
        )
        await still_answered(telegram)
    assert telegram.texts_to(ALICE.id) == [ONLY_TEXT] * 2 + ["You said: still there?"]
    assert [row["content"] for row in messages_of(tmp_path, "user")] == ["still there?"]


async def test_group_service_messages_are_ignored(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    group = -1001276785818  # teloxide's dev supergroup, as recorded
    ids = {408258968: ALICE.id}
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        for name in (
            "built_new_chat_members",
            "built_left_chat_member",
            "built_new_chat_title",
            "built_new_chat_photo",
            "teloxide_video_chat_started",  # sent by GroupAnonymousBot, with sender_chat
            "teloxide_pinned_message_update",
            "teloxide_forum_topic_closed",
        ):
            telegram.replay(load_fixture(name), ids=ids)
        telegram.group_text(group, ALICE, "anyone there?", mention=True, chat_type="supergroup")
        [reply] = await telegram.wait_for_messages(group, 1, WITHIN)
        await still_answered(telegram)
    assert reply.plain == "You said: Alice: anyone there?"
    assert telegram.texts_to(-1001331354980) == []  # the video chat's group
    assert [row["content"] for row in messages_of(tmp_path, "user")] == [
        "anyone there?",
        "still there?",
    ]


# ---- forum topics ----------------------------------------------------------------------------


async def test_each_forum_topic_is_its_own_conversation_and_replies_stay_in_it(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    ids = {WAFFLE: ALICE.id}
    table: dict[int, int] = {}
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake) as bruce:
        [created] = telegram.replay(
            load_fixture("teloxide_forum_topic_created"), ids=ids, renumber=table
        )
        topic = created["message"]["message_id"]
        telegram.replay(
            load_fixture("teloxide_forum_topic_message"),
            ids=ids,
            renumber=table,
            text="@bruce_test_bot the launch is on Friday",
            entities=[MENTION],
        )
        [first] = await telegram.wait_for_messages(FORUM, 1, WITHIN)
        assert first.thread_id == topic and first.params["message_thread_id"] == str(topic)
        assert first.plain == "You said: вафель': the launch is on Friday"

        # A second topic, and the General topic: each its own conversation.
        telegram.group_text(FORUM, ALICE, "when is the launch?", mention=True, topic=topic + 50)
        telegram.group_text(FORUM, ALICE, "hello General", mention=True, topic=0)
        replies = await telegram.wait_for_messages(FORUM, 3, WITHIN)
        assert sorted((r.thread_id or 0, r.plain) for r in replies[1:]) == [
            (0, "You said: Alice: hello General"),
            (topic + 50, "You said: Alice: when is the launch?"),
        ]
        general = next(r for r in replies[1:] if r.thread_id is None)
        assert "message_thread_id" not in general.params
        assert all("Friday" not in json.dumps(r["messages"]) for r in anthropic_fake.requests[1:])

        # A long answer in parts, a refused markup, a notice, a command: all in the topic.
        anthropic_fake.script("\n\n".join(f"**Point {n}.** " + "y" * 300 for n in range(40)))
        telegram.group_text(FORUM, ALICE, "tell me everything", mention=True, topic=topic)
        await settled_reply_count(tmp_path, 4)
        anthropic_fake.script("**Done**")
        telegram.reject_markup_next()
        telegram.group_text(FORUM, ALICE, "done?", mention=True, topic=topic)
        await settled_reply_count(tmp_path, 5)
        sticker = load_fixture("teloxide_sticker_private")["sticker"]
        telegram.queue_message(
            FORUM,
            "supergroup",
            ALICE,
            topic=topic,
            sticker=sticker,
            reply_to_message=telegram.bot_message(first),
        )
        telegram.command(ALICE, "/help@bruce_test_bot", chat_id=FORUM, topic=topic)
        await telegram.wait_for(lambda: any("/new" in t for t in telegram.texts_to(FORUM)))

        # A reminder for the topic is delivered into it.
        task = await reminder_for(bruce, f"{FORUM}/{topic}", "Ship it")
        await bruce.tasks.firing.fire(task.id)  # as the scheduler would, at its time
        await telegram.wait_for(lambda: "⏰ Ship it" in telegram.texts_to(FORUM), WITHIN)
        telegram.group_text(FORUM, ALICE, "still there?", mention=True, topic=topic)
        await telegram.wait_for(
            lambda: "You said: Alice: still there?" in telegram.texts_to(FORUM), WITHIN
        )
    in_topic = [sent for sent in telegram.sent_to(FORUM) if sent.thread_id == topic]
    elsewhere = [sent.plain for sent in telegram.sent_to(FORUM) if sent.thread_id != topic]
    assert sorted(elsewhere) == [
        "You said: Alice: hello General",
        "You said: Alice: when is the launch?",
    ]
    assert len([s for s in in_topic if "Point" in s.plain]) >= 3
    assert any(s.plain == "**Done**" and s.parse_mode is None for s in in_topic)
    assert ONLY_TEXT in [s.plain for s in in_topic]
    assert sessions(tmp_path) == [f"{FORUM}/{topic}", f"{FORUM}/{topic + 50}", str(FORUM)]


async def test_reply_threads_and_general_replies_are_not_topics(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    plain_supergroup = -1001293752024  # teloxide issue 1107, as recorded
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        # A reply thread in a supergroup without topics: message_thread_id, no is_topic_message.
        telegram.replay(
            load_fixture("teloxide_reply_thread_command_update"),
            ids={5964236329: ALICE.id},
            text="@bruce_test_bot is this legit?",
            entities=[MENTION],
        )
        [thread_reply] = await telegram.wait_for_messages(plain_supergroup, 1, WITHIN)
        # A reply to the bot in a forum's General topic: the thread id is the replied message.
        telegram.replay(load_fixture("built_general_topic_reply_to_bot"), ids={WAFFLE: ALICE.id})
        [general_reply] = await telegram.wait_for_messages(FORUM, 1, WITHIN)
        await still_answered(telegram)
    assert thread_reply.plain == "You said: the Cable Guy: is this legit?"
    assert "message_thread_id" not in thread_reply.params
    assert general_reply.plain == "You said: вафель': and what about tomorrow?"
    assert general_reply.thread_id is None and "message_thread_id" not in general_reply.params
    assert sessions(tmp_path) == [str(plain_supergroup), str(FORUM), str(ALICE.id)]


async def test_a_topic_the_bot_opened_does_not_address_every_message_to_it(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    table: dict[int, int] = {}
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        # Every message in a topic "replies" to the topic's first message; here the bot
        # opened the topic, so that first message is the bot's.
        [update] = telegram.replay(
            load_fixture("teloxide_forum_topic_message"),
            ids={WAFFLE: BOT_ID},
            renumber=table,
            **{"from": ALICE.as_dict()},
        )
        topic = update["message"]["message_thread_id"]
        telegram.group_text(FORUM, ALICE, "and you, Bruce?", mention=True, topic=topic)
        [reply] = await telegram.wait_for_messages(FORUM, 1, WITHIN)
        await still_answered(telegram)
    assert reply.plain == "You said: Alice: and you, Bruce?" and reply.thread_id == topic
    assert [row["content"] for row in messages_of(tmp_path, "user")] == [
        "and you, Bruce?",
        "still there?",
    ]


# ---- supergroup migration --------------------------------------------------------------------


async def test_an_announced_upgrade_moves_the_conversation_and_its_reminders(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    ids = {MIGRATOR: ALICE.id}
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake) as bruce:
        telegram.group_text(OLD_GROUP, ALICE, "the code is 42", mention=True)
        await telegram.wait_for_messages(OLD_GROUP, 1, WITHIN)
        task = await reminder_for(bruce, str(OLD_GROUP), "Water the plants")
        telegram.upgrade_group(OLD_GROUP, NEW_SUPERGROUP)
        telegram.replay(load_fixture("teloxide_migrate_to_chat_id"), ids=ids)
        telegram.replay(load_fixture("teloxide_migrate_from_chat_id"), ids=ids)
        await wait_until(lambda: sessions(tmp_path) == [str(NEW_SUPERGROUP)], WITHIN)
        await bruce.tasks.firing.fire(task.id)
        telegram.group_text(
            NEW_SUPERGROUP, ALICE, "what is the code?", mention=True, chat_type="supergroup"
        )
        await telegram.wait_for_messages(NEW_SUPERGROUP, 2, WITHIN)
        await still_answered(telegram)
    assert telegram.texts_to(OLD_GROUP) == ["You said: Alice: the code is 42"]
    assert telegram.texts_to(NEW_SUPERGROUP) == [
        "⏰ Water the plants",
        "You said: Alice: what is the code?",
    ]
    assert "Alice: the code is 42" in user_texts(anthropic_fake.requests[1])  # same session
    [row] = db_rows(tmp_path, "SELECT chat_id FROM proactive_tasks")
    assert row["chat_id"] == str(NEW_SUPERGROUP)
    assert telegram.texts_to(ALICE.id) == ["You said: still there?"]


async def test_a_reply_that_hits_chat_migrated_is_resent_to_the_supergroup(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    thinking = asyncio.Event()
    upgraded = asyncio.Event()

    async def slow_echo(body: dict[str, Any]) -> str:
        if "the plan" in last_user_text(body):
            thinking.set()
            await upgraded.wait()
        return echo(body)

    anthropic_fake.responder = slow_echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake) as bruce:
        telegram.group_text(OLD_GROUP, ALICE, "what's the plan?", mention=True)
        await asyncio.wait_for(thinking.wait(), WITHIN)
        task = await reminder_for(bruce, str(OLD_GROUP), "Standup")
        # The group is upgraded while Bruce thinks; the service messages are not seen.
        telegram.upgrade_group(OLD_GROUP, NEW_SUPERGROUP)
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{telegram.base_url}{telegram.token}/sendMessage",
                data={"chat_id": str(OLD_GROUP), "text": "probe"},
            ) as response,
        ):
            migrated_error = await response.json()
        upgraded.set()
        [answer] = await telegram.wait_for_messages(NEW_SUPERGROUP, 1, WITHIN)
        await settled_reply_count(tmp_path, 1)
        await bruce.tasks.firing.fire(task.id)
        await telegram.wait_for_messages(NEW_SUPERGROUP, 2, WITHIN)
        telegram.group_text(
            NEW_SUPERGROUP, ALICE, "and then?", mention=True, chat_type="supergroup"
        )
        await telegram.wait_for_messages(NEW_SUPERGROUP, 3, WITHIN)
        await still_answered(telegram)
    assert answer.plain == "You said: Alice: what's the plan?"
    recorded = load_fixture("gatus179_group_upgraded_error")  # what Telegram answered
    assert migrated_error == {
        **recorded,
        "parameters": {"migrate_to_chat_id": NEW_SUPERGROUP},
    }
    assert telegram.texts_to(OLD_GROUP) == []
    attempts = [
        call["chat_id"] for call in telegram.calls_of("sendMessage") if call["text"] != "probe"
    ]
    assert attempts[:2] == [str(OLD_GROUP), str(NEW_SUPERGROUP)]
    assert str(OLD_GROUP) not in attempts[2:]  # the reminder went to the new id at once
    assert telegram.texts_to(NEW_SUPERGROUP)[1:] == ["⏰ Standup", "You said: Alice: and then?"]
    [assistant, *_] = messages_of(tmp_path, "assistant")
    assert assistant["status"] == "sent"
    assert sessions(tmp_path) == [str(NEW_SUPERGROUP), str(ALICE.id)]


async def test_an_upgrade_into_a_chat_that_already_has_a_session_keeps_both(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake) as bruce:
        telegram.group_text(
            NEW_SUPERGROUP, ALICE, "hi from the supergroup", mention=True, chat_type="supergroup"
        )
        telegram.group_text(OLD_GROUP, ALICE, "hi from the old group", mention=True)
        await telegram.wait_for_messages(OLD_GROUP, 1, WITHIN)
        await telegram.wait_for_messages(NEW_SUPERGROUP, 1, WITHIN)
        task = await reminder_for(bruce, str(OLD_GROUP), "Renew the domain")
        telegram.upgrade_group(OLD_GROUP, NEW_SUPERGROUP)
        telegram.replay(load_fixture("teloxide_migrate_to_chat_id"), ids={MIGRATOR: ALICE.id})
        await wait_until(
            lambda: (
                db_rows(tmp_path, "SELECT chat_id FROM proactive_tasks")[0]["chat_id"]
                == str(NEW_SUPERGROUP)
            ),
            WITHIN,
        )
        await bruce.tasks.firing.fire(task.id)
        await telegram.wait_for_messages(NEW_SUPERGROUP, 2, WITHIN)
        await still_answered(telegram)
    assert telegram.texts_to(NEW_SUPERGROUP)[-1] == "⏰ Renew the domain"
    assert sessions(tmp_path) == [str(NEW_SUPERGROUP), str(OLD_GROUP), str(ALICE.id)]
    [new_session] = db_rows(
        tmp_path, "SELECT id FROM sessions WHERE chat_id = ?", str(NEW_SUPERGROUP)
    )
    [row] = db_rows(tmp_path, "SELECT session_id FROM proactive_tasks")
    assert row["session_id"] == new_session["id"]


# ---- updates PTB cannot parse ----------------------------------------------------------------


async def test_an_unreadable_update_gets_one_notice_for_allowed_senders_only(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    old_sticker = load_fixture("teloxide_sticker_2019_unparseable")  # no is_video, no type
    with capture_logs() as logs:
        async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
            telegram.replay(old_sticker, ids={TELOXIDE_USER: MALLORY.id})
            telegram.replay(
                old_sticker,
                chat={"id": -500, "type": "group", "title": "G"},
                ids={TELOXIDE_USER: ALICE.id},
            )
            [update] = telegram.replay(old_sticker, ids={TELOXIDE_USER: ALICE.id})
            await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
            await still_answered(telegram)
    assert telegram.texts_to(ALICE.id) == [UNREADABLE, "You said: still there?"]
    assert telegram.sent_to(MALLORY.id) == [] and telegram.sent_to(-500) == []
    malformed = [entry for entry in logs if entry["event"] == "telegram_update_malformed"]
    assert [(e["update_id"], e["chat_id"]) for e in malformed][-1] == (
        update["update_id"],
        ALICE.id,
    )
    assert len(malformed) == 3


# ---- who is speaking, and how ----------------------------------------------------------------


async def test_entities_edits_channel_posts_forwards_and_anonymous_senders(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = echo
    ids = {TELOXIDE_USER: ALICE.id}
    anonymous_group = -1001160242915  # teloxide issue 419, as recorded
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake):
        # UTF-16 offsets: 13 units of emoji before the mention.
        telegram.replay(load_fixture("built_emoji_before_mention_group"))
        [emoji_reply] = await telegram.wait_for_messages(-500, 1, WITHIN)
        # An edit, channel posts and their automatic forward, a message sent via a bot.
        table: dict[int, int] = {}
        telegram.replay(load_fixture("teloxide_text_private"), ids=ids, renumber=table)
        await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        telegram.replay(
            {"edited_message": load_fixture("built_edited_message_private"), "update_id": 0},
            ids=ids,
            renumber=table,  # the same message, edited
        )
        telegram.serve_photos(load_fixture("teloxide_photo_caption_entities"))
        telegram.replay(load_fixture("teloxide_photo_caption_entities"), ids={27433968: ALICE.id})
        await telegram.wait_for_messages(ALICE.id, 2, WITHIN)
        telegram.replay(load_fixture("tdlib46_channel_album_and_automatic_forward"))
        telegram.replay(load_fixture("built_via_bot_private"), ids=ids)
        await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
        # An anonymous admin addresses the bot twice: one polite note, nothing kept.
        for _ in range(2):
            telegram.replay(
                load_fixture("teloxide_anonymous_admin_forward"),
                text="@bruce_test_bot text",
                entities=[MENTION],
            )
        await still_answered(telegram)
    assert emoji_reply.plain == (
        "You said: Alice: \U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f467\U0001f431"
        " whose cat is this?"
    )
    assert telegram.texts_to(ALICE.id) == [
        "You said: Лол кек 😂",
        "You said: www.example.com",
        "You said: Calories in a banana: 89 kcal",
        "You said: still there?",
    ]
    assert telegram.texts_to(anonymous_group) == [ANONYMOUS_REPLY]
    assert telegram.texts_to(-1001000000736) == [] and telegram.texts_to(-1001000000735) == []
    assert [row["content"] for row in messages_of(tmp_path, "user")] == [
        "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f467\U0001f431 whose cat is this?",
        "Лол кек 😂",
        "www.example.com",
        "Calories in a banana: 89 kcal",
        "still there?",
    ]
