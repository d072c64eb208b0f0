"""Who wrote what a Telegram message passes on: its forward origin, or the message it quotes.

A forward carries `forward_origin` (Bot API 7.0): a user, a user who hides their account
(only a name), a group's anonymous admin (`chat`) or a channel post (`channel`), each with
the original date. A reply can quote part of another message (`quote`), of this chat
(`reply_to_message`) or of another chat (`external_reply`, with that message's origin). Both
are someone else's words: see channels/forwards.py for how they are stored and read. A quote
of Bruce's own message or of the sender's own earlier words is not (it is left out, as any
reply's context is).
"""

from __future__ import annotations

from typing import Any

from telegram import (
    Message,
    MessageOrigin,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
    User,
)

from bruce_bot.channels.forwards import Quoted, clean_name


def forward_of(message: Message) -> Quoted | None:
    """The forward the message is, with its origin; None when it is the sender's own."""
    origin = message.forward_origin
    if origin is None or message.is_automatic_forward:
        return None
    return Quoted("forward", origin_name(origin), _record(origin))


def quote_of(message: Message, bot_id: int) -> tuple[Quoted, str] | None:
    """The quoted words of another person in a reply, and who wrote them; None when the
    message quotes nothing, or only Bruce's or the sender's own words."""
    quote = message.quote
    if quote is None or not quote.text.strip():
        return None
    external = message.external_reply
    if external is not None:
        return Quoted("quote", origin_name(external.origin), _record(external.origin)), quote.text
    replied = message.reply_to_message
    if replied is None:
        return None
    if replied.forward_origin is not None:  # quoting a forward: the words are its origin's
        origin = replied.forward_origin
        return Quoted("quote", origin_name(origin), _record(origin)), quote.text
    author = replied.from_user
    sender = message.from_user
    if author is None or author.id == bot_id or (sender is not None and author.id == sender.id):
        return None
    record = {"type": "reply", "message_id": replied.message_id, "from": author.to_dict()}
    return Quoted("quote", _user_name(author), record), quote.text


def origin_name(origin: MessageOrigin) -> str:
    """Who sent the original message, as Telegram names them."""
    if isinstance(origin, MessageOriginUser):
        return _user_name(origin.sender_user)
    if isinstance(origin, MessageOriginHiddenUser):
        return clean_name(f"{origin.sender_user_name} (account hidden)")
    if isinstance(origin, MessageOriginChat):
        return _chat_name("the group", origin.sender_chat, origin.author_signature)
    if isinstance(origin, MessageOriginChannel):
        return _chat_name("the channel", origin.chat, origin.author_signature)
    return clean_name(f"a {origin.type} origin")  # a kind a later Bot API adds


def _record(origin: MessageOrigin) -> dict[str, Any]:
    return origin.to_dict()


def _user_name(user: User) -> str:
    name = user.full_name or str(user.id)
    return clean_name(f"{name} (@{user.username})" if user.username else name)


def _chat_name(kind: str, chat: Any, signature: str | None) -> str:
    title = getattr(chat, "title", None) or str(getattr(chat, "id", ""))
    username = getattr(chat, "username", None)
    name = f"{kind} {title}" + (f" (@{username})" if username else "")
    return clean_name(f"{name}, signed {signature}" if signature else name)
