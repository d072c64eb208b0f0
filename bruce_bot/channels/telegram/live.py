"""Live replies on Telegram: the answer shown while it is written, then the final message.

In a private chat the text goes out as a message draft (`sendMessageDraft`, Bot API 9.3: an
animated preview that lasts 30 seconds, refreshed while a long tool runs) and the final reply
is an ordinary `sendMessage`, formatted as every reply is (telegram_sending.py). In a group, in
a forum topic, or wherever drafts fail (a Bot API server older than 9.3, a chat that refuses
them), one plain message is sent and then edited as the text grows, replying to the user's
message in groups as replies do; the final reply's first piece is edited into it (formatted,
split at the limit: the other pieces follow as new messages). How often it changes, and what
Telegram's 429 says, is `PacedLiveReply`'s business (channels/live.py): about once a second, never
the same text twice, so no "message is not modified".
"""

from __future__ import annotations

import secrets

import structlog
from telegram import ReplyParameters
from telegram.error import BadRequest, RetryAfter, TelegramError

from bruce_bot.channels.base import DeliveryError
from bruce_bot.channels.live import PacedLiveReply, Pacing
from bruce_bot.channels.telegram.chats import ChatAddress
from bruce_bot.channels.telegram.markup import TELEGRAM_TEXT_LIMIT, utf16_len
from bruce_bot.channels.telegram.sending import TelegramSender, retry_after_seconds
from bruce_bot.domain import OutboundMessage

log = structlog.get_logger(__name__)

EDIT_INTERVAL_SECONDS = 1.0  # Telegram lets a bot change a message about once a second
DRAFT_REFRESH_SECONDS = 20.0  # a draft shows for 30 seconds unless it is sent again


class TelegramLive(PacedLiveReply):
    """One turn's live reply in one chat (see the module docstring)."""

    def __init__(
        self,
        sender: TelegramSender,
        address: ChatAddress,
        *,
        reply_to: int | None,
        interval: float = EDIT_INTERVAL_SECONDS,
    ) -> None:
        self._sender = sender
        self._address = address
        self._reply_to = reply_to
        # Drafts are for private chats (a user's id is positive, a group's negative).
        self._drafting = address.chat_id > 0 and address.thread_id is None
        self._draft_id = secrets.randbelow(2**31 - 2) + 1  # non-zero, its own for this reply
        self.message_id: int | None = None  # the edited message, once there is one
        super().__init__(
            Pacing(
                interval,
                TELEGRAM_TEXT_LIMIT,
                name="telegram",
                refresh=DRAFT_REFRESH_SECONDS if self._drafting else None,
                length=utf16_len,
            )
        )

    async def _deliver(self, message: OutboundMessage) -> None:
        if self.message_id is None:  # drafts (they vanish once the message is sent), or nothing
            await self._sender.send(message)
        else:
            await self._sender.finish_in(self.message_id, message)

    async def _take_down(self) -> None:
        if self.message_id is not None:
            await self._sender.delete(self._address, self.message_id)
            self.message_id = None

    async def _show(self, text: str) -> None:
        bot = self._sender.bot
        if bot is None:
            raise DeliveryError("the Telegram channel is not running", permanent=True)
        chat_id, thread = self._address.chat_id, self._address.thread_id
        if self._drafting:
            try:
                await bot.send_message_draft(chat_id, self._draft_id, text)
                return
            except RetryAfter as exc:
                raise DeliveryError(
                    str(exc), retry_after=retry_after_seconds(exc), rate_limited=True
                ) from None
            except TelegramError as exc:  # an older server (404), a chat that takes none
                log.info(
                    "telegram_drafts_unavailable",
                    chat_id=str(self._address),
                    error=self._sender.scrub(f"{type(exc).__name__}: {exc}"),
                )
                self._drafting = False
        try:
            if self.message_id is None:
                replying = (
                    ReplyParameters(message_id=self._reply_to, allow_sending_without_reply=True)
                    if self._reply_to is not None
                    else None
                )
                sent = await bot.send_message(
                    chat_id, text, reply_parameters=replying, message_thread_id=thread
                )
                self.message_id = sent.message_id
            else:
                await bot.edit_message_text(text, chat_id=chat_id, message_id=self.message_id)
        except RetryAfter as exc:
            raise DeliveryError(
                str(exc), retry_after=retry_after_seconds(exc), rate_limited=True
            ) from None
        except BadRequest as exc:
            if "message is not modified" in exc.message.lower():
                return  # Telegram compares after trimming: it shows this already
            raise self._sender.delivery_error(exc) from None
        except TelegramError as exc:
            raise self._sender.delivery_error(exc) from None
