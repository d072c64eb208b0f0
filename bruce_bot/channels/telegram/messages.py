"""Reading a python-telegram-bot `Message`: is it for Bruce, from whom, where, saying what.

In a private chat every message is for Bruce; in a group only an @mention, a text_mention, a
command (to Bruce, not "/new@other_bot") or a reply to one of Bruce's own messages is. Service
messages (members, titles, pins, topics, video chats...) and channel posts copied into their
discussion group are nobody speaking to Bruce. The forum topic a message is in is its own
conversation (telegram_chats.py). A forward, and the words of another person a reply quotes,
are read fenced as someone else's (telegram_forwards.py); a forwarded "/new" is no command.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from telegram import Message, MessageEntity, Update, User
from telegram.constants import ChatType
from telegram.ext import filters

from bruce_bot.channels.forwards import Quoted, metadata_of, recorded_by_someone_else
from bruce_bot.channels.policy import CommandCall
from bruce_bot.channels.telegram.albums import AlbumPart
from bruce_bot.channels.telegram.chats import ChatAddress
from bruce_bot.channels.telegram.entities import command_of, mentions_of_bot, without_bot_mentions
from bruce_bot.channels.telegram.files import attachments_of
from bruce_bot.channels.telegram.forwards import forward_of, quote_of
from bruce_bot.domain import Attachment, InboundMessage

SUPPORTED_CHATS = (ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP)
_ALBUM_KINDS = (
    ("photo", "photo"),
    ("video", "video"),
    ("document", "file"),
    ("audio", "audio file"),
)


@dataclass(frozen=True, slots=True)
class Heard:
    """A message addressed to Bruce, not yet admitted: its sender may still be a stranger."""

    message: Message
    user: User
    address: ChatAddress
    in_group: bool
    command: str | None  # a command of the channel, addressed to Bruce
    body: str | None  # the text, or the caption of a media message
    entities: Sequence[MessageEntity]
    forward: Quoted | None = None  # the message is a forward: its body is someone else's
    quote: tuple[Quoted, str] | None = None  # another person's words the reply quotes

    def text(self, username: str, bot_id: int) -> str | None:
        """What the sender says to Bruce, without "@bruce_bot"; None when there is no text.
        Someone else's words (a forward's, a quote) are fenced, a quote before the reply."""
        own = None
        if self.body is not None:
            own = without_bot_mentions(self.body, self.entities, username, bot_id)
            if self.forward is not None:
                own = self.forward.fence(own) if own.strip() else ""
        if self.quote is None:
            return own
        quoted, words = self.quote
        return "\n\n".join(part for part in (quoted.fence(words), own) if part and part.strip())

    @property
    def quoted(self) -> tuple[Quoted, ...]:
        return tuple(q for q in (self.forward, self.quote[0] if self.quote else None) if q)

    def attachments(self) -> tuple[Attachment, ...]:
        """The files Bruce can read; a forwarded voice note is someone else's recording."""
        found = attachments_of(self.message)
        return recorded_by_someone_else(found) if self.forward is not None else found

    def command_call(self, username: str) -> CommandCall | None:
        """The command the message sends, for the channel policy; None when it sends none."""
        if self.command is None:
            return None
        user = self.user
        return CommandCall(
            self.command, str(self.address), user.id, display_name(user), self.in_group, username
        )

    def inbound(
        self,
        channel: str,
        text: str,
        attachments: tuple[Attachment, ...] = (),
        quoted: Sequence[Quoted] = (),
    ) -> InboundMessage:
        """The message for the inbox; in a group the answer replies to it. `quoted`: whose
        words it passes on (stored in its `extra`, channels/forwards.py)."""
        message_id = self.message.message_id
        metadata: dict[str, object] = {}
        if self.in_group:
            metadata = {"group": True, "reply_to": message_id}
        return InboundMessage(
            channel,
            str(self.address),
            text,
            user_id=str(self.user.id),
            user_name=display_name(self.user),
            platform_message_id=str(message_id),
            metadata={**metadata, **metadata_of(quoted)},
            attachments=attachments,
        )


