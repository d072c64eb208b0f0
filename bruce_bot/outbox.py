"""The outbox: every reply is stored first, then delivered through its channel.

A reply's row (status `pending`) exists before any send is attempted, so a crash between the two
is repaired at start-up by `redeliver_pending`. Long texts are split at the channel's limit on
paragraph, line and word boundaries without breaking code fences. Failed sends are retried with
backoff (honouring a platform's retry-after); the final status, `sent` or `failed`, is recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import structlog

from bruce_bot.channels.base import ChannelAdapter, DeliveryError
from bruce_bot.domain import OutboundMessage
from bruce_bot.storage.messages import MessageStore

log = structlog.get_logger(__name__)

MAX_ATTEMPTS = 4
BASE_BACKOFF_SECONDS = 0.5


def split_text(text: str, limit: int) -> list[str]:
    """Split `text` into parts of at most `limit` characters on natural boundaries.

    Paragraphs first, then lines, then words; a code fence cut in two is closed at the end of
    one part and reopened (with its language) at the start of the next.
    """
    if len(text) <= limit:
        return [text]
    parts: list[str] = []
    remaining = text
    fence_reopen = ""
    while remaining:
        remaining = fence_reopen + remaining
        if len(remaining) <= limit:
            parts.append(remaining)
            break
        budget = limit - 4  # room to close a fence ("\n```")
        window = remaining[:budget]
        cut = -1
        for separator in ("\n\n", "\n", " "):
            cut = window.rfind(separator)
            if cut > budget // 3:
                break
        if cut <= 0:
            cut = budget
        part, remaining = remaining[:cut].rstrip(), remaining[cut:].lstrip("\n ")
        fence_reopen = ""
        open_fence = _open_fence(part)
        if open_fence is not None:
            part += "\n```"
            fence_reopen = f"```{open_fence}\n"
        parts.append(part)
    return [part for part in parts if part.strip()]


def _open_fence(text: str) -> str | None:
    """The language of a code fence left open at the end of `text`, or None if all are closed."""
    language: str | None = None
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            language = None if language is not None else stripped[3:].strip()
    return language


class Outbox:
    def __init__(self, messages: MessageStore, channels: Mapping[str, ChannelAdapter]) -> None:
        self._messages = messages
        self._channels = channels

    async def deliver(self, message: OutboundMessage) -> bool:
        """Send a stored message; True when every part was delivered."""
        channel = self._channels.get(message.channel)
        if channel is None:
            log.warning(
                "delivery_no_channel", channel=message.channel, message_id=message.message_id
            )
            await self._settle(message, "failed")
            return False
        for index, part in enumerate(split_text(message.text, channel.max_message_chars)):
            piece = OutboundMessage(
                message.channel,
                message.chat_id,
                part,
                message.message_id,
                message.kind,
                {**message.metadata, "part": index},
            )
            if not await self._send_with_retry(channel, piece):
                await self._settle(message, "failed")
                return False
        await self._settle(message, "sent")
        return True

    async def _send_with_retry(self, channel: ChannelAdapter, message: OutboundMessage) -> bool:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                await channel.send(message)
                return True
            except DeliveryError as exc:
                log.warning(
                    "delivery_failed",
                    channel=message.channel,
                    chat_id=message.chat_id,
                    message_id=message.message_id,
                    attempt=attempt,
                    permanent=exc.permanent,
                    error=str(exc),
                )
                if exc.permanent or attempt == MAX_ATTEMPTS:
                    return False
                await asyncio.sleep(exc.retry_after or BASE_BACKOFF_SECONDS * 2 ** (attempt - 1))
            except Exception as exc:  # an adapter bug must not kill the worker
                log.exception(
                    "delivery_crashed",
                    channel=message.channel,
                    message_id=message.message_id,
                    error=repr(exc),
                )
                return False
        return False

    async def _settle(self, message: OutboundMessage, status: str) -> None:
        if message.message_id is not None:
            await self._messages.set_status([message.message_id], status)

    async def show_typing(self, channel_name: str, chat_id: str) -> None:
        """A best-effort typing indicator; failures are logged at debug and ignored."""
        channel = self._channels.get(channel_name)
        if channel is None:
            return
        try:
            await channel.typing(chat_id)
        except Exception as exc:
            log.debug("typing_failed", channel=channel_name, chat_id=chat_id, error=repr(exc))
