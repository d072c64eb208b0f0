"""Live replies on Slack: one message, updated as the answer is written, becomes the reply.

The first text a turn shows (the model's first words, or a tool's status line) is posted into
the chat (the DM or the thread); later texts update it with `chat.update`, at most about once a
second and never with the text it already has (`PacedLiveReply`, channels/live.py; Slack allows
about one update a second per message before it answers 429). A 429's Retry-After is waited out
before the next update and before the final one. The stored reply's first part is updated into
the message, with its buttons; the other parts follow as new messages. A turn that ends without
a reply deletes the message.
"""

from __future__ import annotations

import structlog

from bruce_bot.channels.base import DeliveryError
from bruce_bot.channels.live import PacedLiveReply, Pacing
from bruce_bot.channels.slack.address import SlackAddress
from bruce_bot.channels.slack.blocks import choice_blocks
from bruce_bot.channels.slack.mrkdwn import to_mrkdwn
from bruce_bot.channels.slack.sending import SlackSender
from bruce_bot.domain import OutboundMessage

log = structlog.get_logger(__name__)

EDIT_INTERVAL_SECONDS = 1.0
LIVE_TEXT_LIMIT = 3500  # what a live text shows at most (the final parts show it all)


class SlackLive(PacedLiveReply):
    """One turn's live reply in one Slack chat (see the module docstring)."""

    def __init__(
        self, sender: SlackSender, address: SlackAddress, *, interval: float = EDIT_INTERVAL_SECONDS
    ) -> None:
        self._sender = sender
        self._address = address
        self.ts: str | None = None  # the message being updated, once posted
        super().__init__(Pacing(interval, LIVE_TEXT_LIMIT, name="slack"))

    async def _deliver(self, message: OutboundMessage) -> None:
        if self.ts is None:
            await self._sender.send(message)
            return
        mrkdwn = to_mrkdwn(message.text)
        if len(mrkdwn) > LIVE_TEXT_LIMIT * 10:  # too long for one message after conversion
            await self._take_down()
            await self._sender.send(message)
            return
        if self.shown == message.text and not message.choices:
            return  # it shows the reply already: an update would change nothing
        try:
            blocks = choice_blocks(mrkdwn, message.choices)
            await self._sender.update(self._address, self.ts, mrkdwn, blocks)
        except DeliveryError as exc:
            if not exc.permanent:
                raise
            # The live message is gone (deleted by someone): the reply goes as a new one.
            log.info("slack_live_message_gone", chat_id=str(self._address), error=str(exc))
            self.ts = None
            await self._sender.send(message)

    async def _take_down(self) -> None:
        if self.ts is not None:
            await self._sender.delete(self._address, self.ts)
            self.ts = None

    async def _show(self, text: str) -> None:
        mrkdwn = to_mrkdwn(text)
        if self.ts is None:
            self.ts = await self._sender.post(self._address, mrkdwn)
        else:
            await self._sender.update(self._address, self.ts, mrkdwn)
