"""Live replies on Matrix: one message, edited (`m.replace`) as the answer is written.

The first text a turn shows (the model's first words, or a tool's status line) is sent as a
message (into the thread when the chat is one); later texts replace it by edits at most once per
EDIT_INTERVAL_SECONDS (`PacedLiveReply`, channels/live.py; a homeserver's M_LIMIT_EXCEEDED is
waited out). An edit carries the new text in `m.new_content` (body and formatted_body) and, for
clients that do not read edits, the same text prefixed "* " as its own body, as the spec says.
The stored reply's first part is edited into the message; further parts follow as new messages.
A turn that ends without a reply redacts the message.
"""

from __future__ import annotations

from typing import Any, Protocol

from bruce_bot.channels.live import PacedLiveReply, Pacing
from bruce_bot.channels.matrix.formatting import message_content
from bruce_bot.domain import Choice, OutboundMessage

EDIT_INTERVAL_SECONDS = 1.0  # Synapse's default rate limit is 0.2 messages/s burst 10 per user
MAX_LIVE_CHARS = 4000  # as MAX_MESSAGE_CHARS in channel.py: what one message takes


class Poster(Protocol):
    """What a live reply needs of the channel (channel.py)."""

    async def post(self, chat: str, content: dict[str, Any], tx_id: str | None) -> str:
        """Send `content`; its event id. Raises DeliveryError as `send` does."""
        ...

    async def redact(self, chat: str, event_id: str) -> None: ...

    async def send(self, message: OutboundMessage) -> None: ...

    async def offer(self, chat: str, event_id: str, choices: tuple[Choice, ...]) -> None: ...


def edit_content(event_id: str, text: str) -> dict[str, Any]:
    """An `m.replace` of `event_id` with `text` (see the module docstring)."""
    new = message_content(text)
    return {
        "msgtype": "m.text",
        "body": f"* {new['body']}",
        "format": new["format"],
        "formatted_body": f"* {new['formatted_body']}",
        "m.new_content": new,
        "m.mentions": {},
        "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
    }


class MatrixLive(PacedLiveReply):
    """One turn's live reply in one Matrix chat (see the module docstring)."""

    def __init__(
        self,
        chat_id: str,
        poster: Poster,
        *,
        interval: float = EDIT_INTERVAL_SECONDS,
    ) -> None:
        self._chat_id = chat_id
        self._poster = poster
        self.event_id: str | None = None  # the message being edited, once sent
        super().__init__(Pacing(interval, MAX_LIVE_CHARS, name="matrix"))

    async def _show(self, text: str) -> None:
        if self.event_id is None:
            self.event_id = await self._poster.post(self._chat_id, message_content(text), None)
        else:
            await self._poster.post(self._chat_id, edit_content(self.event_id, text), None)

    async def _deliver(self, message: OutboundMessage) -> None:
        if self.event_id is None:
            await self._poster.send(message)
            return
        if self.shown != message.text:
            content = edit_content(self.event_id, message.text)
            await self._poster.post(message.chat_id, content, None)
        if message.choices:
            await self._poster.offer(message.chat_id, self.event_id, message.choices)

    async def _take_down(self) -> None:
        if self.event_id is not None:
            await self._poster.redact(self._chat_id, self.event_id)
            self.event_id = None
