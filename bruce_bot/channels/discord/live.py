"""Live replies on Discord: one message, edited as the answer is written, becomes the reply.

The first text a turn shows (the model's first words, or a tool's status line) is posted as a
message; later texts edit it, at most about once a second and never with the text it already
has (`PacedLiveReply`, channels/live.py); Discord's rate limits are discord.py's to wait out (it
retries a 429 after `retry_after`), and one it gives up on is waited out before the next edit.
The stored reply's first part (split at Discord's 2000 characters by the outbox) is edited into
the message, with its buttons; the other parts follow as new messages. A turn that ends without
a reply deletes the message.
"""

from __future__ import annotations

from typing import Any

import structlog

from bruce_bot.channels.discord.sending import DiscordSender
from bruce_bot.channels.live import PacedLiveReply, Pacing
from bruce_bot.domain import OutboundMessage

log = structlog.get_logger(__name__)

EDIT_INTERVAL_SECONDS = 1.0  # Discord allows about five edits per five seconds in a channel
MAX_MESSAGE_CHARS = 2000  # what Discord takes in one message


class DiscordLive(PacedLiveReply):
    """One turn's live reply in one Discord channel (see the module docstring)."""

    def __init__(
        self, sender: DiscordSender, channel_id: int, *, interval: float = EDIT_INTERVAL_SECONDS
    ) -> None:
        self._sender = sender
        self._channel_id = channel_id
        self.message: Any = None  # the discord.py Message being edited, once posted
        super().__init__(Pacing(interval, MAX_MESSAGE_CHARS, name="discord"))

    async def _deliver(self, message: OutboundMessage) -> None:
        if self.message is None:
            await self._sender.send(message)
        elif self.shown == message.text and not message.choices:
            return  # it shows the reply already: an edit would change nothing
        else:
            await self._sender.finish_in(self.message, message)

    async def _take_down(self) -> None:
        if self.message is not None:
            await self._sender.delete(self.message)
            self.message = None

    async def _show(self, text: str) -> None:
        if self.message is None:
            self.message = await self._sender.post(self._channel_id, text)
        else:
            await self._sender.edit(self.message, text)
