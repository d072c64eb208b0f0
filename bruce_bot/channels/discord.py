"""The Discord channel: a discord.py client that turns DMs and mentions into inbox messages.

This is the only module that imports `discord`. A supervised background task runs the client;
`start` waits a bounded time for the gateway session, so an unreachable Discord never blocks Bruce
(discord.py resumes dropped sessions itself; the supervisor retries what discord.py gives up on,
such as a failed login over the network). Fatal set-up problems — a bad token, the Message Content
intent switched off — are logged once in words that say what to fix, and the channel stays off.

Bruce answers direct messages, and guild messages (threads included) addressed to it: a mention
of Bruce or of its role, or a reply to one of its messages (with or without the reply ping). Each
channel or thread is one session. The allowlist is checked right after that: a stranger gets one
polite refusal per hour naming their user id, and nothing of theirs is stored or shown to an LLM.
`/new`, `/reminders` and `/help` (or `!new`, ...) are answered here, without the LLM.

What Discord really sends is handled here too. A forwarded message carries its text in a snapshot;
that text (and the descriptions of its attachments and embeds) is read as "[forwarded] ...". A
message with nothing to read (poll, sticker, voice message, bare attachment) gets one short notice;
system messages (joins, pins, "thread created") and edits are ignored; messages from bots,
webhooks and applications too. Which messages a reply points at: Discord includes the replied-to
message (`referenced_message`), sends null when it was deleted and sometimes leaves it out; then
Bruce checks the id against the messages it sent recently and, only when Discord left it out,
fetches that one message once.

Buttons: a message with `choices` carries them as one action row of buttons (custom_id = the
choice's data), sent with a `discord.ui.View` that is stopped at once: presses are handled in
`on_interaction`, for any message Bruce ever sent, so they keep working after a restart. The
presser must be on the allowlist (a stranger gets an ephemeral "not allowed"); the data goes to
`inbox.choose` for the channel; the interaction is answered by updating the message without its
buttons (type 7), and the outcome is posted as a reply to it. A press Bruce does not know any
more gets an ephemeral "This button is no longer active."
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
from bruce_bot.domain import Choice, InboundMessage, OutboundMessage

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
    "I'm Bruce, your personal assistant. Write to me here and I'll answer; I can search the web, "
    "read pages, write reports and keep reminders.\n"
    "/new — start a new conversation (I set the earlier messages aside)\n"
    "/reminders — list the scheduled reminders and briefings of this chat\n"
    "/help — this message\n"
    "(!new, !reminders and !help work too.)"
)
# In a server Bruce only sees what is addressed to it: say how (never in a DM).
SERVER_HELP_TEXT = HELP_TEXT + "\nIn a server, mention me or reply to one of my messages."
ONLY_TEXT_REPLY = "I can only read text for now; please type your message."
EMPTY_MENTION_REPLY = "Yes? Write your message after the mention and I'll answer."
NOT_STORED_REPLY = "I couldn't take your message just now; please send it again in a minute."
FORWARDED_MARK = "[forwarded]"
# Ephemeral answers to a button press (only the presser sees them).
PRESS_NOT_ALLOWED_REPLY = "Sorry, only people my owner has allowed can use these buttons."
BUTTON_INACTIVE_REPLY = "This button is no longer active."
PRESS_FAILED_REPLY = "Sorry, that didn't work on my side. Please try again, or answer in words."
RESTARTING_REPLY = "I'm restarting right now. Please try again in a minute."
CUSTOM_ID_LIMIT = 100  # characters, Discord's limit for a button's custom_id
BUTTON_LABEL_LIMIT = 80
BUTTONS_PER_ROW = 5
RECENT_IDS_KEPT = 2000  # Bruce's own sent messages, and messages already handled
FETCH_REFERENCE_TIMEOUT_SECONDS = 5.0

_USER_MENTION = r"[ \t]*<@!?{id}>[ \t]*"  # with the spaces around it, not the text's own
_COMMANDS = frozenset({"new", "reminders", "help"})
_ANSWERED_TYPES = (discord.MessageType.default, discord.MessageType.reply)
# Parsers whose failure leaves the session unusable: let them end the client (and restart it).
_UNGUARDED_EVENTS = frozenset({"READY", "RESUMED"})
# An edit is not a new message (and Discord's partial updates, e.g. a link preview arriving, carry
# no author or content): Bruce has no use for them, so they are not parsed at all.
_IGNORED_EVENTS = frozenset({"MESSAGE_UPDATE"})
# Fields discord.py requires but Discord sometimes leaves out, which would lose the whole message:
# a reply to a forward carries snapshots without `type` (discord/discord-api-docs#7814), and a
# poll's text "should always be non-null ... but please do not depend on that" (Discord's docs).
_SNAPSHOT_DEFAULTS: dict[str, Any] = {
    "type": 0,
    "content": "",
    "embeds": [],
    "attachments": [],
    "edited_timestamp": None,
}


class _RecentIds:
    """The last `size` ids added; the oldest are forgotten first."""

    def __init__(self, size: int = RECENT_IDS_KEPT) -> None:
        self._size = size
        self._ids: dict[int, None] = {}

    def add(self, item: int) -> None:
        self._ids.pop(item, None)
        self._ids[item] = None
        if len(self._ids) > self._size:
            del self._ids[next(iter(self._ids))]

    def discard(self, item: int) -> None:
        self._ids.pop(item, None)

    def __contains__(self, item: object) -> bool:
        return item in self._ids


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
        if event in _IGNORED_EVENTS:
            parsers[event] = _ignored(event)
        elif event == "MESSAGE_CREATE":
            parsers[event] = _guarded(event, _completing(parse))
        elif event not in _UNGUARDED_EVENTS:
            parsers[event] = _guarded(event, parse)


def _ids_of(data: Any) -> dict[str, Any]:
    """The ids that find a gateway event's message again (for the logs)."""
    if not isinstance(data, dict):
        return {}
    return {"message_id": data.get("id"), "channel_id": data.get("channel_id")}


