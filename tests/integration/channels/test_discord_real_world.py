"""Discord as it really arrives: payloads recorded from real Discord (tests/fixtures/discord/, each
file's origin in its README) replayed through the fake gateway into real discord.py inside a
running Bruce, with the captured ids replaced by the fake's. Every test checks what the user sees
in the channel (what the fake received as `POST /channels/{id}/messages`) and that the next plain
message is still answered. Nothing sleeps for a fixed time."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from structlog.testing import capture_logs

from bruce_bot.channels.discord.texts import (
    EMPTY_MENTION_REPLY,
    HELP_TEXT,
    ONLY_TEXT_REPLY,
    SERVER_HELP_TEXT,
)
from bruce_bot.media.preparation import NO_TRANSCRIPTION
from bruce_bot.tools.registry import as_untrusted
from tests.conftest import wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, images_of
from tests.fakes.discord_server import FakeDiscordServer, adapt_ids, load_fixture, user_payload
from tests.integration.channels.test_discord import (
    FRIEND_ID,
    OWNER,
    OWNER_ID,
    TEXT,
    bruce_on_discord,
    user_rows,
)
from tests.integration.support import db_rows

GUILD = FakeDiscordServer.GUILD_ID
BOT_ID = FakeDiscordServer.BOT_ID
BOT_ROLE = FakeDiscordServer.BOT_ROLE_ID

# Ids as captured (see tests/fixtures/discord/README.md).
DOCS_AUTHOR = 53908099506183680  # "Mason", in Discord's own examples
DOCS_DM = 290926798999357250
REPLY_GUILD, REPLY_CHANNEL = 569855591489470485, 654355510669344798
REPLIED_AUTHOR, REPLIED_MESSAGE = 377812572784820226, 987995227254054952
REPLY_AUTHOR = 377812572784820999
FORWARDED_ROLE = 1291689786570047529
FORWARD_AUTHOR, FORWARD_CHANNEL = 1291689500000000001, 1291690011397181512
FORWARDED_MESSAGE = 306588351130107906  # the message the captions forward points at


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


def in_dm(fake: FakeDiscordServer) -> dict[int, int]:
    """Captured ids of Discord's examples → the owner writing in their DM with Bruce."""
    return {DOCS_AUTHOR: OWNER_ID, DOCS_DM: fake.dm_channel_id(OWNER_ID)}


def guild_member() -> dict[str, Any]:
    return {"roles": [], "joined_at": "2024-01-01T00:00:00+00:00", "deaf": False, "mute": False}


async def still_answered_in_dm(fake: FakeDiscordServer) -> None:
    """The session survived: a plain DM is answered next."""
    dm = fake.dm_channel_id(OWNER_ID)
    before = len(fake.texts(dm))
    await fake.send_dm(OWNER, "still there?")
    texts = await fake.wait_for_sent(dm, before + 1)
    assert texts[before:] == ["You said: still there?"]


async def still_answered_in_guild(fake: FakeDiscordServer, channel_id: int = TEXT) -> list[str]:
    """The session survived: a plain mention is answered next; returns the channel's texts."""
    before = len(fake.texts(channel_id))
    await fake.send_guild_message(OWNER, "marker", mention_bot=True, channel_id=channel_id)
    texts = await fake.wait_for_sent(channel_id, before + 1)
    assert texts[before:] == ["You said: Ada Lovelace: marker"]
    return texts


async def bruce_message_in(fake: FakeDiscordServer, channel_id: int = TEXT) -> int:
    """Have Bruce answer a mention in the channel; the id of its answer."""
    before = len(fake.texts(channel_id))
    await fake.send_guild_message(OWNER, "hello", mention_bot=True, channel_id=channel_id)
    await fake.wait_for_sent(channel_id, before + 1)
    (last,) = [m for m in fake.sent if int(m["channel_id"]) == channel_id][-1:]
    return int(last["id"])


# ---- what DMs look like --------------------------------------------------------------------


