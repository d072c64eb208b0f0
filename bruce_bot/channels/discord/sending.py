"""Everything Bruce sends to Discord: replies (with their buttons), typing, its own notices.

Sends go through the current client (`client`: None or closed, and the send fails transiently,
so the outbox retries it later). Channels are looked up once and kept; the ids of the messages
Bruce sent are remembered (`sent`), since a reply to one of them is addressed to Bruce.
discord.py's and the network's failures become `DeliveryError`s the outbox understands: retry
later, or never. A live reply (discord_live.py) posts and edits its message here too, and
`finish_in` edits the reply into it.
"""

from __future__ import annotations

import io
from typing import Any

import aiohttp
import discord
import structlog

from bruce_bot.channels.base import DeliveryError
from bruce_bot.channels.discord.buttons import SEND_ERRORS, choice_view
from bruce_bot.channels.recent import Recent
from bruce_bot.domain import OutboundMessage

log = structlog.get_logger(__name__)


class DiscordSender:
    def __init__(self) -> None:
        self.client: discord.Client | None = None
        self.sent: Recent[int] = Recent()  # messages Bruce posted: a reply to one is addressed
        self._channels: dict[int, Any] = {}  # channel id -> a discord.py messageable

    def use(self, client: discord.Client) -> None:
        """Send through `client` from now on (a new client knows no channel yet)."""
        self.client = client
        self._channels.clear()

    def remember(self, channel: Any) -> None:
        """A channel a message came from: replies to it need no lookup."""
        self._channels[channel.id] = channel

    async def send(self, message: OutboundMessage) -> None:
        try:
            channel_id = int(message.chat_id)
        except ValueError:
            raise DeliveryError(
                f"{message.chat_id!r} is not a Discord channel id", permanent=True
            ) from None
        client = self._usable_client()
        view = choice_view(message.choices)
        try:
            channel = await self.channel(client, channel_id)
            if message.file is not None:  # an artifact sent with its reply, as an attachment
                upload = discord.File(io.BytesIO(message.file.data), filename=message.file.filename)
                sent = await channel.send(file=upload)
            else:
                sent = await channel.send(message.text, view=view)
        except Exception as exc:
            if client.is_closed():  # closed under our feet (stop, restart): try again later
                raise DeliveryError("the Discord client closed during the send") from exc
            error = _delivery_error(exc, message.chat_id)
            if error.permanent:
                self._channels.pop(channel_id, None)
            raise error from exc
        finally:
            if view is not None:
                view.stop()  # it only carried the buttons: presses go to on_interaction
        self.sent.add(sent.id)

    async def post(self, channel_id: int, text: str) -> Any:
        """Post `text` (a live reply's first text); returns the discord.py message."""
        client = self._usable_client()
        try:
            channel = await self.channel(client, channel_id)
            sent = await channel.send(text)
        except Exception as exc:
            raise self._failure(exc, client, str(channel_id)) from exc
        self.sent.add(sent.id)
        return sent

    async def edit(self, message: Any, text: str) -> None:
        """Change a live reply's text."""
        client = self._usable_client()
        try:
            await message.edit(content=text)
        except Exception as exc:
            raise self._failure(exc, client, str(message.channel.id)) from exc

    async def finish_in(self, live: Any, message: OutboundMessage) -> None:
        """A reply's part (at most 2000 characters: the outbox splits it) edited into the live
        message that showed it being written, with its buttons; a live message that is gone (the
        user deleted it) is replaced by a new one."""
        client = self._usable_client()
        view = choice_view(message.choices)
        try:
            await live.edit(content=message.text, view=view)
        except discord.NotFound:
            log.info("discord_live_message_gone", chat_id=message.chat_id)
            if view is not None:
                view.stop()
            await self.send(message)
            return
        except Exception as exc:
            raise self._failure(exc, client, message.chat_id) from exc
        finally:
            if view is not None:
                view.stop()  # it only carried the buttons: presses go to on_interaction

    async def delete(self, message: Any) -> None:
        """Take a live reply down: best effort, never raises."""
        try:
            await message.delete()
        except Exception as exc:
            log.info("discord_delete_failed", chat_id=message.channel.id, error=repr(exc))

    def _failure(self, exc: Exception, client: discord.Client, chat_id: str) -> DeliveryError:
        if client.is_closed():  # closed under our feet (stop, restart): try again later
            return DeliveryError("the Discord client closed during the send")
        return _delivery_error(exc, chat_id)

    async def typing(self, chat_id: str) -> None:
        client = self._usable_client()
        channel = await self.channel(client, int(chat_id))
        await channel.typing()  # awaiting (not entering) sends one indicator

    async def say(
        self, channel: Any, text: str, reference: discord.MessageReference | None = None
    ) -> None:
        """A direct answer from the adapter itself (not stored); failures are only logged."""
        try:
            sent = await channel.send(text, reference=reference)
        except SEND_ERRORS as exc:
            log.warning("discord_reply_failed", chat_id=channel.id, error=repr(exc))
            return
        self.sent.add(sent.id)

    async def channel(self, client: discord.Client, channel_id: int) -> Any:
        channel = self._channels.get(channel_id) or client.get_channel(channel_id)
        if channel is None:
            channel = await client.fetch_channel(channel_id)
        self._channels[channel_id] = channel
        return channel

    def _usable_client(self) -> discord.Client:
        client = self.client
        if client is None or client.user is None or client.is_closed():
            raise DeliveryError("Discord is not connected (yet)")
        return client


def _delivery_error(exc: Exception, chat_id: str) -> DeliveryError:
    """Translate a discord.py / network failure into the outbox's retry decision."""
    if isinstance(exc, discord.Forbidden):
        return DeliveryError(f"Discord refused access to channel {chat_id}", permanent=True)
    if isinstance(exc, discord.NotFound):
        return DeliveryError(f"Discord channel {chat_id} does not exist", permanent=True)
    if isinstance(exc, discord.RateLimited):
        return DeliveryError("Discord rate limit", retry_after=exc.retry_after, rate_limited=True)
    if isinstance(exc, discord.HTTPException):
        transient = exc.status == 429 or exc.status >= 500
        return DeliveryError(
            f"Discord answered {exc.status} (code {exc.code}): {exc.text}", permanent=not transient
        )
    if isinstance(exc, (aiohttp.ClientError, OSError)):  # includes timeouts
        return DeliveryError(f"Discord unreachable: {exc!r}")
    if isinstance(exc, discord.InvalidData):
        return DeliveryError(f"Discord channel {chat_id} cannot take messages", permanent=True)
    raise exc
