"""Where a Telegram conversation lives: a chat, or one topic of a forum supergroup.

Bruce keeps one session per conversation and names it by a chat_id string. For a private chat,
a group or a supergroup that string is the chat id ("1001", "-500", "-1001234567890"); for a
topic of a forum supergroup it is the chat id and the topic's thread id joined by a slash:
"-1001234567890/42". The General topic has no thread id of its own (Telegram calls it thread 1
and refuses `message_thread_id=1` on sendMessage), so it is the chat itself, "-1001234567890".

A message belongs to a topic only when its chat `is_forum` and the message `is_topic_message`.
Telegram puts a `message_thread_id` on other messages too: every reply in a supergroup's reply
thread, and a reply in a forum's General topic (there it is the id of the message replied to).
Those are not topics: sending to that "thread" fails with "message thread not found", and the
conversation stays the chat's one session.
"""

from __future__ import annotations

from dataclasses import dataclass

GENERAL_TOPIC_ID = 1


@dataclass(frozen=True, slots=True)
class ChatAddress:
    """A Telegram chat and, for a forum topic, its thread id."""

    chat_id: int
    thread_id: int | None = None

    def __str__(self) -> str:
        return f"{self.chat_id}/{self.thread_id}" if self.thread_id else str(self.chat_id)

    @classmethod
    def parse(cls, text: str) -> ChatAddress:
        """The address a session's chat_id names; ValueError when it names none."""
        chat, slash, thread = text.partition("/")
        thread_id = int(thread) if slash else None
        if thread_id is not None and thread_id <= GENERAL_TOPIC_ID:
            raise ValueError(f"not a forum topic: {text!r}")
        return cls(int(chat), thread_id)

    @classmethod
    def of_message(
        cls,
        chat_id: int,
        *,
        is_forum: bool | None,
        is_topic_message: bool | None,
        thread_id: int | None,
    ) -> ChatAddress:
        """The conversation a received message belongs to."""
        in_topic = bool(is_forum and is_topic_message and thread_id)
        if not in_topic or thread_id == GENERAL_TOPIC_ID:
            return cls(chat_id)
        return cls(chat_id, thread_id)
