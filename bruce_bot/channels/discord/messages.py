"""Reading a discord.py `Message`: is it for Bruce, and what does it say.

In a guild a message is for Bruce when it mentions Bruce or Bruce's own role, forwards a
message that does, or replies to one of Bruce's messages (with or without the reply ping).
Which message a reply points at: Discord includes the replied-to message
(`referenced_message`), sends null when it was deleted and sometimes leaves it out; then the id
is checked against the messages Bruce sent recently and, only when Discord left it out, that one
message is fetched once. A forwarded message carries its text in a snapshot; that text (and the
descriptions of its attachments and embeds) is someone else's words: it is stored fenced, after
the user's own text, and marked in the message's `extra` (channels/forwards.py). A snapshot
does not say who wrote it, only where it was (`message_reference`).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import discord
import structlog

from bruce_bot.channels.forwards import Quoted
from bruce_bot.channels.recent import Recent

log = structlog.get_logger(__name__)

FETCH_REFERENCE_TIMEOUT_SECONDS = 5.0
ANSWERED_TYPES = (discord.MessageType.default, discord.MessageType.reply)
_USER_MENTION = r"[ \t]*<@!?{id}>[ \t]*"  # with the spaces around it, not the text's own


@dataclass(frozen=True, slots=True)
class BotIds:
    """Who Bruce is where a message was sent: its user, and its role in that guild if any."""

    user_id: int
    role_id: int | None

    @classmethod
    def of(cls, me: discord.ClientUser, message: discord.Message) -> BotIds:
        role = message.guild.self_role if message.guild is not None else None
        return cls(me.id, role.id if role is not None else None)


async def addresses_bot(
    client: discord.Client, message: discord.Message, bot: BotIds, sent: Recent[int]
) -> bool:
    """In a guild: a mention of Bruce or its role, a forward of a message that mentions it,
    or a reply to one of Bruce's messages (`sent`: the ones Bruce sent lately)."""
    my_id = bot.user_id
    if my_id in message.raw_mentions or any(user.id == my_id for user in message.mentions):
        return True
    # Mentioning the bot's own role (Discord's autocomplete offers it) addresses it too.
    if any(role.tags and role.tags.bot_id == my_id for role in message.role_mentions):
        return True
    for snapshot in message.message_snapshots:
        if my_id in snapshot.raw_mentions or bot.role_id in snapshot.raw_role_mentions:
            return True
    return _is_reply(message) and await _replies_to_bot(client, message, my_id, sent)


async def _replies_to_bot(
    client: discord.Client, message: discord.Message, my_id: int, sent: Recent[int]
) -> bool:
    ref = message.reference
    if ref is None or ref.message_id is None:
        return False
    replied = ref.resolved
    if isinstance(replied, discord.Message):
        replied_author = getattr(replied, "author", None)
        return replied_author is not None and replied_author.id == my_id
    if ref.message_id in sent:
        return True
    if isinstance(replied, discord.DeletedReferencedMessage):
        return False  # Discord sent null: deleted, nothing left to fetch
    # Discord left the replied-to message out: ask for that one message, once.
    channel = client.get_partial_messageable(ref.channel_id, guild_id=ref.guild_id)
    try:
        async with asyncio.timeout(FETCH_REFERENCE_TIMEOUT_SECONDS):
            fetched = await channel.fetch_message(ref.message_id)
    except Exception as exc:  # gone, forbidden, unreachable or unreadable: not for Bruce
        log.info(
            "discord_reference_not_fetched",
            message_id=message.id,
            referenced_message_id=ref.message_id,
            error=repr(exc),
        )
        return False
    fetched_author = getattr(fetched, "author", None)
    if fetched_author is None or fetched_author.id != my_id:
        return False
    sent.add(fetched.id)
    return True


def _is_reply(message: discord.Message) -> bool:
    """A reply (not a forward, a pin notice or a crosspost, which carry references too)."""
    ref = message.reference
    return (
        message.type is discord.MessageType.reply
        and ref is not None
        and ref.type is discord.MessageReferenceType.reply
        and ref.message_id is not None
    )


def text_of(message: discord.Message, bot: BotIds) -> str:
    """The message's own text (in a guild without the mention that addressed Bruce), then
    the text of what it forwards, each forwarded part fenced as someone else's words."""
    own = message.content
    if message.guild is not None:
        own = _without_bot_mentions(own, bot)
    parts = [own.strip()]
    forward = forward_of(message)
    for snapshot in message.message_snapshots:
        forwarded = _snapshot_text(snapshot, bot)
        if forwarded:
            parts.append(forward.fence(forwarded))
    return "\n\n".join(part for part in parts if part)


def forward_of(message: discord.Message) -> Quoted:
    """Where the forwarded message was, as Discord reports it (a snapshot names no author)."""
    ref = message.reference
    origin: dict[str, object] = {}
    where = ""
    if ref is not None:
        origin = {"message_id": ref.message_id, "channel_id": ref.channel_id}
        if ref.guild_id is not None:
            origin["guild_id"] = ref.guild_id
        here = message.guild.id if message.guild is not None else None
        if ref.guild_id is None:
            where = "a Discord direct message"
        else:
            where = "this Discord server" if ref.guild_id == here else "another Discord server"
    return Quoted("forward", where, origin)


def forwards_of(message: discord.Message) -> tuple[Quoted, ...]:
    """The forward the message carries, for its `extra` (empty: none)."""
    return (forward_of(message),) if message.message_snapshots else ()


def _without_bot_mentions(text: str, bot: BotIds) -> str:
    text = re.sub(_USER_MENTION.format(id=bot.user_id), " ", text)
    if bot.role_id is not None:
        text = re.sub(rf"[ \t]*<@&{bot.role_id}>[ \t]*", " ", text)
    return text


def _snapshot_text(snapshot: discord.MessageSnapshot, bot: BotIds) -> str:
    """What a forwarded message says: its text, then its attachments' and embeds' descriptions."""
    parts = [_without_bot_mentions(snapshot.content, bot)]
    parts += [attachment.description or "" for attachment in snapshot.attachments]
    for embed in snapshot.embeds:
        parts += [embed.title or "", embed.description or ""]
    return "\n".join(part.strip() for part in parts if part.strip())


def carries_something(message: discord.Message) -> bool:
    """True when a message without text still carries something (file, sticker, poll...)."""
    return bool(
        message.attachments
        or message.stickers
        or message.embeds
        or message.poll is not None
        or message.flags.voice
        or message.message_snapshots
        or message.components
    )
