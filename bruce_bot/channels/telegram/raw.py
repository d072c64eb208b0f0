"""What can still be read from an update that python-telegram-bot could not parse.

A Bot API change, or an old shape replayed, can make PTB's parser fail on one update; the
channel then replaces it by an empty one so that polling goes on (see `_UpdateCheckingRequest`
in telegram.py). The person who sent it should not be left waiting in silence, so the raw JSON
is read here, defensively, for what a short notice needs: the chat (and forum topic), who sent
it, and whether it was addressed to the bot. Only new messages count; an unreadable edit or any
other kind of update is just logged.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from bruce_bot.channels.telegram.chats import ChatAddress


@dataclass(frozen=True, slots=True)
class UnreadableMessage:
    address: ChatAddress
    private: bool
    sender_id: int | None
    words: str  # the raw text or caption, when it is a string
    replied_to_id: int | None  # the sender of the message it replies to

    def addressed_to(self, username: str, bot_id: int) -> bool:
        """A private message, or a group message naming "@username" or replying to the bot."""
        return (
            self.private
            or (bool(username) and f"@{username}".lower() in self.words.lower())
            or (self.replied_to_id is not None and self.replied_to_id == bot_id)
        )


class UnreadableUpdates:
    """Unreadable messages seen in a batch, by update id, until their (empty) update is
    handled; bounded, the oldest go first."""

    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        self._messages: OrderedDict[int, UnreadableMessage] = OrderedDict()

    def note(self, item: Any) -> None:
        message = unreadable_message(item)
        if message is None:
            return
        self._messages[int(item["update_id"])] = message
        while len(self._messages) > self._capacity:
            self._messages.popitem(last=False)

    def pop(self, update_id: int) -> UnreadableMessage | None:
        return self._messages.pop(update_id, None)


def chat_id_of(item: Any) -> int | None:
    """The chat id of any update that has one where a message's would be, for the logs."""
    if not isinstance(item, dict):
        return None
    for value in item.values():
        if isinstance(value, dict):
            chat = value.get("chat")
            if isinstance(chat, dict) and _is_int(chat.get("id")):
                return int(chat["id"])
    return None


def unreadable_message(item: Any) -> UnreadableMessage | None:
    message = item.get("message") if isinstance(item, dict) else None
    if not isinstance(message, dict):
        return None
    chat = message.get("chat")
    if not isinstance(chat, dict) or not _is_int(chat.get("id")):
        return None
    sender = message.get("from")
    sender_id = sender.get("id") if isinstance(sender, dict) else None
    if isinstance(sender, dict) and sender.get("is_bot") is True:
        sender_id = None  # bots, and anonymous admins speaking as the group
    words = message.get("text", message.get("caption"))
    replied = message.get("reply_to_message")
    replied_from = replied.get("from") if isinstance(replied, dict) else None
    replied_to_id = replied_from.get("id") if isinstance(replied_from, dict) else None
    thread = message.get("message_thread_id")
    address = ChatAddress.of_message(
        int(chat["id"]),
        is_forum=chat.get("is_forum") is True,
        is_topic_message=message.get("is_topic_message") is True,
        thread_id=thread if _is_int(thread) else None,
    )
    return UnreadableMessage(
        address,
        private=chat.get("type") == "private",
        sender_id=sender_id if _is_int(sender_id) else None,
        words=words if isinstance(words, str) else "",
        replied_to_id=replied_to_id if _is_int(replied_to_id) else None,
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