def hear(
    update: Update, message: Message, username: str, bot_id: int, commands: Collection[str]
) -> Heard | None:
    """The message as one addressed to Bruce, or None when it is not (see the module)."""
    if is_service(update) or message.is_automatic_forward:
        return None
    user = message.from_user
    if user is None or (user.is_bot and message.sender_chat is None):
        return None
    in_group = message.chat.type != ChatType.PRIVATE
    has_text = message.text is not None
    body = message.text if has_text else message.caption
    entities = message.entities if has_text else message.caption_entities
    command, target = command_of(body, entities, commands)
    for_me = target.lower() == username.lower()
    if target and not for_me:
        command = None  # "/new@other_bot" is another bot's business
    forward = forward_of(message)
    if forward is not None:
        command = None  # a forwarded "/new" is someone else's words, not the sender's command
    addressed = (
        not in_group
        or for_me
        or command is not None
        or bool(mentions_of_bot(body, entities, username, bot_id))
        or replies_to(message, bot_id)
    )
    if not addressed:
        return None
    return Heard(
        message,
        user,
        address_of(message),
        in_group,
        command,
        body,
        entities,
        forward,
        quote_of(message, bot_id),
    )


def address_of(message: Message) -> ChatAddress:
    """The conversation a message belongs to: its chat, or its forum topic."""
    return ChatAddress.of_message(
        message.chat.id,
        is_forum=message.chat.is_forum,
        is_topic_message=message.is_topic_message,
        thread_id=message.message_thread_id,
    )


def album_part(message: Message, username: str, bot_id: int) -> AlbumPart:
    caption = message.caption
    forward = forward_of(message)
    if caption is not None:
        caption = without_bot_mentions(caption, message.caption_entities, username, bot_id)
        if forward is not None:  # a forwarded album's caption is someone else's words
            caption = forward.fence(caption) if caption.strip() else None
    kind = next((name for field, name in _ALBUM_KINDS if message[field]), "part")
    address = address_of(message)
    found = attachments_of(message)
    if forward is not None:
        found = recorded_by_someone_else(found)
    return AlbumPart(
        str(address),
        str(message.media_group_id),
        message.message_id,
        kind,
        caption,
        found[0] if found else None,
        (forward,) if forward is not None else (),
    )


def replies_to(message: Message, bot_id: int) -> bool:
    """Whether the message replies to one of the bot's own messages."""
    replied = message.reply_to_message
    if replied is None or replied.from_user is None or replied.from_user.id != bot_id:
        return False
    # In a forum topic every message that replies to nothing "replies" to the topic's first
    # message; when the bot opened the topic, that is not a reply to the bot.
    topic_root = bool(message.is_topic_message) and (
        replied.message_id == message.message_thread_id
    )
    return not topic_root and replied.forum_topic_created is None


def migration_of(message: Message) -> tuple[int, int] | None:
    """(old, new) chat id of the service message announcing a group's upgrade, in the old
    group (migrate_to_chat_id) or in the new supergroup (migrate_from_chat_id)."""
    if message.migrate_to_chat_id:
        return message.chat.id, message.migrate_to_chat_id
    if message.migrate_from_chat_id:
        return message.migrate_from_chat_id, message.chat.id
    return None


def is_service(update: Update) -> bool:
    """A service message: members joined or left, a new title or photo, a pin, a topic opened,
    a video chat, an auto-delete timer... (PTB's own list, which follows the Bot API)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB's int-or-timedelta transition warnings
        return bool(filters.StatusUpdate.ALL.check_update(update))


def has_content(message: Message) -> bool:
    """Something a person sent (media, a location, a poll...), as opposed to an empty or
    unknown message."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB's successful_payment deprecation warning
        return message.effective_attachment is not None


def display_name(user: User) -> str:
    return user.first_name or (f"@{user.username}" if user.username else str(user.id))
