"""Where a Slack conversation is: a channel (or DM) and, for a thread, its root message's ts.

A chat id is `<channel id>` for a direct message's main view and `<channel id>/<thread_ts>` for
a thread: each thread is its own session, and everything sent to that chat id (replies,
reminders and briefings set up there) goes into the thread. In a channel Bruce always answers
in a thread; a top-level mention starts one on the message that mentioned it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlackAddress:
    channel: str
    thread_ts: str | None = None

    def __str__(self) -> str:
        return f"{self.channel}/{self.thread_ts}" if self.thread_ts else self.channel

    @classmethod
    def parse(cls, chat_id: str) -> SlackAddress:
        """ValueError when `chat_id` is not one of Bruce's Slack chat ids."""
        channel, slash, thread = chat_id.partition("/")
        if not channel or not channel[:1].isalpha() or (slash and not _is_ts(thread)):
            raise ValueError(f"{chat_id!r} is not a Slack chat id (channel or channel/thread_ts)")
        return cls(channel, thread or None)


def _is_ts(text: str) -> bool:
    seconds, dot, micros = text.partition(".")
    return seconds.isdigit() and (not dot or micros.isdigit())


def ts_number(ts: str) -> int | None:
    """A message's ts ("1700000000.000100") as a number, unique in its channel (what the
    policy's `Press.message_id` keeps); None when it is not one."""
    return int(ts.replace(".", "")) if _is_ts(ts) else None
