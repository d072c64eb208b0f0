"""The Discord channel: a discord.py client that turns DMs and mentions into inbox messages.

This is the only module that imports `discord`. A supervised background task runs the client;
`start` waits a bounded time for the gateway session, so an unreachable Discord never blocks Bruce
(discord.py resumes dropped sessions itself; the supervisor retries what discord.py gives up on,
such as a failed login over the network). Fatal set-up problems — a bad token, the Message Content
intent switched off — are logged once in words that say what to fix, and the channel stays off.

Bruce answers direct messages, and guild messages (threads included) that mention it; each channel
or thread is one session. The allowlist is checked before anything else: a stranger gets one
polite refusal per hour naming their user id, and nothing of theirs is stored or shown to an LLM.
`/new`, `/reminders` and `/help` (or `!new`, ...) are answered here, without the LLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import discord
import structlog
import yarl

from bruce_bot.channels.base import DeliveryError, InboxPort
from bruce_bot.config import DiscordConfig
from bruce_bot.domain import InboundMessage, OutboundMessage

log = structlog.get_logger(__name__)

DISCORD_CHANNEL = "discord"
MAX_MESSAGE_CHARS = 2000  # Discord refuses longer messages (400, code 50035)
READY_TIMEOUT_SECONDS = 10.0
STRANGER_REPLY_INTERVAL_SECONDS = 3600.0
FIRST_RESTART_DELAY_SECONDS = 1.0
MAX_RESTART_DELAY_SECONDS = 60.0
MAX_RATE_LIMIT_WAIT_SECONDS = 60.0  # longer 429 waits come back to the outbox as retry_after

# discord.py's own defaults, kept so that a config without overrides points back at Discord.
DEFAULT_API_BASE_URL = discord.http.Route.BASE
DEFAULT_GATEWAY_URL = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

# Close codes after which reconnecting cannot help (bad token, sharding, intents).
FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014})

INTENT_FIX = (
    "enable MESSAGE CONTENT INTENT in the Discord developer portal → your app → Bot → "
    "Privileged Gateway Intents, then restart Bruce"
)
TOKEN_FIX = (
    "channels.discord.token was refused by Discord; copy the bot token again from the Discord "
    "developer portal → your app → Bot → Reset Token, put it in config.yml (or "
    "$DISCORD_BOT_TOKEN), then restart Bruce"
)
HELP_TEXT = (
    "I'm Bruce, your personal assistant. Write to me here (in a server, mention me) and I'll "
    "answer; I can search the web, read pages, write reports and keep reminders.\n"
    "/new — start a new conversation (I set the earlier messages aside)\n"
    "/reminders — list the scheduled reminders and briefings of this chat\n"
    "/help — this message\n"
    "(!new, !reminders and !help work too.)"
)
ONLY_TEXT_REPLY = "I can only read text for now; please type your message."
EMPTY_MENTION_REPLY = "Yes? Write your message after the mention and I'll answer."
NOT_STORED_REPLY = "I couldn't take your message just now; please send it again in a minute."

_USER_MENTION = r"[ \t]*<@!?{id}>[ \t]*"  # with the spaces around it, not the text's own
_COMMANDS = frozenset({"new", "reminders", "help"})
_ANSWERED_TYPES = (discord.MessageType.default, discord.MessageType.reply)
# Parsers whose failure leaves the session unusable: let them end the client (and restart it).
_UNGUARDED_EVENTS = frozenset({"READY", "RESUMED"})


def _point_library_at(config: DiscordConfig) -> None:
    """Aim discord.py's REST base and gateway at the configured URLs (or Discord's own).

    discord.py reads both from class attributes, so this is process-wide. That is acceptable
    because a Bruce process runs exactly one Discord client (one bot token, one adapter); the
    values are set in `start`, before each login, from this adapter's config.
    """
    discord.http.Route.BASE = config.api_base_url or DEFAULT_API_BASE_URL
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = (
        yarl.URL(config.gateway_url) if config.gateway_url else DEFAULT_GATEWAY_URL
    )


def _intents() -> discord.Intents:
    intents = discord.Intents.default()
    intents.message_content = True  # privileged: switched on in the developer portal
    intents.dm_messages = True
    intents.guild_messages = True
    return intents


def _guard_parsers(client: discord.Client) -> None:
    """Keep one malformed gateway event from ending the whole session.

    discord.py lets an exception raised while parsing a gateway event end `client.start()`;
    wrapping its parsers logs and skips the event instead. (`_connection.parsers` is internal:
    if it ever disappears the supervisor's restart still covers a crash.)
    """
    parsers = getattr(getattr(client, "_connection", None), "parsers", None)
    if not isinstance(parsers, dict):
        log.debug("discord_parsers_not_guarded")
        return
    for event, parse in list(parsers.items()):
        if event not in _UNGUARDED_EVENTS:
            parsers[event] = _guarded(event, parse)


def _guarded(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
    def parse_or_skip(data: Any) -> None:
        try:
            parse(data)
        except Exception as exc:
            log.warning("discord_event_malformed", gateway_event=event, error=repr(exc))

    return parse_or_skip


def _delivery_error(exc: Exception, chat_id: str) -> DeliveryError:
    """Translate a discord.py / network failure into the outbox's retry decision."""
    if isinstance(exc, discord.Forbidden):
        return DeliveryError(f"Discord refused access to channel {chat_id}", permanent=True)
    if isinstance(exc, discord.NotFound):
        return DeliveryError(f"Discord channel {chat_id} does not exist", permanent=True)
    if isinstance(exc, discord.RateLimited):
        return DeliveryError("Discord rate limit", retry_after=exc.retry_after)
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


def _command_of(text: str) -> str | None:
    """`new` for "/new" or "!new" (the whole message); None for anything else."""
    words = text.split()
    if len(words) != 1 or words[0][:1] not in ("/", "!"):
        return None
    command = words[0][1:].lower()
    return command if command in _COMMANDS else None


class DiscordChannel:
    name = DISCORD_CHANNEL
    max_message_chars = MAX_MESSAGE_CHARS

    def __init__(
        self,
        config: DiscordConfig,
        *,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._allowed = frozenset(config.allowed_user_ids)
        self._ready_timeout = ready_timeout
        self._clock = clock
        self._inbox: InboxPort | None = None
        self._client: discord.Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._stopping = asyncio.Event()
        self._channels: dict[int, Any] = {}  # channel id -> a discord.py messageable
        self._strangers_told: dict[int, float] = {}  # user id -> when they were last told
        self._session_started = False  # the current client reached a gateway session
        self.gave_up: str | None = None  # why the channel stopped for good, if it did

    # ---- life cycle ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while a gateway session is established."""
        return self._connected.is_set()

    @property
    def accepting(self) -> bool:
        """True between `start` and `stop`: incoming messages are taken in."""
        return self._inbox is not None

    async def start(self, inbox: InboxPort) -> None:
        self._inbox = inbox
        self._stopping.clear()
        if not self._allowed:
            log.warning(
                "discord_allowlist_empty",
                hint="nobody can talk to Bruce on Discord; add Discord user ids to "
                "channels.discord.allowed_user_ids in config.yml",
            )
        _point_library_at(self._config)
        self._runner = asyncio.create_task(self._run(), name="discord-client")
        waiting = asyncio.create_task(self._connected.wait())
        try:
            await asyncio.wait(
                {waiting, self._runner},
                timeout=self._ready_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            waiting.cancel()
        if not self._connected.is_set() and not self._runner.done():
            log.warning(
                "discord_not_connected_yet",
                waited_seconds=self._ready_timeout,
                hint="Bruce runs without Discord for now and keeps trying in the background",
            )

    async def stop(self) -> None:
        """Stop intake: messages arriving from now on are ignored. Sending keeps working (turns
        that are still running reply) until `close`."""
        self._stopping.set()
        self._inbox = None

    async def close(self) -> None:
        """Close the connection to Discord and end the client task; `send` fails (transiently)
        from now on."""
        await self.stop()
        client = self._client
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
            ready_task = getattr(getattr(client, "_connection", None), "_ready_task", None)
            if isinstance(ready_task, asyncio.Task):
                ready_task.cancel()  # discord.py's delayed on_ready would fire on a closed client
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
        self._connected.clear()

    async def _run(self) -> None:
        """Run clients one after another until stopped or a fatal problem; never raises."""
        delay = FIRST_RESTART_DELAY_SECONDS
        while not self._stopping.is_set():
            client = self._new_client()
            self._client = client
            self._channels.clear()
            self._session_started = False
            try:
                await client.start(self._config.token)
                outcome = "stopped"
            except discord.PrivilegedIntentsRequired:
                self._give_up(
                    "discord_message_content_intent_missing",
                    f"Discord refused the Message Content intent: {INTENT_FIX}",
                )
                return
            except discord.LoginFailure:
                self._give_up("discord_login_failed", TOKEN_FIX)
                return
            except discord.ConnectionClosed as exc:
                if self._stopping.is_set():
                    return
                if exc.code in FATAL_CLOSE_CODES:
                    reason = TOKEN_FIX if exc.code == 4004 else f"gateway closed with {exc.code}"
                    self._give_up("discord_gateway_refused", reason)
                    return
                outcome = f"gateway closed ({exc.code})"
            except (
                OSError,
                aiohttp.ClientError,
                discord.HTTPException,
                discord.GatewayNotFound,
            ) as exc:
                outcome = f"unreachable: {exc!r}"
            except Exception as exc:
                if not self._stopping.is_set():
                    log.exception("discord_client_crashed", error=repr(exc))
                outcome = f"crashed: {exc!r}"
            finally:
                self._connected.clear()
                with contextlib.suppress(Exception):
                    await client.close()
            if self._stopping.is_set():
                return
            if self._session_started:
                delay = FIRST_RESTART_DELAY_SECONDS  # it worked for a while: start over quickly
            log.warning("discord_retrying", outcome=outcome, retry_in_seconds=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            delay = min(delay * 2, MAX_RESTART_DELAY_SECONDS)

    def _give_up(self, event: str, reason: str) -> None:
        self.gave_up = reason
        log.error(event, fix=reason)

    def _new_client(self) -> discord.Client:
        # Bruce has no voice: skip discord.py's start-up warnings about missing voice libraries.
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        client = discord.Client(
            intents=_intents(),
            max_messages=None,  # Bruce keeps its own history; no message cache needed
            # A model's answer must never ping @everyone, roles or users.
            allowed_mentions=discord.AllowedMentions.none(),
            max_ratelimit_timeout=MAX_RATE_LIMIT_WAIT_SECONDS,
        )
        _guard_parsers(client)

        async def on_connect() -> None:
            self._session_started = True
            self._connected.set()
            me = client.user
            log.info(
                "discord_connected",
                bot=str(me) if me else None,
                bot_id=me.id if me else None,
            )

        async def on_resumed() -> None:
            self._connected.set()
            log.info("discord_resumed")

        async def on_disconnect() -> None:
            self._connected.clear()
            if not self._stopping.is_set():
                log.info("discord_gateway_dropped")

        async def on_message(message: discord.Message) -> None:
            try:
                await self._receive(client, message)
            except Exception as exc:
                log.exception(
                    "discord_message_failed",
                    message_id=getattr(message, "id", None),
                    error=repr(exc),
                )

        for handler in (on_connect, on_resumed, on_disconnect, on_message):
            client.event(handler)
        return client

    # ---- intake -------------------------------------------------------------------------------

    async def _receive(self, client: discord.Client, message: discord.Message) -> None:
        inbox = self._inbox
        me = client.user
        author = getattr(message, "author", None)
        if inbox is None:
            return  # intake stopped
        if me is None or author is None:
            log.debug("discord_message_skipped", reason="no author", message_id=message.id)
            return
        if author.id == me.id or author.bot or message.webhook_id is not None:
            return
        if message.type not in _ANSWERED_TYPES:
            return  # joins, pins, thread notices...
        in_guild = message.guild is not None
        if in_guild and not self._addresses_me(message, me):
            return
        channel = message.channel
        if author.id not in self._allowed:
            await self._refuse_stranger(channel, author)
            return
        self._channels[channel.id] = channel
        chat_id = str(channel.id)
        text = self._without_mentions(message, me).strip() if in_guild else message.content.strip()
        command = _command_of(text)
        if command is not None:
            await self._say(channel, await self._run_command(inbox, command, chat_id))
            return
        if not text:
            non_text = message.attachments or message.stickers or message.embeds
            await self._say(channel, ONLY_TEXT_REPLY if non_text else EMPTY_MENTION_REPLY)
            return
        inbound = InboundMessage(
            DISCORD_CHANNEL,
            chat_id,
            text,
            user_id=str(author.id),
            user_name=author.display_name,
            platform_message_id=str(message.id),
            metadata={"group": True} if in_guild else {},
        )
        try:
            submission = await inbox.submit(inbound)
        except Exception as exc:
            log.exception("discord_submit_failed", chat_id=chat_id, error=repr(exc))
            await self._say(channel, NOT_STORED_REPLY)
            return
        if not submission.accepted:
            log.info(
                "discord_message_not_accepted",
                chat_id=chat_id,
                platform_message_id=inbound.platform_message_id,
                reason=submission.reason,
            )

    @staticmethod
    def _addresses_me(message: discord.Message, me: discord.ClientUser) -> bool:
        if me.id in message.raw_mentions or any(user.id == me.id for user in message.mentions):
            return True
        # Mentioning the bot's own role (Discord's autocomplete offers it) addresses it too.
        return any(role.tags and role.tags.bot_id == me.id for role in message.role_mentions)

    @staticmethod
    def _without_mentions(message: discord.Message, me: discord.ClientUser) -> str:
        text = re.sub(_USER_MENTION.format(id=me.id), " ", message.content)
        for role in message.role_mentions:
            if role.tags and role.tags.bot_id == me.id:
                text = re.sub(rf"[ \t]*<@&{role.id}>[ \t]*", " ", text)
        return text

    async def _refuse_stranger(self, channel: Any, author: discord.abc.User) -> None:
        now = self._clock()
        last = self._strangers_told.get(author.id)
        told = last is not None and now - last < STRANGER_REPLY_INTERVAL_SECONDS
        log.info("discord_stranger_refused", user_id=author.id, chat_id=channel.id, told=told)
        if told:
            return
        if len(self._strangers_told) > 1000:  # forget whoever was told long ago
            self._strangers_told = {
                user: at
                for user, at in self._strangers_told.items()
                if now - at < STRANGER_REPLY_INTERVAL_SECONDS
            }
        self._strangers_told[author.id] = now
        await self._say(
            channel,
            "Hi! I'm a private assistant and only talk to people my owner has allowed. Your "
            f"Discord user id is {author.id}; if you know my owner, ask them to add it to "
            "channels.discord.allowed_user_ids in config.yml.",
        )

    async def _run_command(self, inbox: InboxPort, command: str, chat_id: str) -> str:
        log.info("discord_command", command=command, chat_id=chat_id)
        if command == "new":
            return await inbox.new_conversation(DISCORD_CHANNEL, chat_id)
        if command == "reminders":
            return await inbox.describe_reminders(DISCORD_CHANNEL, chat_id)
        return HELP_TEXT

    async def _say(self, channel: Any, text: str) -> None:
        """A direct answer from the adapter itself (not stored); failures are only logged."""
        try:
            await channel.send(text)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord_reply_failed", chat_id=channel.id, error=repr(exc))

    # ---- delivery -----------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        try:
            channel_id = int(message.chat_id)
        except ValueError:
            raise DeliveryError(
                f"{message.chat_id!r} is not a Discord channel id", permanent=True
            ) from None
        client = self._usable_client()
        try:
            channel = await self._channel(client, channel_id)
            await channel.send(message.text)
        except Exception as exc:
            if client.is_closed():  # closed under our feet (stop, restart): try again later
                raise DeliveryError("the Discord client closed during the send") from exc
            error = _delivery_error(exc, message.chat_id)
            if error.permanent:
                self._channels.pop(channel_id, None)
            raise error from exc

    async def typing(self, chat_id: str) -> None:
        client = self._usable_client()
        channel = await self._channel(client, int(chat_id))
        await channel.typing()  # awaiting (not entering) sends one indicator

    def _usable_client(self) -> discord.Client:
        client = self._client
        if client is None or client.user is None or client.is_closed():
            raise DeliveryError("Discord is not connected (yet)")
        return client

    async def _channel(self, client: discord.Client, channel_id: int) -> Any:
        channel = self._channels.get(channel_id) or client.get_channel(channel_id)
        if channel is None:
            channel = await client.fetch_channel(channel_id)
        self._channels[channel_id] = channel
        return channel
