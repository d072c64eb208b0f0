"""The Discord channel: a discord.py client that turns DMs and mentions into inbox messages.

This module and its discord_*.py helpers are the only ones that import `discord`. A supervised
background task runs the client (discord_gateway.py builds it); `start` waits a bounded time for
the gateway session, so an unreachable Discord never blocks Bruce (discord.py resumes dropped
sessions itself; the supervisor retries what discord.py gives up on, such as a failed login over
the network). Fatal set-up problems — a bad token, the Message Content intent switched off — are
logged once in words that say what to fix, and the channel stays off.

A message the database cannot take right now (a full disk, the server away: a fault that passes,
see channels/held.py) is kept in memory, in arrival order, and taken in as soon as storage works
again (Discord never sends a message twice); at stop, those still waiting get "I'm restarting".

Bruce answers direct messages, and guild messages (threads included) addressed to it: a mention
of Bruce or of its role, or a reply to one of its messages (discord_messages.py). Each channel
or thread is one session. The allowlist is checked right after that: a stranger gets their
pairing code (or, with `pairing: false`, one polite refusal per hour naming their user id), and
nothing of theirs is stored or shown to an LLM.
`/new`, `/reminders` and `/help` (or `!new`, ...) are answered without the LLM. Who may talk, the
refusals and the commands are the channel policy's (policy.py).

What Discord really sends is handled too. A forwarded message's text is stored fenced as
someone else's words, marked in the message's `extra` (channels/forwards.py). A
message with nothing to read (poll, sticker, voice message, bare attachment) gets one short
notice; system messages (joins, pins, "thread created") and edits are ignored; messages from
bots, webhooks and applications too.

Buttons: a message with `choices` carries them as one action row of buttons
(discord_buttons.py). The policy decides what a press gets (the presser must be on the
allowlist, a stranger gets an ephemeral "not allowed"; the data goes to `inbox.choose` for the
channel); the interaction is answered by updating the message without its buttons, and the
outcome is posted as a reply to it. A press Bruce does not know any more gets an ephemeral
"This button is no longer active."
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping

import aiohttp
import discord
import structlog

from bruce_bot.channels.base import AttachmentUnavailableError, InboxPort
from bruce_bot.channels.connecting import wait_connected
from bruce_bot.channels.discord.buttons import answer_privately, take_buttons_off
from bruce_bot.channels.discord.files import attachments_of, fetch
from bruce_bot.channels.discord.gateway import FATAL_CLOSE_CODES, new_client, point_library_at
from bruce_bot.channels.discord.live import EDIT_INTERVAL_SECONDS, DiscordLive
from bruce_bot.channels.discord.messages import (
    ANSWERED_TYPES,
    BotIds,
    addresses_bot,
    carries_something,
    forwards_of,
    text_of,
)
from bruce_bot.channels.discord.sending import DiscordSender
from bruce_bot.channels.discord.texts import (
    COMMANDS,
    EMPTY_MENTION_REPLY,
    INTENT_FIX,
    NOT_STORED_REPLY,
    ONLY_TEXT_REPLY,
    TEXTS,
    TOKEN_FIX,
)
from bruce_bot.channels.forwards import metadata_of
from bruce_bot.channels.held import Held, HeldMessages, unavailable
from bruce_bot.channels.policy import (
    BUTTON_INACTIVE,
    RESTARTING,
    AllowlistPort,
    ChannelPolicy,
    CommandCall,
    PairingPort,
    Press,
)
from bruce_bot.channels.recent import Recent
from bruce_bot.config import DiscordConfig
from bruce_bot.domain import (
    Attachment,
    InboundMessage,
    OutboundMessage,
    Submission,
)

log = structlog.get_logger(__name__)

DISCORD_CHANNEL = "discord"
MAX_MESSAGE_CHARS = 2000  # Discord refuses longer messages (400, code 50035)
READY_TIMEOUT_SECONDS = 10.0
FIRST_RESTART_DELAY_SECONDS = 1.0
MAX_RESTART_DELAY_SECONDS = 60.0


class DiscordChannel:
    name = DISCORD_CHANNEL
    max_message_chars = MAX_MESSAGE_CHARS
    sends_files = True  # the outbox sends a reply's artifacts as attachments (see outbox.py)

    def __init__(
        self,
        config: DiscordConfig,
        *,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._policy = ChannelPolicy(
            DISCORD_CHANNEL, config.allowed_user_ids, COMMANDS, TEXTS, clock=clock
        )
        self._ready_timeout = ready_timeout
        self._inbox: InboxPort | None = None
        self._out = DiscordSender()
        self.live_interval = EDIT_INTERVAL_SECONDS  # between two edits of a live reply
        self._runner: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._stopping = asyncio.Event()
        self._handled_ids: Recent[int] = Recent()  # messages answered (Discord may send twice)
        self._session_started = False  # the current client reached a gateway session
        # Messages the database could not take yet (a full disk, the server away): Discord
        # never sends a message again, so they wait here, in order, until they can be stored.
        self._held: HeldMessages[discord.abc.Messageable] = HeldMessages(
            DISCORD_CHANNEL, self._held_failed
        )
        self.gave_up: str | None = None  # why the channel stopped for good, if it did

    def use_pairing(self, pairing: PairingPort) -> None:
        """Strangers get a pairing code; the people the owner approves are heard."""
        self._policy.pair_with(pairing)

    def use_allowlist(self, allowlist: AllowlistPort) -> None:
        """Who may talk is read from `allowlist` for each message (the dashboard's list)."""
        self._policy.allow_from(allowlist)

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
        self._policy.warn_if_nobody_allowed()
        point_library_at(self._config)
        self._runner = asyncio.create_task(self._run(), name="discord-client")
        await wait_connected(self._runner, self._connected, self._ready_timeout, "discord")

    async def stop(self) -> None:
        """Stop intake: messages arriving from now on are not taken in (their writers are asked
        to send them again). Sending keeps working (turns that are still running reply) until
        `close`."""
        self._stopping.set()
        left = await self._held.drop()
        self._inbox = None
        # Never stored, and Discord will not send them again: their writers are told.
        told: set[int] = set()
        for held in left:
            channel = held.reply_to
            log.warning(
                "discord_held_message_dropped",
                chat_id=held.chat_id,
                platform_message_id=held.platform_message_id,
            )
            if id(channel) not in told:
                told.add(id(channel))
                with contextlib.suppress(Exception):
                    await self._out.say(channel, RESTARTING)

    async def close(self) -> None:
        """Close the connection to Discord and end the client task; `send` fails (transiently)
        from now on."""
        await self.stop()
        client = self._out.client
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
            self._out.use(client)
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
        client = new_client()

        async def on_connect() -> None:
            self._session_started = True
            self._connected.set()
            me = client.user
            log.info("discord_connected", bot=str(me) if me else None, bot_id=me.id if me else None)

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
                message_id = getattr(message, "id", None)
                log.exception("discord_message_failed", message_id=message_id, error=repr(exc))

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
        me = client.user
        if me is None or not self._from_a_person(me, message):
            return
        bot = BotIds.of(me, message)
        if message.guild is not None and not await addresses_bot(
            client, message, bot, self._out.sent
        ):
            return
        if message.id in self._handled_ids:
            log.info("discord_message_repeated", message_id=message.id)
            return
        self._handled_ids.add(message.id)
        if self._held.holding:  # earlier messages wait for storage: this one goes after them
            await self._hold(client, message)
            return
        try:
            await self._take_in(client, message)
        except Exception as exc:
            if unavailable(exc) is None:
                raise
            await self._hold(client, message)

    async def _hold(self, client: discord.Client, message: discord.Message) -> None:
        """Keep the message until storage takes it (Discord never sends it again)."""
        held: Held[discord.abc.Messageable] = Held(
            lambda: self._take_in(client, message),
            message.channel,
            str(message.channel.id),
            str(message.id),
        )
        if not self._held.keep(held):
            await self._out.say(message.channel, NOT_STORED_REPLY)  # too many waiting already

    async def _held_failed(self, held: Held[discord.abc.Messageable]) -> None:
        await self._out.say(held.reply_to, NOT_STORED_REPLY)

    async def _take_in(self, client: discord.Client, message: discord.Message) -> None:
        """Admit and answer, or store, the message; raises a fault that passes while storage
        is down (a read of the allowlist, or the store itself), to be tried again."""
        inbox, channel = self._inbox, message.channel
        bot = BotIds.of(client.user, message) if client.user is not None else None
        if bot is None:
            return
        admission = await self._policy.admit(
            message.author.id,
            chat_id=channel.id,
            user_name=message.author.display_name,  # their choice: shown last, as theirs
            username=message.author.name,  # unique on Discord: shown first
        )
        if admission.refusal is not None:
            await self._out.say(channel, admission.refusal)
        if not admission.allowed:
            return
        self._out.remember(channel)
        if inbox is None:
            # Stopping: not taken in, and Discord never sends a message again; say so.
            await self._out.say(channel, RESTARTING)
            return
        await self._answer(inbox, message, text_of(message, bot))

    def _from_a_person(self, me: discord.ClientUser, message: discord.Message) -> bool:
        """A message someone wrote: not Bruce's own, a bot's, a webhook's or a system notice."""
        author = getattr(message, "author", None)
        if author is None:
            log.debug("discord_message_skipped", reason="no author", message_id=message.id)
            return False
        if author.id == me.id:
            self._out.sent.add(message.id)  # Discord echoes Bruce's own messages
            return False
        if author.bot or message.webhook_id is not None or message.application_id is not None:
            return False  # bots, webhooks, applications' interaction responses
        return message.type in ANSWERED_TYPES  # not joins, pins, thread notices...

    async def _answer(self, inbox: InboxPort, message: discord.Message, text: str) -> None:
        channel, author = message.channel, message.author
        chat_id, in_guild = str(channel.id), message.guild is not None
        command = self._policy.commands.named_by(text)
        if command is not None:
            call = CommandCall(command, chat_id, author.id, author.display_name, in_guild)
            await self._out.say(channel, await self._policy.commands.handle(call, inbox))
            return
        attachments = attachments_of(message)
        if not text and not attachments:
            # In a DM there is no mention to write after: anything without text is non-text.
            bare_mention = in_guild and not carries_something(message)
            log.info("discord_message_without_text", message_id=message.id, chat_id=chat_id)
            await self._out.say(channel, EMPTY_MENTION_REPLY if bare_mention else ONLY_TEXT_REPLY)
            return
        quoted = forwards_of(message)  # whose words it passes on (channels/forwards.py)
        inbound = InboundMessage(
            DISCORD_CHANNEL,
            chat_id,
            text,
            user_id=str(author.id),
            user_name=author.display_name,
            platform_message_id=str(message.id),
            metadata={**({"group": True} if in_guild else {}), **metadata_of(quoted)},
            attachments=attachments,
        )
        try:
            submission = await inbox.submit(inbound)
        except Exception as exc:
            if unavailable(exc) is not None:
                raise  # held and tried again: see `_receive`
            # A bug, not a fault that passes: the user is told.
            log.exception(
                "discord_submit_failed", chat_id=chat_id, message_id=message.id, error=repr(exc)
            )
            await self._out.say(channel, NOT_STORED_REPLY)
            return
        await self._submitted(inbound, channel, submission)

    async def _submitted(
        self, inbound: InboundMessage, channel: discord.abc.Messageable, submission: Submission
    ) -> None:
        chat_id = inbound.chat_id
        if not submission.accepted:
            log.info(
                "discord_message_not_accepted",
                chat_id=chat_id,
                platform_message_id=inbound.platform_message_id,
                reason=submission.reason,
            )
            if submission.reason == "stopping":  # not stored: the user must send it again
                await self._out.say(channel, RESTARTING)

    async def _on_press(self, interaction: discord.Interaction) -> None:
        """A button under one of Bruce's messages was pressed (the policy decides)."""
        channel_id, message, data = interaction.channel_id, interaction.message, interaction.data
        press = Press(
            getattr(interaction.user, "id", None),
            str(channel_id) if channel_id is not None else "",
            message.id if message is not None else None,
            str(data.get("custom_id", "")) if data else "",
        )
        answer = await self._policy.presses.answer(press, self._inbox)
        if answer.reply is None or channel_id is None or message is None:
            await answer_privately(interaction, answer.notice or BUTTON_INACTIVE)
            return
        await take_buttons_off(interaction, message)
        channel = await self._out.channel(interaction.client, channel_id)
        reference = message.to_reference(fail_if_not_exists=False)
        await self._out.say(channel, answer.reply, reference=reference)

    # ---- delivery -----------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        await self._out.send(message)

    def live_reply(self, chat_id: str, metadata: Mapping[str, object]) -> DiscordLive | None:
        """The turn's answer shown while it is written (discord_live.py), unless
        `channels.discord.streaming` is off or Discord is not connected."""
        if not self._config.streaming or not self.connected:
            return None
        try:
            channel_id = int(chat_id)
        except ValueError:
            return None
        return DiscordLive(self._out, channel_id, interval=self.live_interval)

    async def typing(self, chat_id: str) -> None:
        await self._out.typing(chat_id)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """An attachment's bytes from Discord's CDN (discord_files.py)."""
        client = self._out.client
        if client is None:
            raise AttachmentUnavailableError("Discord is not connected right now")
        return await fetch(client, attachment, max_bytes)