async def test_dm_as_in_discords_docs_without_member_flags_or_components_is_answered(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.replay("dm_docs_example_message.json", in_dm(discord_fake))
        await discord_fake.wait_for_sent(dm)
        # avatar null, global_name null, discriminator "0": a user of today without a display name
        await discord_fake.replay(
            "dm_user_without_avatar_or_display_name.json", in_dm(discord_fake)
        )
        await discord_fake.wait_for_sent(dm, 2)
        await still_answered_in_dm(discord_fake)

    assert discord_fake.texts(dm)[:2] == ["You said: Supa Hot", "You said: Supa Hot"]
    assert [row["content"] for row in user_rows(tmp_path)][:2] == ["Supa Hot", "Supa Hot"]


async def test_a_recorded_voice_message_and_picture_are_read(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        # No transcription service in this config: the reply says how to set one up.
        await discord_fake.replay("dm_voice_message.json", in_dm(discord_fake))
        await discord_fake.wait_for_sent(dm, 1)
        await discord_fake.replay("dm_attachment_without_text.json", in_dm(discord_fake))
        await discord_fake.wait_for_sent(dm, 2)
    voice, picture = discord_fake.texts(dm)
    assert voice == NO_TRANSCRIPTION
    assert picture.startswith("You said:")
    [(media_type, data)] = images_of(anthropic_fake.requests[-1])
    # hikari's 1844×2638 picture, scaled to a 1568 px long edge (an opaque PNG becomes JPEG)
    assert media_type == "image/jpeg" and Image.open(io.BytesIO(data)).size == (1096, 1568)


async def test_non_text_dms_get_one_notice_each_and_never_a_mention_hint(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    fixtures = [
        "dm_poll.json",  # a poll whose third answer has no text (discord.py needs one)
        "dm_sticker.json",
    ]
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        for count, fixture in enumerate(fixtures, 1):
            await discord_fake.replay(fixture, in_dm(discord_fake))
            await discord_fake.wait_for_sent(dm, count)
        # An empty DM carries nothing at all: still no "write after the mention" in a DM.
        await discord_fake.replay("dm_docs_example_message.json", in_dm(discord_fake), content="")
        await discord_fake.wait_for_sent(dm, 3)
        # Discord delivering the same message twice (the same id): one notice only.
        sticker = load_fixture("dm_sticker.json")
        again = {**in_dm(discord_fake), int(sticker["d"]["id"]): discord_fake.new_id()}
        await discord_fake.replay(sticker, again)
        await discord_fake.replay(sticker, again)
        await discord_fake.wait_for_sent(dm, 4)
        await discord_fake.send_dm(OWNER, "/help")
        await discord_fake.wait_for_sent(dm, 5)
        await still_answered_in_dm(discord_fake)
        await discord_fake.send_guild_message(OWNER, "/help", mention_bot=True)
        (server_help,) = await discord_fake.wait_for_sent(TEXT)

    texts = discord_fake.texts(dm)
    assert texts == [ONLY_TEXT_REPLY] * 4 + [HELP_TEXT, "You said: still there?"]
    assert not [text for text in texts if "mention" in text.lower()]
    assert server_help == SERVER_HELP_TEXT and "mention me" in server_help
    assert [row["content"] for row in user_rows(tmp_path)] == ["still there?"]


# ---- replies -------------------------------------------------------------------------------


def reply_ids(bruce_message: int, replied_author: int = BOT_ID) -> dict[int, int]:
    return {
        REPLY_GUILD: GUILD,
        REPLY_CHANNEL: TEXT,
        REPLIED_AUTHOR: replied_author,
        REPLIED_MESSAGE: bruce_message,
        REPLY_AUTHOR: OWNER_ID,
    }


async def test_reply_to_bruce_in_a_guild_is_addressed_with_or_without_the_ping(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        answer = await bruce_message_in(discord_fake)
        # As captured: `mentions` is empty (the reply ping switched off).
        await discord_fake.replay("guild_reply_with_referenced_message.json", reply_ids(answer))
        await discord_fake.wait_for_sent(TEXT, 2)
        # With the ping, Discord lists the replied-to author in `mentions`.
        await discord_fake.replay(
            "guild_reply_with_referenced_message.json",
            reply_ids(answer),
            mentions=[discord_fake.bot],
        )
        await discord_fake.wait_for_sent(TEXT, 3)
        # A reply to someone else's message is not for Bruce.
        await discord_fake.replay(
            "guild_reply_with_referenced_message.json", reply_ids(answer, FRIEND_ID)
        )
        texts = await still_answered_in_guild(discord_fake)

    assert len(texts) == 4
    assert all(text.endswith(": and what about tomorrow?") for text in texts[1:3])
    contents = [row["content"] for row in user_rows(tmp_path)]
    assert contents == ["hello", "and what about tomorrow?", "and what about tomorrow?", "marker"]


async def test_reply_whose_replied_to_message_is_null_or_left_out(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    """Null (deleted): only an id Bruce sent counts. Left out: Bruce's ids, else one fetch."""

    def reply_to(message_id: int, *, null: bool) -> dict[str, Any]:
        frame = load_fixture("guild_reply_with_referenced_message.json")
        if null:
            frame["d"]["referenced_message"] = None
        else:
            del frame["d"]["referenced_message"]
        frame["d"] = adapt_ids(frame["d"], reply_ids(message_id))
        return frame

    def older(author: dict[str, Any]) -> int:
        message = discord_fake.message_payload(author, "older", channel_id=TEXT, guild=True)
        return int(discord_fake.remember_message(message)["id"])

    def fetches() -> list[str]:
        return [path for method, path in discord_fake.rest_requests if "/messages/" in path]

    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        answer = await bruce_message_in(discord_fake)
        await discord_fake.replay(reply_to(answer, null=True))  # Bruce's own id: answered
        await discord_fake.wait_for_sent(TEXT, 2)
        assert fetches() == []
        await discord_fake.replay(reply_to(discord_fake.new_id(), null=True))  # unknown: ignored
        await discord_fake.replay(reply_to(answer, null=False))  # Bruce's own id: no fetch
        await discord_fake.wait_for_sent(TEXT, 3)
        assert fetches() == []
        # Sent by Bruce before a restart: Bruce does not know the id, so it fetches it.
        from_before = older(discord_fake.bot)
        await discord_fake.replay(reply_to(from_before, null=False))
        await discord_fake.wait_for_sent(TEXT, 4)
        from_a_human = older(user_payload(FRIEND_ID, "grace"))
        await discord_fake.replay(reply_to(from_a_human, null=False))  # fetched: not Bruce's
        await discord_fake.replay(reply_to(discord_fake.new_id(), null=False))  # 404: ignored
        await wait_until(lambda: len(fetches()) == 3)
        texts = await still_answered_in_guild(discord_fake)

    assert len(texts) == 5
    assert all(text.endswith(": and what about tomorrow?") for text in texts[1:4])
    assert len(fetches()) == 3
    assert f"/channels/{TEXT}/messages/{from_before}" in fetches()


async def test_pins_joins_and_thread_notices_are_ignored_silently(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        answer = await bruce_message_in(discord_fake)
        common = {"author": OWNER, "guild_id": str(GUILD), "channel_id": str(TEXT)}
        # The join notice's author is the one who joined (captured: a bot; here the owner).
        await discord_fake.replay("guild_member_join_notice.json", **common)
        # A pin notice points at the pinned message: here one of Bruce's, which is no reply.
        await discord_fake.replay(
            "guild_pin_notice.json",
            {778600000000000004: answer, 778600000000000002: TEXT, 778600000000000001: GUILD},
            author=OWNER,
        )
        await discord_fake.replay(
            "guild_thread_created_notice.json",
            {778600000000000002: TEXT, 778600000000000001: GUILD},
            author=OWNER,
        )
        texts = await still_answered_in_guild(discord_fake)

    assert texts == ["You said: Ada Lovelace: hello", "You said: Ada Lovelace: marker"]
    assert [row["content"] for row in user_rows(tmp_path)] == ["hello", "marker"]


# ---- forwards ------------------------------------------------------------------------------


async def test_forwards_in_dms_are_read_as_someone_elses_words(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.replay(
            "forward_text_with_attachment_and_embed.json", in_dm(discord_fake)
        )
        await discord_fake.wait_for_sent(dm)
        # As captured (another guild's role mention, no `mention_roles` in the snapshot).
        await discord_fake.replay(
            "forward_role_mention_from_other_guild.json",
            {FORWARD_AUTHOR: OWNER_ID, FORWARD_CHANNEL: dm},
        )
        await discord_fake.wait_for_sent(dm, 2)
        # A reply to a forward: Discord omits the snapshot's `type`, which discord.py needs.
        await discord_fake.replay(
            "reply_to_forward_snapshot_without_type.json", in_dm(discord_fake)
        )
        await discord_fake.wait_for_sent(dm, 3)
        await still_answered_in_dm(discord_fake)

    # Fenced as someone else's words (a snapshot names no author, only where it was).
    forwarded = as_untrusted(
        "Standup moves to 10:30 tomorrow, same room.\n"
        "whiteboard with the Q3 roadmap\nembed title\nembed description",
        "forwarded message from another Discord server",
    )
    role = as_untrusted(f"<@&{FORWARDED_ROLE}>", "forwarded message from another Discord server")
    assert discord_fake.texts(dm) == [
        f"You said: {forwarded}",
        f"You said: {role}",
        "You said: remind me of this at 21:00",
        "You said: still there?",
    ]
    rows = user_rows(tmp_path)
    assert [row["content"] for row in rows][:2] == [forwarded, role]
    # Marked as forwarded, with where it was as Discord reports it; the reply is the user's.
    marks = [(json.loads(row["extra"] or "null") or {}).get("forwarded") for row in rows]
    assert [[r["kind"] for r in mark] if mark else None for mark in marks] == [
        ["forward"],
        ["forward"],
        None,
        None,
    ]
    assert marks[0][0]["origin"]["message_id"] == FORWARDED_MESSAGE


async def test_forwards_in_a_guild_count_only_when_they_mention_bruce(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    in_guild = {"guild_id": str(GUILD), "member": guild_member()}
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        answer = await bruce_message_in(discord_fake)
        captions = {DOCS_AUTHOR: OWNER_ID, DOCS_DM: TEXT}
        # A forward among humans is not for Bruce, not even a forward of Bruce's own answer
        # (a forward's reference is not a reply).
        await discord_fake.replay(
            "forward_text_with_attachment_and_embed.json", captions, **in_guild
        )
        await discord_fake.replay(
            "forward_text_with_attachment_and_embed.json",
            {**captions, FORWARDED_MESSAGE: answer},
            **in_guild,
        )
        # The forwarded message pinged Bruce's role and says nothing else: the short notice.
        await discord_fake.replay(
            "forward_role_mention_from_other_guild.json",
            {FORWARD_AUTHOR: OWNER_ID, FORWARD_CHANNEL: TEXT, FORWARDED_ROLE: BOT_ROLE},
            **in_guild,
        )
        await discord_fake.wait_for_sent(TEXT, 2)
        texts = await still_answered_in_guild(discord_fake)

    assert texts == [
        "You said: Ada Lovelace: hello",
        ONLY_TEXT_REPLY,
        "You said: Ada Lovelace: marker",
    ]
    assert EMPTY_MENTION_REPLY not in texts
    assert [row["content"] for row in user_rows(tmp_path)] == ["hello", "marker"]


# ---- threads, edits, other senders ---------------------------------------------------------


async def test_messages_in_threads_are_answered_in_the_thread(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    private_thread = discord_fake.new_id()
    unknown_thread = discord_fake.new_id()
    mention = {
        "content": f"<@{BOT_ID}> what's the plan?",
        "mentions": [discord_fake.bot],
    }
    in_guild = {543296250523680760: GUILD, DOCS_AUTHOR: OWNER_ID}
    async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
        # A private thread (type 12) Bruce is added to: THREAD_CREATE, then a message in it.
        await discord_fake.replay(
            "thread_create_private.json",
            {
                947690637610844210: private_thread,
                574921006817476608: GUILD,
                744183190998089820: TEXT,
                115590097100865541: OWNER_ID,
                494949494: BOT_ID,
            },
        )
        await discord_fake.replay(
            "guild_message_with_member.json",
            {**in_guild, 543296250523680770: private_thread},
            **mention,
        )
        await discord_fake.wait_for_sent(private_thread)
        # A public thread (type 11) discord.py was never told about: answered there all the same.
        thread = adapt_ids(
            load_fixture("thread_channel_docs_example.json")["d"],
            {41771983423143937: GUILD},
        )
        discord_fake.add_channel({**thread, "id": str(unknown_thread), "parent_id": str(TEXT)})
        await discord_fake.replay(
            "guild_message_with_member.json",
            {**in_guild, 543296250523680770: unknown_thread},
            **mention,
        )
        await discord_fake.wait_for_sent(unknown_thread)
        texts = await still_answered_in_guild(discord_fake)

    for thread_id in (private_thread, unknown_thread):
        (answer,) = discord_fake.texts(thread_id)
        assert answer.startswith("You said: ") and answer.endswith(": what's the plan?")
    assert texts == ["You said: Ada Lovelace: marker"]
    rows = db_rows(
        tmp_path,
        "SELECT s.chat_id FROM messages m JOIN sessions s ON s.id = m.session_id"
        " WHERE m.role = 'user' ORDER BY m.id",
    )
    chats = [row["chat_id"] for row in rows]
    assert chats == [str(private_thread), str(unknown_thread), str(TEXT)]


async def test_edits_and_partial_updates_are_ignored_without_a_warning(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    dm = discord_fake.dm_channel_id(OWNER_ID)
    with capture_logs() as logs:
        async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
            await discord_fake.send_dm(OWNER, "first")
            await discord_fake.wait_for_sent(dm)
            # Captured: an update with only id, channel_id, attachments and guild_id.
            await discord_fake.replay(
                "message_update_attachments_only.json",
                {748114061966835772: TEXT, 678164358378946580: GUILD},
            )
            await discord_fake.replay(
                "message_update_embeds_only.json",
                {713850549958803516: TEXT, 533096507667382282: GUILD},
            )
            # Captured: a whole edited message (2016, no `type`), here in the owner's DM.
            await discord_fake.replay(
                "message_update_edited_content.json",
                {105487308693757952: OWNER_ID, 160214535121141761: dm},
            )
            await still_answered_in_dm(discord_fake)

    assert discord_fake.texts(dm) == ["You said: first", "You said: still there?"]
    assert (discord_fake.identifies, discord_fake.resumes) == (1, 0)
    assert not [entry for entry in logs if entry["log_level"] in ("warning", "error")]


async def test_application_and_webhook_messages_and_bruces_own_are_ignored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    ids = {740192346024443964: GUILD, 903556716547960862: TEXT}
    captured = load_fixture("guild_interaction_response.json")
    # The same message from a human-looking author who mentions Bruce: only webhook_id and
    # application_id tell it apart. (Without the captured interaction_metadata, whose early
    # shape, `user_id` instead of `user`, discord.py 2.7 cannot read.)
    human = {**captured, "d": dict(captured["d"])}
    del human["d"]["interaction_metadata"]
    addressed = {
        "author": OWNER,
        "type": 0,
        "content": f"<@{BOT_ID}> ping",
        "mentions": [discord_fake.bot],
    }
    with capture_logs() as logs:
        async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
            # As captured: an interaction response (type 20) by the application's bot user.
            as_captured = await discord_fake.replay(captured, ids)
            await discord_fake.replay(human, ids, **addressed)
            await discord_fake.replay(human, ids, webhook_id=None, **addressed)
            await discord_fake.replay(human, ids, application_id=None, **addressed)
            # Bruce's own message (the docs' DM example, written by Bruce).
            await discord_fake.replay(
                "dm_docs_example_message.json",
                {DOCS_DM: discord_fake.dm_channel_id(OWNER_ID)},
                author=discord_fake.bot,
            )
            texts = await still_answered_in_guild(discord_fake)
            await still_answered_in_dm(discord_fake)

    assert texts == ["You said: Ada Lovelace: marker"]
    assert [row["content"] for row in user_rows(tmp_path)] == ["marker", "still there?"]
    # Only the captured one was unreadable; the others were read, and ignored by Bruce.
    unreadable = [entry for entry in logs if entry["event"] == "discord_event_malformed"]
    assert [entry["message_id"] for entry in unreadable] == [as_captured["id"]]


async def test_a_payload_discord_py_cannot_read_is_logged_with_its_message_id(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    broken = load_fixture("dm_docs_example_message.json")
    del broken["d"]["content"]
    with capture_logs() as logs:
        async with bruce_on_discord(tmp_path, anthropic_fake, discord_fake):
            sent = await discord_fake.replay(broken, in_dm(discord_fake))
            await still_answered_in_dm(discord_fake)

    (warning,) = [entry for entry in logs if entry["event"] == "discord_event_malformed"]
    assert warning["message_id"] == sent["id"]
    assert warning["gateway_event"] == "MESSAGE_CREATE"
    assert (discord_fake.identifies, discord_fake.resumes) == (1, 0)
    assert discord_fake.texts(discord_fake.dm_channel_id(OWNER_ID)) == ["You said: still there?"]
