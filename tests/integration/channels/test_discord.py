"""The Discord channel end to end: real discord.py inside a running Bruce, talking to the fake
Discord (REST + gateway websocket, tests/fakes/discord_server.py), with the fake Anthropic server
as the model and the SQLite file on disk. Each test checks what a Discord user (or the owner
reading the logs and the database) would notice. Nothing sleeps for a fixed time: every wait is
for a condition, with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from structlog.testing import capture_logs

from bruce_bot.app import Bruce
from bruce_bot.channels.base import DeliveryError
from bruce_bot.channels.discord.channel import DiscordChannel
from bruce_bot.channels.discord.texts import (
    EMPTY_MENTION_REPLY,
    HELP_TEXT,
    ONLY_TEXT_REPLY,
)
from bruce_bot.channels.policy import RESTARTING
from bruce_bot.domain import OutboundMessage
from bruce_bot.pairing import who
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, images_of, last_user_text
from tests.fakes.discord_server import FakeDiscordServer, RouteLimits, user_payload
from tests.integration.support import all_text, db_rows, messages_of

OWNER_ID = 111_000_000_000_000_001
OWNER = user_payload(OWNER_ID, "ada", global_name="Ada Lovelace")
FRIEND_ID = 111_000_000_000_000_002
FRIEND = user_payload(FRIEND_ID, "grace", global_name="Grace")
STRANGER_ID = 222_000_000_000_000_001
STRANGER = user_payload(STRANGER_ID, "mallory")
OTHER_BOT_ID = 333_000_000_000_000_001
OTHER_BOT = user_payload(OTHER_BOT_ID, "otherbot", bot=True)

TEXT = FakeDiscordServer.TEXT_CHANNEL_ID
THREAD = FakeDiscordServer.THREAD_ID


def echo(body: dict[str, Any]) -> str:
    return f"You said: {last_user_text(body)}"


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


@contextlib.asynccontextmanager
async def bruce_on_discord(
    tmp_path: Path,
    anthropic_fake: FakeAnthropicServer,
    discord_fake: FakeDiscordServer,
    *,
    allowed: tuple[int, ...] = (OWNER_ID, FRIEND_ID),
    token: str | None = None,
    web: bool = False,
    adapter: dict[str, Any] | None = None,
    pairing: bool = True,
) -> AsyncIterator[tuple[Bruce, DiscordChannel]]:
    """Bruce with the Discord channel on the fake (built from the config the way `bruce run`
    does, unless `adapter` asks for constructor arguments) and the echoing fake model."""
    if anthropic_fake.responder is None:
        anthropic_fake.responder = echo
    # The plain path: each reply posted once (live replies: test_discord_live.py).
    section = discord_fake.discord_config(list(allowed), streaming=False, pairing=pairing)
    if token is not None:
        section["token"] = token
    config = make_config(
        tmp_path, anthropic_fake.base_url, web={"enabled": web}, channels={"discord": section}
    )
    channels = None if adapter is None else [DiscordChannel(config.channels.discord, **adapter)]
    async with running_bruce(config, tools=ToolRegistry(), channels=channels) as bruce:
        yield bruce, bruce.channels["discord"]  # type: ignore[misc]


def requests_mentioning(anthropic_fake: FakeAnthropicServer, text: str) -> list[dict[str, Any]]:
    return [body for body in anthropic_fake.requests if text in all_text(body)]


def user_rows(data_dir: Path) -> list[Any]:
    return messages_of(data_dir, "user")


async def delivered_replies(data_dir: Path, count: int) -> list[Any]:
    """Wait until `count` replies are stored with status `sent`; returns them."""

    def sent() -> list[Any]:
        rows = [row for row in messages_of(data_dir, "assistant") if row["status"] == "sent"]
        return rows if len(rows) >= count else []

    return await wait_until(sent)


# ---- conversations -------------------------------------------------------------------------


async def test_direct_message_is_answered_in_its_dm_channel(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    text = "hello 👋🏽 — مرحبا بك, שלום עולם"
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        sent = await discord_fake.send_dm(OWNER, text)
        dm = discord_fake.dm_channel_id(OWNER_ID)
        assert await discord_fake.wait_for_sent(dm) == [f"You said: {text}"]
        await delivered_replies(tmp_path, 1)

    (row,) = user_rows(tmp_path)
    assert row["content"] == text
    assert row["platform_message_id"] == sent["id"]
    assert row["author"] == "Ada Lovelace"
    sessions = db_rows(tmp_path, "SELECT channel, chat_id FROM sessions")
    assert [(s["channel"], s["chat_id"]) for s in sessions] == [("discord", str(dm))]
    # Replies never ping anyone, whatever the model writes.
    assert discord_fake.sent[0]["allowed_mentions"] == {"parse": []}


async def test_guild_mention_is_answered_and_the_speaker_is_named_to_the_model(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_guild_message(
            OWNER, "what's the plan?", mention_bot=True, nick="Captain"
        )
        (reply,) = await discord_fake.wait_for_sent(TEXT)
        # Mentioning the bot's own role (Discord's autocomplete offers it) addresses it too.
        await discord_fake.send_guild_message(
            FRIEND,
            f"<@&{FakeDiscordServer.BOT_ROLE_ID}> and you?",
            mention_roles=[str(FakeDiscordServer.BOT_ROLE_ID)],
        )
        await discord_fake.wait_for_sent(TEXT, 2)
        # A mention in the middle goes; the text's own spacing (code!) stays.
        await discord_fake.send_guild_message(
            OWNER,
            f"fix this <@!{FakeDiscordServer.BOT_ID}> please:\n```py\nif x:\n    return  1\n```",
            mentions=[discord_fake.bot],
        )
        replies = await discord_fake.wait_for_sent(TEXT, 3)

    assert reply == "You said: Captain: what's the plan?"
    assert replies[1].startswith("You said: ")
    assert replies[1].endswith("Grace: and you?")
    assert [row["content"] for row in user_rows(tmp_path)] == [
        "what's the plan?",
        "and you?",
        "fix this please:\n```py\nif x:\n    return  1\n```",
    ]


async def test_a_thread_is_a_session_of_its_own(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_guild_message(OWNER, "in the channel", mention_bot=True)
        await discord_fake.wait_for_sent(TEXT)
        await discord_fake.send_guild_message(
            OWNER, "in the thread", channel_id=THREAD, mention_bot=True
        )
        assert await discord_fake.wait_for_sent(THREAD) == ["You said: Ada Lovelace: in the thread"]

    # The thread's request does not carry the channel's conversation.
    (thread_request,) = requests_mentioning(anthropic_fake, "in the thread")
    assert "in the channel" not in all_text(thread_request)
    chats = {row["chat_id"] for row in db_rows(tmp_path, "SELECT chat_id FROM sessions")}
    assert chats == {str(TEXT), str(THREAD)}
    assert len(discord_fake.texts(TEXT)) == 1


async def test_guild_message_without_a_mention_is_ignored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_guild_message(OWNER, "just chatting among humans")
        await discord_fake.send_guild_message(OWNER, "marker", mention_bot=True)
        assert await discord_fake.wait_for_sent(TEXT) == ["You said: Ada Lovelace: marker"]
        await delivered_replies(tmp_path, 1)

    assert requests_mentioning(anthropic_fake, "just chatting") == []
    assert [row["content"] for row in user_rows(tmp_path)] == ["marker"]
    assert discord_fake.texts(TEXT) == ["You said: Ada Lovelace: marker"]


async def test_long_answer_arrives_in_parts_of_at_most_2000_characters_in_order(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    paragraphs = [f"Part {i}: " + " ".join(f"word{i}_{j}" for j in range(60)) for i in range(10)]
    answer = "\n\n".join(paragraphs)
    assert len(answer) > 5000
    anthropic_fake.responder = lambda body: answer
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "tell me everything")
        await delivered_replies(tmp_path, 1)

    parts = discord_fake.texts(discord_fake.dm_channel_id(OWNER_ID))
    assert len(parts) >= 3
    assert all(len(part) <= 2000 for part in parts)
    assert " ".join(parts).split() == answer.split()  # every word, once, in order


async def test_a_long_answer_keeps_to_discords_rate_limit_and_arrives_whole_in_order(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    # Discord's limit on a channel's posts (5 per 5 s, here 2 per second to keep the test
    # short): discord.py reads the rate-limit headers and waits for the bucket to reset, or
    # retries a 429 after its retry_after; every part arrives once, in order.
    paragraphs = [f"Part {i}: " + " ".join(f"word{i}_{j}" for j in range(60)) for i in range(14)]
    answer = "\n\n".join(paragraphs)
    anthropic_fake.responder = lambda body: answer
    async with FakeDiscordServer(limits=RouteLimits(per_route=2, window=1.0)) as discord_fake:
        async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
            await discord_fake.send_dm(OWNER, "tell me everything")
            await delivered_replies(tmp_path, 1)
        parts = discord_fake.texts(discord_fake.dm_channel_id(OWNER_ID))
        assert len(parts) >= 5
        assert discord_fake.exhausted >= 2  # the bucket ran dry and was waited out
        assert " ".join(parts).split() == answer.split()  # every word, once, in order


@pytest.mark.parametrize("status", [429, 503])
async def test_failed_send_is_retried_and_delivered_exactly_once(
    tmp_path: Path,
    anthropic_fake: FakeAnthropicServer,
    discord_fake: FakeDiscordServer,
    status: int,
) -> None:
    # 429 is retried by discord.py after retry_after; 503 comes back to the outbox, which retries.
    discord_fake.fail_sends(status, retry_after=0.05)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "are you there?")
        (reply,) = await delivered_replies(tmp_path, 1)

    assert discord_fake.send_attempts == 2
    assert discord_fake.texts(discord_fake.dm_channel_id(OWNER_ID)) == [reply["content"]]


async def test_send_errors_become_delivery_errors_the_outbox_understands(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    async def send(chat_id: int | str, text: str = "hi") -> None:
        await adapter.send(OutboundMessage("discord", str(chat_id), text))

    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake) as (_, adapter):
        # A DM channel Bruce never saw (a reminder after a restart) is fetched and used.
        fresh_dm = discord_fake.dm_channel_id(FRIEND_ID)
        await send(fresh_dm, "a reminder")
        assert discord_fake.texts(fresh_dm) == ["a reminder"]
        assert ("GET", f"/channels/{fresh_dm}") in discord_fake.rest_requests

        permanent: dict[str, Any] = {}
        with pytest.raises(DeliveryError) as unknown:
            await send(123_456_789)  # no such channel
        permanent["unknown channel"] = unknown.value
        discord_fake.fail_sends(403, channel_id=TEXT)
        with pytest.raises(DeliveryError) as forbidden:
            await send(TEXT)
        permanent["forbidden"] = forbidden.value
        with pytest.raises(DeliveryError) as too_long:
            await send(TEXT, "x" * 2001)
        permanent["too long"] = too_long.value
        with pytest.raises(DeliveryError) as not_an_id:
            await send("general")
        permanent["not an id"] = not_an_id.value
        discord_fake.fail_sends(503, channel_id=TEXT)
        with pytest.raises(DeliveryError) as unavailable:
            await send(TEXT)

    assert {name: error.permanent for name, error in permanent.items()} == dict.fromkeys(
        permanent, True
    )
    assert unavailable.value.permanent is False


# ---- who may talk to Bruce -----------------------------------------------------------------


async def test_stranger_is_told_once_an_hour_and_nothing_of_theirs_is_stored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    now = [1000.0]
    stranger_dm = discord_fake.dm_channel_id(STRANGER_ID)
    async with bruce_on_discord(
        tmp_path, anthropic_fake, discord_fake, adapter={"clock": lambda: now[0]}, pairing=False
    ):
        await discord_fake.send_dm(STRANGER, "hi, who are you? my card is 4111")
        await discord_fake.send_dm(STRANGER, "hello??")
        # A mention in a guild from the stranger counts against the same hour.
        await discord_fake.send_guild_message(STRANGER, "hey bot", mention_bot=True)
        # The owner's message is handled after the stranger's; once answered, theirs were too.
        await discord_fake.send_dm(OWNER, "marker")
        await discord_fake.wait_for_sent(discord_fake.dm_channel_id(OWNER_ID))
        (refusal,) = discord_fake.texts(stranger_dm)
        assert discord_fake.texts(TEXT) == []

        now[0] += 3601
        await discord_fake.send_dm(STRANGER, "it's been an hour")
        assert len(await discord_fake.wait_for_sent(stranger_dm, 2)) == 2

    assert str(STRANGER_ID) in refusal
    assert "channels.discord.allowed_user_ids" in refusal and "Settings page" in refusal
    assert [row["content"] for row in user_rows(tmp_path)] == ["marker"]
    assert requests_mentioning(anthropic_fake, "4111") == []
    chats = [row["chat_id"] for row in db_rows(tmp_path, "SELECT chat_id FROM sessions")]
    assert str(stranger_dm) not in chats


async def test_empty_allowlist_admits_nobody_and_says_so_at_start(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    with capture_logs() as logs:
        async with bruce_on_discord(
            tmp_path, anthropic_fake, discord_fake, allowed=(), pairing=False
        ):
            await discord_fake.send_dm(OWNER, "it's me, your owner")
            (refusal,) = await discord_fake.wait_for_sent(discord_fake.dm_channel_id(OWNER_ID))

    warnings = [
        entry
        for entry in logs
        if entry["event"] == "allowlist_empty" and entry["channel"] == "discord"
    ]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    assert "channels.discord.allowed_user_ids" in warnings[0]["hint"]
    assert str(OWNER_ID) in refusal
    assert user_rows(tmp_path) == []
    assert anthropic_fake.requests == []


async def test_a_stranger_pairs_with_a_code_and_their_next_message_is_answered(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    stranger_dm = discord_fake.dm_channel_id(STRANGER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake) as (bruce, _):
        await discord_fake.send_dm(STRANGER, "hi, my card is 4111")
        (offer,) = await discord_fake.wait_for_sent(stranger_dm)
        match = re.search(r"pairing code is ([A-Z0-9]{4}-[A-Z0-9]{4})", offer)
        assert match, offer
        assert "valid for 30 minutes" in offer and "People" in offer
        assert user_rows(tmp_path) == []
        assert bruce.parts is not None
        # What the People page's Approve does; the code as the owner might type it.
        person = await bruce.parts.pairing.approve(match[1].lower(), by="dashboard")
        assert (person.user_id, person.name, person.username) == (STRANGER_ID, "mallory", "mallory")
        # The display name only repeats the @username: shown once.
        assert who(person.user_id, person.username, person.name) == f"{STRANGER_ID} @mallory"
        welcome = (await discord_fake.wait_for_sent(stranger_dm, 2))[1]
        assert welcome.startswith("You're in")
        await discord_fake.send_dm(STRANGER, "thanks! what's 2+2?")
        replies = await discord_fake.wait_for_sent(stranger_dm, 3)
        assert replies[2] == "You said: thanks! what's 2+2?"
    assert [row["content"] for row in user_rows(tmp_path)] == ["thanks! what's 2+2?"]
    assert requests_mentioning(anthropic_fake, "4111") == []


async def test_messages_from_bots_webhooks_and_itself_are_ignored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    # Even an allowlisted id is ignored when it is a bot: two bots must never talk in circles.
    allowed = (OWNER_ID, OTHER_BOT_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake, allowed=allowed):
        await discord_fake.send_dm(OTHER_BOT, "beep from a bot")
        await discord_fake.send_guild_message(OTHER_BOT, "beep in the guild", mention_bot=True)
        await discord_fake.send_guild_message(
            OWNER, "beep via a webhook", mention_bot=True, webhook_id="444000000000000001"
        )
        await discord_fake.send_guild_message(
            discord_fake.bot, "beep from myself", mention_bot=True
        )
        dm = discord_fake.dm_channel_id(OWNER_ID)
        await discord_fake.send_dm(OWNER, "first")
        await discord_fake.wait_for_sent(dm)
        # The fake echoes Bruce's own reply back over the gateway, like Discord does; it comes
        # before this second message and must not be taken for a message to answer.
        await discord_fake.send_dm(OWNER, "second")
        await discord_fake.wait_for_sent(dm, 2)
        await delivered_replies(tmp_path, 2)

    assert [row["content"] for row in user_rows(tmp_path)] == ["first", "second"]
    assert requests_mentioning(anthropic_fake, "beep") == []
    assert discord_fake.texts(TEXT) == []
    assert discord_fake.texts(dm) == ["You said: first", "You said: second"]


# ---- commands and unusual input ------------------------------------------------------------


async def test_new_starts_a_fresh_conversation(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "my name is Ada")
        await discord_fake.wait_for_sent(dm)
        await discord_fake.send_dm(OWNER, "what is my name?")
        await discord_fake.wait_for_sent(dm, 2)
        await discord_fake.send_dm(OWNER, "/new")
        reset = (await discord_fake.wait_for_sent(dm, 3))[2]
        await discord_fake.send_dm(OWNER, "what is my name now?")
        await discord_fake.wait_for_sent(dm, 4)

    assert "new conversation" in reset.lower()
    before, after = (
        requests_mentioning(anthropic_fake, "what is my name?")[0],
        requests_mentioning(anthropic_fake, "what is my name now?")[0],
    )
    assert "my name is Ada" in all_text(before)
    assert "my name is Ada" not in all_text(after)
    assert requests_mentioning(anthropic_fake, "/new") == []


async def test_commands_are_answered_without_the_model(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "/help")
        await discord_fake.wait_for_sent(dm)
        await discord_fake.send_dm(OWNER, "!reminders")
        await discord_fake.wait_for_sent(dm, 2)
        # In a guild the mention is stripped first, then the command is recognised.
        await discord_fake.send_guild_message(OWNER, "!NEW", mention_bot=True)
        await discord_fake.wait_for_sent(TEXT)

    help_text, reminders = discord_fake.texts(dm)
    assert help_text == HELP_TEXT
    assert reminders and not reminders.startswith("You said")
    assert "new conversation" in discord_fake.texts(TEXT)[0].lower()
    assert anthropic_fake.requests == []
    assert user_rows(tmp_path) == []


async def test_pictures_and_files_are_read_and_other_non_text_gets_a_short_answer(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    def picture(n: int) -> dict[str, Any]:
        out = io.BytesIO()
        Image.new("RGB", (2400, 1200), (n * 40, 90, 90)).save(out, "PNG")
        return discord_fake.attachment(f"photo{n}.png", out.getvalue(), "image/png")

    anthropic_fake.responder = lambda body: (
        f"{len(images_of(body))} picture(s). You said: {last_user_text(body)}"
    )
    sticker = {"id": "666000000000000001", "name": "wave", "format_type": 1}
    notes = discord_fake.attachment("notes.txt", b"milk, eggs, coffee", "text/plain; charset=utf-8")
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "", attachments=[picture(1)])
        await discord_fake.wait_for_sent(dm)
        await discord_fake.send_dm(OWNER, "", sticker_items=[sticker])
        await discord_fake.wait_for_sent(dm, 2)
        await discord_fake.send_dm(OWNER, "look at this", attachments=[picture(2)])
        await discord_fake.wait_for_sent(dm, 3)
        await discord_fake.send_dm(OWNER, "", attachments=[notes])
        await discord_fake.wait_for_sent(dm, 4)
        await discord_fake.send_guild_message(OWNER, "", mention_bot=True)  # a bare mention
        await discord_fake.wait_for_sent(TEXT)

    first, sticker_reply, captioned, listed = discord_fake.texts(dm)
    assert first == "1 picture(s). You said:"  # the reply is stripped
    assert sticker_reply == ONLY_TEXT_REPLY
    assert captioned == "1 picture(s). You said: look at this"
    assert listed.startswith("0 picture(s). You said: <untrusted_content")
    assert "milk, eggs, coffee" in listed and 'Document "notes.txt"' in listed
    assert discord_fake.texts(TEXT) == [EMPTY_MENTION_REPLY]
    assert [row["content"] for row in user_rows(tmp_path)] == ["", "look at this", ""]
    assert len(discord_fake.cdn_downloads) == 3  # each file fetched once from the CDN


async def test_malformed_gateway_events_do_not_break_the_session(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        no_id = discord_fake.message_payload(OWNER, "no id", channel_id=dm, guild=False)
        del no_id["id"]
        no_author = discord_fake.message_payload(OWNER, "no author", channel_id=dm, guild=False)
        del no_author["author"]
        for event, data in [
            ("MESSAGE_CREATE", no_id),
            ("MESSAGE_CREATE", no_author),
            ("MESSAGE_CREATE", None),
            ("MESSAGE_CREATE", {"channel_id": "not-a-number"}),
            ("GUILD_CREATE", {"name": "no id"}),
            ("SOMETHING_DISCORD_ADDED_LATER", {"x": 1}),
        ]:
            await discord_fake.dispatch(event, data)
        await discord_fake.send_dm(OWNER, "still there?")
        assert await discord_fake.wait_for_sent(dm) == ["You said: still there?"]

    # The same session carried on: no new IDENTIFY, no RESUME.
    assert (discord_fake.identifies, discord_fake.resumes) == (1, 0)
    assert [row["content"] for row in user_rows(tmp_path)] == ["still there?"]


async def test_typing_is_shown_while_a_slow_turn_runs(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    release = asyncio.Event()

    async def slow_model(body: dict[str, Any]) -> str:
        await release.wait()
        return "done thinking"

    anthropic_fake.responder = slow_model
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "think hard")
        try:
            await discord_fake.wait_for(lambda: discord_fake.typing.get(dm, 0) >= 1)
            assert discord_fake.texts(dm) == []
        finally:
            release.set()
        assert await discord_fake.wait_for_sent(dm) == ["done thinking"]


async def test_a_turn_running_at_shutdown_still_delivers_its_reply(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    release = asyncio.Event()

    async def slow_model(body: dict[str, Any]) -> str:
        await release.wait()
        return "finished just in time"

    anthropic_fake.responder = slow_model
    config = make_config(
        tmp_path,
        anthropic_fake.base_url,
        web={"enabled": False},
        channels={"discord": discord_fake.discord_config([OWNER_ID], streaming=False)},
    )
    bruce = Bruce(config, tools=ToolRegistry())
    await bruce.start()
    adapter = bruce.channels["discord"]
    assert isinstance(adapter, DiscordChannel)
    dm = discord_fake.dm_channel_id(OWNER_ID)
    stopping: asyncio.Task[None] | None = None
    try:
        await discord_fake.send_dm(OWNER, "slow question")
        await anthropic_fake.wait_for_requests(1)
        stopping = asyncio.create_task(bruce.stop())
        await wait_until(lambda: not adapter.accepting)
        # Intake is off: not taken in, and Discord will not send it again, so the user is
        # asked to resend it rather than left without an answer.
        await discord_fake.send_dm(OWNER, "too late")
        await wait_until(lambda: RESTARTING in discord_fake.texts(dm))
    finally:
        release.set()
        await (stopping or bruce.stop())

    assert discord_fake.texts(dm) == [RESTARTING, "finished just in time"]
    assert [row["content"] for row in user_rows(tmp_path)] == ["slow question"]
    assert not adapter.connected


# ---- the connection ------------------------------------------------------------------------


async def test_gateway_drop_is_resumed_and_bruce_keeps_answering(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "before")
        await discord_fake.wait_for_sent(dm)
        await discord_fake.drop_connection()
        # Sent while the client is away: Discord replays it on RESUME.
        await discord_fake.send_dm(OWNER, "while away")
        await discord_fake.wait_for_session(resumed=1)
        await discord_fake.wait_for_sent(dm, 2)
        await discord_fake.send_dm(OWNER, "after")
        await discord_fake.wait_for_sent(dm, 3)

    assert discord_fake.texts(dm) == [
        "You said: before",
        "You said: while away",
        "You said: after",
    ]
    assert (discord_fake.identifies, discord_fake.resumes) == (1, 1)
    assert discord_fake.gateway_paths == ["/gateway", "/gateway-resume"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_unreachable_discord_does_not_hold_up_start_and_is_retried_in_the_background(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    discord_fake = FakeDiscordServer(port=free_port())  # not listening yet: connection refused
    try:
        with capture_logs() as logs:
            async with bruce_on_discord(
                tmp_path, anthropic_fake, discord_fake, adapter={"ready_timeout": 0.2}
            ) as (_, adapter):
                assert not adapter.connected
                assert adapter.gave_up is None
                await discord_fake.start()  # Discord is back
                await wait_until(lambda: adapter.connected)
                await discord_fake.send_dm(OWNER, "you made it")
                dm = discord_fake.dm_channel_id(OWNER_ID)
                assert await discord_fake.wait_for_sent(dm) == ["You said: you made it"]
    finally:
        await discord_fake.stop()

    events = [entry["event"] for entry in logs]
    assert "discord_not_connected_yet" in events
    assert "discord_retrying" in events  # the failed login, tried again
    assert not [entry for entry in logs if entry["log_level"] == "error"]


async def test_missing_message_content_intent_is_reported_once_and_bruce_keeps_running(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with FakeDiscordServer(message_content_intent=False) as discord_fake:
        with capture_logs() as logs:
            async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake, web=True) as (
                bruce,
                adapter,
            ):
                assert adapter.gave_up is not None  # start() saw the client give up
                async with httpx.AsyncClient(base_url=bruce.web_url or "") as web:
                    assert (await web.get("/healthz")).status_code == 200
                assert not adapter.connected

    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [entry["event"] for entry in errors] == ["discord_message_content_intent_missing"]
    assert "enable MESSAGE CONTENT INTENT in the Discord developer portal" in errors[0]["fix"]
    assert "Privileged Gateway Intents" in errors[0]["fix"]
    assert discord_fake.close_codes == [4014]  # one attempt: no crash loop
    assert discord_fake.identifies == 0


async def test_bad_token_is_reported_with_the_config_key_and_bruce_keeps_running(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    with capture_logs() as logs:
        async with bruce_on_discord(
            tmp_path, anthropic_fake, discord_fake, token="not-the-token"
        ) as (bruce, adapter):
            assert adapter.gave_up is not None
            assert bruce.inbox is not None

    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [entry["event"] for entry in errors] == ["discord_login_failed"]
    assert "channels.discord.token" in errors[0]["fix"]
    assert discord_fake.rest_requests == [("GET", "/users/@me")]