def _guarded(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
    def parse_or_skip(data: Any) -> None:
        try:
            parse(data)
        except Exception as exc:
            log.warning(
                "discord_event_malformed", gateway_event=event, error=repr(exc), **_ids_of(data)
            )

    return parse_or_skip


def _ignored(event: str) -> Callable[[Any], None]:
    def skip(data: Any) -> None:
        log.debug("discord_event_ignored", gateway_event=event, **_ids_of(data))

    return skip


def _completing(parse: Callable[[Any], None]) -> Callable[[Any], None]:
    """`parse` of a MESSAGE_CREATE whose optional-in-practice fields are filled in first."""

    def parse_completed(data: Any) -> None:
        if isinstance(data, dict):
            for message in (data, data.get("referenced_message")):
                if isinstance(message, dict):
                    _complete_snapshots(message)
                    _complete_poll(message.get("poll"))
        parse(data)

    return parse_completed


def _complete_poll(poll: Any) -> None:
    if not isinstance(poll, dict):
        return
    media = [poll.get("question")]
    answers = poll.get("answers")
    if isinstance(answers, list):
        media += [answer.get("poll_media") for answer in answers if isinstance(answer, dict)]
    for item in media:
        if isinstance(item, dict):
            item.setdefault("text", "")


def _complete_snapshots(message: dict[str, Any]) -> None:
    snapshots = message.get("message_snapshots")
    if not isinstance(snapshots, list):
        return
    for snapshot in snapshots:
        inner = snapshot.get("message") if isinstance(snapshot, dict) else None
        if not isinstance(inner, dict):
            continue
        for key, default in _SNAPSHOT_DEFAULTS.items():
            if key not in inner:
                inner[key] = list(default) if isinstance(default, list) else default
        inner.setdefault("timestamp", message.get("timestamp"))


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


def _is_reply(message: discord.Message) -> bool:
    """A reply (not a forward, a pin notice or a crosspost, which carry references too)."""
    ref = message.reference
    return (
        message.type is discord.MessageType.reply
        and ref is not None
        and ref.type is discord.MessageReferenceType.reply
        and ref.message_id is not None
    )


def _without_my_mentions(text: str, my_id: int, my_role_id: int | None) -> str:
    text = re.sub(_USER_MENTION.format(id=my_id), " ", text)
    if my_role_id is not None:
        text = re.sub(rf"[ \t]*<@&{my_role_id}>[ \t]*", " ", text)
    return text


def _snapshot_text(snapshot: discord.MessageSnapshot, my_id: int, my_role_id: int | None) -> str:
    """What a forwarded message says: its text, then its attachments' and embeds' descriptions."""
    parts = [_without_my_mentions(snapshot.content, my_id, my_role_id)]
    parts += [attachment.description or "" for attachment in snapshot.attachments]
    for embed in snapshot.embeds:
        parts += [embed.title or "", embed.description or ""]
    return "\n".join(part.strip() for part in parts if part.strip())


def _carries_something(message: discord.Message) -> bool:
    """True when a message without text still carries something (file, sticker, poll...)."""
    return bool(
        message.attachments
        or message.stickers
        or message.embeds
        or message.poll is not None
        or message.flags.voice
        or message.message_snapshots
        or message.components
    )


def _choice_view(choices: tuple[Choice, ...]) -> discord.ui.View | None:
    """The choices as one row of buttons (the first one primary), or None without any."""
    view = discord.ui.View(timeout=None)
    for choice in choices:
        label = choice.label.strip()[:BUTTON_LABEL_LIMIT]
        if not label or not 1 <= len(choice.data) <= CUSTOM_ID_LIMIT:
            log.warning("discord_button_left_out", label=choice.label, data_chars=len(choice.data))
            continue
        if len(view.children) == BUTTONS_PER_ROW:
            log.warning("discord_button_left_out", label=choice.label, reason="row full")
            continue
        style = discord.ButtonStyle.secondary if view.children else discord.ButtonStyle.primary
        view.add_item(discord.ui.Button(label=label, custom_id=choice.data, style=style, row=0))
    return view if view.children else None


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
        self._sent_ids = _RecentIds()  # messages Bruce posted: a reply to one is addressed
        self._handled_ids = _RecentIds()  # messages already answered (Discord may send one twice)
        self._used_buttons = _RecentIds()  # messages whose buttons were pressed and answered
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

        async def on_interaction(interaction: discord.Interaction) -> None:
            if interaction.type is not discord.InteractionType.component:
                return
            try:
                await self._on_press(interaction)
            except Exception as exc:
                log.exception(
                    "discord_press_failed", interaction_id=interaction.id, error=repr(exc)
                )

        for handler in (on_connect, on_resumed, on_disconnect, on_message, on_interaction):
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
        if author.id == me.id:
            self._sent_ids.add(message.id)  # Discord echoes Bruce's own messages
            return
        if author.bot or message.webhook_id is not None or message.application_id is not None:
            return  # bots, webhooks, applications' interaction responses
        if message.type not in _ANSWERED_TYPES:
            return  # joins, pins, thread notices...
        guild = message.guild
        in_guild = guild is not None
        my_role = guild.self_role if guild is not None else None
        my_role_id = my_role.id if my_role is not None else None
        if in_guild and not await self._addresses_me(client, message, me.id, my_role_id):
            return
        if message.id in self._handled_ids:
            log.info("discord_message_repeated", message_id=message.id)
            return
        self._handled_ids.add(message.id)
        channel = message.channel
        if author.id not in self._allowed:
            await self._refuse_stranger(channel, author)
            return
        self._channels[channel.id] = channel
        chat_id = str(channel.id)
        text = self._text_of(message, me.id, my_role_id)
        command = _command_of(text)
        if command is not None:
            await self._say(channel, await self._run_command(inbox, command, chat_id, in_guild))
            return
        if not text:
            # In a DM there is no mention to write after: anything without text is non-text.
            bare_mention = in_guild and not _carries_something(message)
            log.info("discord_message_without_text", message_id=message.id, chat_id=chat_id)
            await self._say(channel, EMPTY_MENTION_REPLY if bare_mention else ONLY_TEXT_REPLY)
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
            log.exception(
                "discord_submit_failed", chat_id=chat_id, message_id=message.id, error=repr(exc)
            )
            await self._say(channel, NOT_STORED_REPLY)
            return
        if not submission.accepted:
            log.info(
                "discord_message_not_accepted",
                chat_id=chat_id,
                platform_message_id=inbound.platform_message_id,
                reason=submission.reason,
            )

    async def _on_press(self, interaction: discord.Interaction) -> None:
        """A button under one of Bruce's messages was pressed."""
        user_id = getattr(interaction.user, "id", None)
        channel_id, message = interaction.channel_id, interaction.message
        data = str((interaction.data or {}).get("custom_id", ""))
        if user_id not in self._allowed:
            log.info("discord_stranger_press_refused", user_id=user_id, chat_id=channel_id)
            await self._answer_privately(interaction, PRESS_NOT_ALLOWED_REPLY)
            return
        inbox = self._inbox
        if inbox is None:
            await self._answer_privately(interaction, RESTARTING_REPLY)
            return
        if channel_id is None or message is None or message.id in self._used_buttons:
            await self._answer_privately(interaction, BUTTON_INACTIVE_REPLY)
            return
        chat_id = str(channel_id)
        # Presses are handled concurrently: a second tap that comes while the first is being
        # answered finds the buttons used already.
        self._used_buttons.add(message.id)
        try:
            reply = await inbox.choose(DISCORD_CHANNEL, chat_id, data)
        except Exception as exc:
            self._used_buttons.discard(message.id)  # may be tried again
            log.exception("discord_choose_failed", chat_id=chat_id, data=data, error=repr(exc))
            await self._answer_privately(interaction, PRESS_FAILED_REPLY)
            return
        log.info("discord_press", chat_id=chat_id, data=data, known=reply is not None)
        if reply is None:
            await self._answer_privately(interaction, BUTTON_INACTIVE_REPLY)
            return
        try:  # the buttons go: the press is answered
            await interaction.response.edit_message(view=None)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            # Too late (Discord waits 3 s for an answer) or refused: edit the message instead.
            log.info("discord_press_not_answered", interaction_id=interaction.id, error=repr(exc))
            with contextlib.suppress(discord.DiscordException, aiohttp.ClientError, OSError):
                await message.edit(view=None)
        channel = await self._channel(interaction.client, channel_id)
        await self._say(channel, reply, reference=message.to_reference(fail_if_not_exists=False))

    async def _answer_privately(self, interaction: discord.Interaction, text: str) -> None:
        """An ephemeral answer to a press: only the presser sees it."""
        try:
            await interaction.response.send_message(text, ephemeral=True)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.info("discord_press_not_answered", interaction_id=interaction.id, error=repr(exc))

    async def _addresses_me(
        self, client: discord.Client, message: discord.Message, my_id: int, my_role_id: int | None
    ) -> bool:
        """In a guild: a mention of Bruce or its role, a forward of a message that mentions it,
        or a reply to one of Bruce's messages."""
        if my_id in message.raw_mentions or any(user.id == my_id for user in message.mentions):
            return True
        # Mentioning the bot's own role (Discord's autocomplete offers it) addresses it too.
        if any(role.tags and role.tags.bot_id == my_id for role in message.role_mentions):
            return True
        for snapshot in message.message_snapshots:
            if my_id in snapshot.raw_mentions or my_role_id in snapshot.raw_role_mentions:
                return True
        return _is_reply(message) and await self._replies_to_me(client, message, my_id)

    async def _replies_to_me(
        self, client: discord.Client, message: discord.Message, my_id: int
    ) -> bool:
        ref = message.reference
        if ref is None or ref.message_id is None:
            return False
        replied = ref.resolved
        if isinstance(replied, discord.Message):
            replied_author = getattr(replied, "author", None)
            return replied_author is not None and replied_author.id == my_id
        if ref.message_id in self._sent_ids:
            return True
        if isinstance(replied, discord.DeletedReferencedMessage):
            return False  # Discord sent null: deleted, nothing left to fetch
        # Discord left the replied-to message out: ask for that one message, once.
        channel = client.get_partial_messageable(ref.channel_id, guild_id=ref.guild_id)
        try:
            async with asyncio.timeout(FETCH_REFERENCE_TIMEOUT_SECONDS):
                fetched = await channel.fetch_message(ref.message_id)
        except Exception as exc:  # gone, forbidden, unreachable or unreadable: not for Bruce
            log.info(
                "discord_reference_not_fetched",
                message_id=message.id,
                referenced_message_id=ref.message_id,
                error=repr(exc),
            )
            return False
        fetched_author = getattr(fetched, "author", None)
        if fetched_author is None or fetched_author.id != my_id:
            return False
        self._sent_ids.add(fetched.id)
        return True

    @staticmethod
    def _text_of(message: discord.Message, my_id: int, my_role_id: int | None) -> str:
        """The message's own text (in a guild without the mention that addressed Bruce), then
        the text of what it forwards, each forwarded part marked."""
        own = message.content
        if message.guild is not None:
            own = _without_my_mentions(own, my_id, my_role_id)
        parts = [own.strip()]
        for snapshot in message.message_snapshots:
            forwarded = _snapshot_text(snapshot, my_id, my_role_id)
            if forwarded:
                parts.append(f"{FORWARDED_MARK} {forwarded}")
        return "\n".join(part for part in parts if part)

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

    async def _run_command(
        self, inbox: InboxPort, command: str, chat_id: str, in_guild: bool
    ) -> str:
        log.info("discord_command", command=command, chat_id=chat_id)
        if command == "new":
            return await inbox.new_conversation(DISCORD_CHANNEL, chat_id)
        if command == "reminders":
            return await inbox.describe_reminders(DISCORD_CHANNEL, chat_id)
        return SERVER_HELP_TEXT if in_guild else HELP_TEXT

    async def _say(
        self, channel: Any, text: str, reference: discord.MessageReference | None = None
    ) -> None:
        """A direct answer from the adapter itself (not stored); failures are only logged."""
        try:
            sent = await channel.send(text, reference=reference)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord_reply_failed", chat_id=channel.id, error=repr(exc))
            return
        self._sent_ids.add(sent.id)

    # ---- delivery -----------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        try:
            channel_id = int(message.chat_id)
        except ValueError:
            raise DeliveryError(
                f"{message.chat_id!r} is not a Discord channel id", permanent=True
            ) from None
        client = self._usable_client()
        view = _choice_view(message.choices)
        try:
            channel = await self._channel(client, channel_id)
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
        self._sent_ids.add(sent.id)

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
