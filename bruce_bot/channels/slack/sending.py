"""Everything Bruce sends to Slack: replies (with their buttons and files), live texts, its own
notices, through one `AsyncWebClient`.

A reply part is converted to mrkdwn (mrkdwn.py) and posted into its chat (a DM, or a thread:
address.py) with `chat.postMessage`; what conversion made longer than Slack's 40000 characters
goes as several messages (`DeliveryError.pieces_sent` says how many went before a failure).
An artifact goes with `files_upload_v2` (files.getUploadURLExternal, the upload,
files.completeUploadExternal) into the same thread. The threads Bruce posted in are remembered
(`threads`): a message there is for Bruce without a mention.

Slack's refusals become the outbox's decisions: HTTP 429 is `rate_limited` with its
Retry-After; a channel that is gone or closed to Bruce (`channel_not_found`, `not_in_channel`,
`is_archived`, `msg_too_long`...) is permanent; a refused token, a 5xx or the network is tried
again later.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bruce_bot.channels.base import DeliveryError
from bruce_bot.channels.recent import Recent
from bruce_bot.channels.slack.address import SlackAddress
from bruce_bot.channels.slack.blocks import choice_blocks
from bruce_bot.channels.slack.mrkdwn import split_mrkdwn, to_mrkdwn
from bruce_bot.domain import OutboundMessage

log = structlog.get_logger(__name__)

PERMANENT_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "msg_too_long",
        "no_text",
        "invalid_blocks",
        "too_many_attachments",
        "restricted_action",
        "cannot_reply_to_message",
        "thread_not_found",
        "user_not_found",
        "message_not_found",  # a live message someone deleted: the reply goes as a new one
        "cant_update_message",
    }
)
DEFAULT_RETRY_SECONDS = 1.0


class SlackSender:
    def __init__(self) -> None:
        self.client: AsyncWebClient | None = None
        self.threads: Recent[str] = Recent()  # chat ids of the threads Bruce posted in

    def use(self, client: AsyncWebClient | None) -> None:
        self.client = client

    def _usable(self) -> AsyncWebClient:
        if self.client is None:
            raise DeliveryError("Slack is not connected (yet)")
        return self.client

    async def send(self, message: OutboundMessage) -> None:
        address = parse(message.chat_id)
        if message.file is not None:
            await self.upload(address, message.file.data, message.file.filename)
            return
        pieces = split_mrkdwn(to_mrkdwn(message.text))
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            blocks = choice_blocks(piece, message.choices) if last else None
            try:
                await self.post(address, piece, blocks)
            except DeliveryError as exc:
                exc.pieces_sent = index
                raise

    async def post(
        self, address: SlackAddress, mrkdwn: str, blocks: list[dict[str, Any]] | None = None
    ) -> str:
        """Post `mrkdwn` (already converted) into `address`; the new message's ts."""
        client = self._usable()
        arguments: dict[str, Any] = {"channel": address.channel, "text": mrkdwn}
        if address.thread_ts:
            arguments["thread_ts"] = address.thread_ts
        if blocks:
            arguments["blocks"] = blocks
        try:
            answer = await client.chat_postMessage(**arguments, unfurl_links=False)
        except Exception as exc:
            raise delivery_error(exc, str(address)) from exc
        if address.thread_ts:
            self.threads.add(str(address))
        return str(answer.get("ts") or "")

    async def update(
        self,
        address: SlackAddress,
        ts: str,
        mrkdwn: str,
        blocks: list[dict[str, Any]] | None = None,
    ) -> None:
        client = self._usable()
        try:
            await client.chat_update(
                channel=address.channel, ts=ts, text=mrkdwn, blocks=blocks or []
            )
        except Exception as exc:
            raise delivery_error(exc, str(address)) from exc

    async def delete(self, address: SlackAddress, ts: str) -> None:
        """Take a message down: best effort, never raises."""
        try:
            await self._usable().chat_delete(channel=address.channel, ts=ts)
        except Exception as exc:
            log.info("slack_delete_failed", chat_id=str(address), error=repr(exc))

    async def upload(self, address: SlackAddress, data: bytes, filename: str) -> None:
        client = self._usable()
        arguments: dict[str, Any] = {"channel": address.channel}
        if address.thread_ts:
            arguments["thread_ts"] = address.thread_ts
        try:
            await client.files_upload_v2(
                content=data, filename=filename, title=filename, **arguments
            )
        except Exception as exc:
            raise delivery_error(exc, str(address)) from exc

    async def react(self, address: SlackAddress, ts: str, name: str) -> None:
        """Add the reaction `name` to a message: best effort, never raises."""
        try:
            await self._usable().reactions_add(channel=address.channel, timestamp=ts, name=name)
        except Exception as exc:
            log.info("slack_reaction_failed", chat_id=str(address), error=repr(exc))

    async def say(self, address: SlackAddress, text: str) -> None:
        """The adapter's own words (not stored); failures are only logged."""
        try:
            await self.post(address, to_mrkdwn(text))
        except DeliveryError as exc:
            log.warning("slack_reply_failed", chat_id=str(address), error=str(exc))

    async def whisper(self, address: SlackAddress, user_id: str, text: str) -> None:
        """A notice only `user_id` sees (an ephemeral message); failures are only logged."""
        try:
            arguments: dict[str, Any] = {"channel": address.channel, "user": user_id}
            if address.thread_ts:
                arguments["thread_ts"] = address.thread_ts
            await self._usable().chat_postEphemeral(text=to_mrkdwn(text), **arguments)
        except Exception as exc:
            log.info("slack_ephemeral_failed", chat_id=str(address), error=repr(exc))


def parse(chat_id: str) -> SlackAddress:
    try:
        return SlackAddress.parse(chat_id)
    except ValueError as exc:
        raise DeliveryError(str(exc), permanent=True) from None


def _header(headers: Any, name: str) -> str | None:
    items = getattr(headers, "items", None)  # a dict, or aiohttp's CIMultiDictProxy
    if items is None:
        return None
    for key, value in items():
        if str(key).lower() == name.lower():
            return str(value[0] if isinstance(value, list) and value else value)
    return None


def retry_after(exc: SlackApiError) -> float:
    value = _header(getattr(exc.response, "headers", None), "Retry-After")
    try:
        return max(float(value), 0.0) if value is not None else DEFAULT_RETRY_SECONDS
    except ValueError:
        return DEFAULT_RETRY_SECONDS


def delivery_error(exc: Exception, chat_id: str) -> DeliveryError:
    """Translate a slack_sdk / network failure into the outbox's retry decision."""
    if isinstance(exc, DeliveryError):
        return exc
    if isinstance(exc, SlackApiError):
        status = getattr(exc.response, "status_code", 200)
        code = str(exc.response.get("error", "") if exc.response is not None else "")
        if status == 429 or code == "ratelimited":
            wait = retry_after(exc)
            return DeliveryError("Slack rate limit", retry_after=wait, rate_limited=True)
        if code in PERMANENT_ERRORS:
            return DeliveryError(f"Slack refused the message to {chat_id}: {code}", permanent=True)
        return DeliveryError(f"Slack answered {status}: {code or 'an error'}")
    if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError, SlackClientError)):
        return DeliveryError(f"Slack unreachable: {exc!r}")
    raise exc
