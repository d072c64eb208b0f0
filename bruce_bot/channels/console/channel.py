"""The console channel behind `bruce chat`: stdin in, stdout out, through the same inbox."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from bruce_bot.channels.base import InboxPort
from bruce_bot.domain import InboundMessage, OutboundMessage

CONSOLE_CHANNEL = "console"


class ConsoleChannel:
    name = CONSOLE_CHANNEL
    max_message_chars = 1_000_000

    def __init__(self, chat_id: str = "local", out: TextIO | None = None) -> None:
        self.chat_id = chat_id
        self._out = out or sys.stdout
        self._inbox: InboxPort | None = None
        self.replies: asyncio.Queue[str] = asyncio.Queue()

    async def start(self, inbox: InboxPort) -> None:
        self._inbox = inbox

    async def stop(self) -> None:
        self._inbox = None

    async def close(self) -> None:
        return None

    async def say(self, text: str) -> bool:
        """Submit a line typed by the user; False when it was not accepted (e.g. empty)."""
        if self._inbox is None:
            return False
        submission = await self._inbox.submit(
            InboundMessage(CONSOLE_CHANNEL, self.chat_id, text, user_id="console", user_name="you")
        )
        return submission.accepted

    async def send(self, message: OutboundMessage) -> None:
        self._out.write(f"\nbruce> {message.text}\n")
        self._out.flush()
        self.replies.put_nowait(message.text)

    async def typing(self, chat_id: str) -> None:
        return None
