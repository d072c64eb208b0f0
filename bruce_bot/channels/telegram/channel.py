"""The Telegram channel: python-telegram-bot (PTB) on one side, Bruce's inbox on the other.

This module and its telegram_*.py helpers are the only ones that import `telegram`. Updates
arrive by long polling (default) or by webhook (`mode: webhook`, secret header checked by PTB;
telegram_app.py builds and starts the application). Each addressed message (a private chat; in
a group, an @mention, a text_mention or a reply to one of the bot's messages: see
telegram_messages.py) passes the allowlist first, then becomes an `InboundMessage` that the
inbox stores before the update is acknowledged (see telegram_intake.py); the updates of a batch
are handled concurrently, each chat's in order (telegram_app.py). When storage is down (a full
disk, the database away) an update is not acknowledged either: a polled one is tried again until
it is stored, a webhook post is answered 503 so that Telegram posts it again (`_on_update`).
Who may talk, the stranger's pairing code (or, with `pairing: false`, one polite reply an hour
naming their user id), and the commands `/start`, `/help`, `/new` and `/reminders` are the
channel policy's (policy.py); nothing of a stranger's is stored.
Replies go out through telegram_sending.py; failures become `DeliveryError`s, and the outbox is
the one place that retries them.

Telegram as it really arrives: the parts of an album become one message (telegram_albums.py);
a forward or a quote of someone else is stored fenced as their words (telegram_forwards.py);
each forum topic is its own conversation, and everything for it is sent into that topic
(telegram_chats.py names the sessions); service messages and channel posts copied into a
discussion group are passed over in silence; a group upgraded to a supergroup is followed to
its new id, whether Telegram announces it or a send fails with ChatMigrated (the answer is
re-sent there at once); an update PTB cannot parse gets a short notice when an allowed person
sent it (telegram_raw.py).

Buttons: a message with `choices` carries them as an inline keyboard under its last piece
(telegram_buttons.py). A press arrives as a callback query; the policy decides what it gets
(the presser must be on the allowlist; the data goes to `inbox.choose` for the conversation the
message is in, its topic too); the query is answered (the client stops spinning), the buttons
are taken off the message and the outcome is sent as a reply to it. A press Bruce does not know
any more is answered "This button is no longer active."
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from telegram import BotCommand, CallbackQuery, Message, Update
from telegram.error import BadRequest, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import Application, ContextTypes, TypeHandler

from bruce_bot.channels.base import AttachmentUnavailableError, InboxPort
from bruce_bot.channels.forwards import Quoted
from bruce_bot.channels.held import unavailable, until_stored
from bruce_bot.channels.policy import AllowlistPort, ChannelPolicy, PairingPort, Press
from bruce_bot.channels.telegram.albums import AlbumBook
from bruce_bot.channels.telegram.app import (
    UpdateCheckingRequest,
    build_application,
    chat_key,
    release_connections,
    start_updates,
    tls_options,
    webhook_refusal,
)
from bruce_bot.channels.telegram.chats import ChatAddress
from bruce_bot.channels.telegram.files import fetch
from bruce_bot.channels.telegram.intake import DurableUpdateQueue
from bruce_bot.channels.telegram.live import EDIT_INTERVAL_SECONDS, TelegramLive
from bruce_bot.channels.telegram.messages import (
    SUPPORTED_CHATS,
    Heard,
    address_of,
    album_part,
    has_content,
    hear,
    migration_of,
)
from bruce_bot.channels.telegram.raw import UnreadableMessage, UnreadableUpdates
from bruce_bot.channels.telegram.sending import TelegramSender
from bruce_bot.channels.telegram.texts import (
    ANONYMOUS_REPLY,
    COMMANDS,
    NOT_SAVED,
    ONLY_TEXT,
    RESTARTING,
    TEXTS,
    UNREADABLE,
)
from bruce_bot.config import TelegramConfig
from bruce_bot.domain import (
    Attachment,
    InboundMessage,
    OutboundMessage,
    StorageUnavailableError,
    Submission,
)

log = structlog.get_logger(__name__)

TELEGRAM_CHANNEL = "telegram"
# The outbox splits at this many characters; the HTML of a part may grow (escaping, tags) and
# emoji count twice in Telegram's UTF-16 limit, so `send` re-splits any part that still does not
# fit 4096. This margin makes that rare.
MAX_MESSAGE_CHARS = 3800
RECONNECT_FIRST_DELAY_SECONDS = 1.0
RECONNECT_MAX_DELAY_SECONDS = 60.0


class TelegramChannel:
    name = TELEGRAM_CHANNEL
    max_message_chars = MAX_MESSAGE_CHARS
    sends_files = True  # the outbox sends a reply's artifacts as documents (see outbox.py)

    def __init__(
        self, config: TelegramConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        # `pairing` (channels.telegram.pairing) is read by parts.py, which calls `use_pairing`.
        self._config = config
        self._policy = ChannelPolicy(
            TELEGRAM_CHANNEL, config.allowed_user_ids, COMMANDS, TEXTS, clock=clock
        )
        self._app: Application | None = None
        self._inbox: InboxPort | None = None
        self._bot_id = 0
        self._bot_username = ""
        self._port: InboxPort | None = None  # for chat migrations, which sends follow too
        self._out = TelegramSender(config.token, self._follow_migration)
        self.live_interval = EDIT_INTERVAL_SECONDS  # between two changes of a live reply
        self._albums = AlbumBook()
        self._unreadable = UnreadableUpdates()
        self._updates_request: UpdateCheckingRequest | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._menu: asyncio.Task[None] | None = None
        self._queue: DurableUpdateQueue | None = None
        self._stopping = asyncio.Event()  # ends the retries of messages storage did not take

    def use_pairing(self, pairing: PairingPort) -> None:
        """Strangers get a pairing code; the people the owner approves are heard."""
        self._policy.pair_with(pairing)

    def use_allowlist(self, allowlist: AllowlistPort) -> None:
        """Who may talk is read from `allowlist` for each message (the dashboard's list)."""
        self._policy.allow_from(allowlist)

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self, inbox: InboxPort) -> None:
        """Connect and start receiving. A wrong token or setting stops start-up with a message
        that names the key; an unreachable Bot API does not: Bruce starts without Telegram and
        keeps trying in the background (replies meanwhile wait in the outbox)."""
        self._policy.warn_if_nobody_allowed()
        queue = DurableUpdateQueue(chat_key, self._saw_update, webhook_refusal)
        self._queue = queue
        self._stopping.clear()
        http_options = tls_options()
        self._updates_request = UpdateCheckingRequest(
            self._saw_raw, queue, connection_pool_size=1, httpx_kwargs=http_options
        )
        app = build_application(self._config, self._updates_request, queue, http_options)
        app.add_handler(TypeHandler(Update, self._on_update))
        app.add_error_handler(self._on_error)
        self._app = app
        self._inbox = self._port = inbox
        try:
            await self._connect(app)
        except (NetworkError, RetryAfter) as exc:
            if isinstance(exc, BadRequest):
                await self._abort(app)
                raise RuntimeError(
                    f"Telegram refused Bruce's start-up request: {self._scrub(exc)}. Check "
                    "the channels.telegram settings in config.yml."
                ) from None
            log.warning(
                "telegram_unreachable",
                error=self._scrub(exc),
                retry_in_seconds=RECONNECT_FIRST_DELAY_SECONDS,
            )
            self._connecting = asyncio.create_task(
                self._keep_connecting(app), name="telegram-connect"
            )
        except InvalidToken:
            await self._abort(app)
            raise RuntimeError(
                "Telegram refused the bot token (channels.telegram.token). Copy it again from "
                "@BotFather, or set TELEGRAM_BOT_TOKEN, and restart Bruce."
            ) from None
        except BaseException:
            await self._abort(app)
            raise

    async def _connect(self, app: Application) -> None:
        """Every step of start-up, each skipped when already done, so it can be retried."""
        await app.initialize()  # getMe: checks the token; idempotent
        self._bot_id = app.bot.id
        self._bot_username = app.bot.username
        self._out.bot = app.bot
        if not app.running:
            await app.start()
        await start_updates(app, self._config, self._on_polling_error)
        if self._menu is None:  # a convenience: registered meanwhile, not waited for
            self._menu = asyncio.create_task(self._register_commands(app), name="telegram-menu")
        log.info(
            "telegram_started",
            mode=self._config.mode,
            bot_username=self._bot_username,
            allowed_users=self._policy.allowed_users,
        )

    async def _register_commands(self, app: Application) -> None:
        menu = [BotCommand(c.name, c.description) for c in self._policy.commands.menu]
        try:
            await app.bot.set_my_commands(menu)
        except TelegramError as exc:  # the menu is a convenience: not worth failing over
            log.warning("telegram_commands_not_registered", error=self._scrub(exc))

    async def _keep_connecting(self, app: Application) -> None:
        delay = RECONNECT_FIRST_DELAY_SECONDS
        while True:
            await asyncio.sleep(delay)
            try:
                await self._connect(app)
                return
            except InvalidToken:
                log.error("telegram_token_refused", hint="check channels.telegram.token")
                return
            except BadRequest as exc:
                log.error("telegram_start_refused", error=self._scrub(exc))
                return
            except (NetworkError, RetryAfter) as exc:
                delay = min(delay * 2, RECONNECT_MAX_DELAY_SECONDS)
                log.warning("telegram_unreachable", error=self._scrub(exc), retry_in_seconds=delay)
            except Exception:
                log.exception("telegram_start_failed")
                return

    async def _abort(self, app: Application) -> None:
        """Undo a start-up that cannot succeed."""
        await self.stop()
        await self.close()
        await release_connections(app, self._updates_request)

    async def stop(self) -> None:
        """Stop intake: no more updates are fetched, the ones fetched are handled. Sending keeps
        working (running turns still reply) until `close`."""
        for task in (self._connecting, self._menu):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._connecting = None
        # Handlers still trying to store a message give up (it stays unconfirmed), so that the
        # updater's last getUpdates, which waits for them, can go.
        self._stopping.set()
        app = self._app
        if app is not None:
            if app.updater is not None and app.updater.running:
                await app.updater.stop()  # ends polling (confirming what was handled) or webhook
            if app.running:
                await app.stop()  # stores the updates already fetched, then stops dispatching
        self._inbox = None

    async def close(self) -> None:
        """Release the HTTP connections; `send` fails (transiently) from now on."""
        app, self._app = self._app, None
        self._out.bot = None
        self._port = None
        if app is not None:
            await app.shutdown()

    # ---- receiving ---------------------------------------------------------------------------

    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Handle the update, unless storage is down (a full disk, the database away): then it
        is not acknowledged. Long polling: tried again (0.25 s, doubling up to 5 s) until it
        goes through, holding this chat's later updates and the next getUpdates (whose offset
        would confirm it) meanwhile, so that once storage is back everything is stored in
        order, once. A webhook post is answered 503 at once; Telegram posts it again later."""
        queue = self._queue
        if queue is not None and queue.unconfirmable:
            return  # stopping, an earlier update was left: this one comes again after it
        if self._config.mode == "webhook":
            try:
                await self._handle(update)
            except Exception as exc:
                if (reason := unavailable(exc)) is None:
                    raise
                self._not_stored(update, reason)
            return
        if await until_stored(lambda: self._handle(update), self._stopping) is None:
            self._not_stored(update, "Bruce is stopping")

    def _not_stored(self, update: Update, reason: str) -> None:
        log.info("telegram_update_not_stored", update_id=update.update_id, reason=reason)
        if self._queue is not None:
            self._queue.not_stored(update)

    async def _handle(self, update: Update) -> None:
        message = update.message
        if update.callback_query is not None:
            await self._on_press(update.callback_query)
        elif message is None:
            unreadable = self._unreadable.pop(update.update_id)
            if unreadable is not None:
                await self._tell_unreadable(unreadable)
            elif update.edited_message is not None:
                # An edit is not a new message; answering it again would confuse the chat.
                log.debug("telegram_edit_ignored", update_id=update.update_id)
        elif message.chat.type not in SUPPORTED_CHATS:
            return
        elif (moved := migration_of(message)) is not None:
            await self._follow_migration(*moved)
        else:
            names = self._policy.commands.names
            heard = hear(update, message, self._bot_username, self._bot_id, names)
            if heard is not None and await self._admitted(heard):
                await self._answer(heard)

    async def _admitted(self, heard: Heard) -> bool:
        """Who speaks comes before anything else: a stranger's words are never stored."""
        message, chat_id = heard.message, heard.message.chat.id
        if message.sender_chat is not None:  # an anonymous admin, or someone posting as a channel
            admission = self._policy.refuse(
                message.sender_chat.id, ANONYMOUS_REPLY, chat_id=chat_id
            )
        else:
            admission = await self._policy.admit(
                heard.user.id,
                chat_id=str(heard.address),
                user_name=heard.user.full_name,  # their choice: shown last, as theirs
                username=heard.user.username or "",  # unique on Telegram: shown first
            )
        if admission.refusal is not None:
            await self._out.reply(message, admission.refusal)
        return admission.allowed

    async def _answer(self, heard: Heard) -> None:
        message, call = heard.message, heard.command_call(self._bot_username)
        if call is not None:
            await self._out.reply(message, await self._policy.commands.handle(call, self._inbox))
            return
        if message.media_group_id:
            turn = self._albums.take(album_part(message, self._bot_username, self._bot_id))
            if turn.action == "notice":
                await self._out.reply(message, ONLY_TEXT)
            elif turn.action == "submit":
                await self._submit(heard, turn.text, turn.attachments, turn.quoted)
            return
        text = heard.text(self._bot_username, self._bot_id)
        attachments = heard.attachments()
        if text is not None or attachments:
            await self._submit(heard, text or "", attachments, heard.quoted)
        elif has_content(message):  # a sticker, a video, a location...
            await self._out.reply(message, ONLY_TEXT)

    def _saw_raw(self, item: Any, parsed: Update | None) -> None:
        """Every update of a getUpdates batch, before any of it is handled."""
        if parsed is None:
            self._unreadable.note(item)
        else:
            self._saw_update(parsed)

    def _saw_update(self, update: Any) -> None:
        """An update queued (webhook posts wait their turn here) or fetched in a batch."""
        if not isinstance(update, Update):
            return
        message = update.message
        if message is not None and message.media_group_id:
            self._albums.expect(album_part(message, self._bot_username, self._bot_id))

    async def _submit(
        self,
        heard: Heard,
        text: str,
        attachments: tuple[Attachment, ...] = (),
        quoted: Sequence[Quoted] = (),
    ) -> None:
        message, chat_id = heard.message, str(heard.address)
        inbox = self._inbox
        if inbox is None:
            await self._out.reply(message, RESTARTING)
            return
        inbound = heard.inbound(TELEGRAM_CHANNEL, text, attachments, quoted)
        try:
            submission = await self._store(inbox, inbound)
        except Exception as exc:
            if unavailable(exc) is not None:
                raise  # not stored, not acknowledged: see `_on_update`
            # A bug, not a fault that passes: the user is told.
            log.exception("telegram_submit_failed", chat_id=chat_id, message_id=message.message_id)
            await self._out.reply(message, NOT_SAVED)
            return
        if not submission.accepted:
            log.info(
                "telegram_message_not_accepted",
                chat_id=chat_id,
                message_id=message.message_id,
                reason=submission.reason,
            )
            if submission.reason == "stopping":
                await self._out.reply(message, RESTARTING)

    async def _store(self, inbox: InboxPort, inbound: InboundMessage) -> Submission:
        """The message stored; raises StorageUnavailableError while storage is down. Polling
        tries again here (see `_on_update`), not from the top of the update: an album's last
        part must not be taken into the album twice."""
        if self._config.mode == "webhook":
            return await inbox.submit(inbound)
        stored = await until_stored(lambda: inbox.submit(inbound), self._stopping)
        if stored is None:
            raise StorageUnavailableError("Bruce is stopping")
        return stored[0]

    async def _on_press(self, query: CallbackQuery) -> None:
        """A button under one of Bruce's messages was pressed (the policy decides)."""
        message = query.message
        accessible = isinstance(message, Message) and message.is_accessible
        address: ChatAddress | None = None
        if isinstance(message, Message) and accessible:
            address = address_of(message)
        elif message is not None:  # deleted, or too old to be shown (date 0): no topic known
            address = ChatAddress(message.chat.id)
        press = Press(
            query.from_user.id,
            str(address) if address is not None else "",
            message.message_id if message is not None else None,
            query.data,
        )
        answer = await self._policy.presses.answer(press, self._inbox)
        await self._out.answer_press(query, answer.notice)
        if answer.reply is None or address is None or message is None:
            return
        if accessible:
            await self._out.remove_buttons(address, message.message_id)
        await self._out.say(address, answer.reply, message.message_id)

    async def _tell_unreadable(self, unreadable: UnreadableMessage) -> None:
        """The notice for an update PTB could not parse, for an allowed sender only."""
        chat_id = str(unreadable.address)
        if not await self._policy.allows(unreadable.sender_id) or not unreadable.addressed_to(
            self._bot_username, self._bot_id
        ):
            log.info("telegram_unreadable_not_answered", chat_id=chat_id)
            return
        log.info("telegram_unreadable_answered", chat_id=chat_id)
        await self._out.say(unreadable.address, UNREADABLE, None)

    async def _follow_migration(self, old_chat_id: int, new_chat_id: int) -> None:
        """The group became a supergroup with a new id: its conversation follows it."""
        log.info("telegram_chat_migrated", old_chat_id=old_chat_id, new_chat_id=new_chat_id)
        port = self._port
        if port is None:
            return
        try:
            await port.migrate_chat(TELEGRAM_CHANNEL, str(old_chat_id), str(new_chat_id))
        except Exception:
            log.exception(
                "telegram_migration_failed", old_chat_id=old_chat_id, new_chat_id=new_chat_id
            )

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        error = context.error
        log.error(
            "telegram_update_failed",
            update_id=getattr(update, "update_id", None),
            error=self._out.scrub(repr(error)),
            exc_info=error,
        )

    def _on_polling_error(self, exc: TelegramError) -> None:
        # Called by PTB's retry loop, which keeps polling with a growing pause (up to 30 s).
        log.warning("telegram_polling_failed", error=self._scrub(exc))

    def _scrub(self, exc: Exception) -> str:
        return self._out.scrub(str(exc))

    # ---- sending -----------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        await self._out.send(message)

    def live_reply(self, chat_id: str, metadata: Mapping[str, object]) -> TelegramLive | None:
        """The turn's answer shown while it is written (telegram_live.py), unless
        `channels.telegram.streaming` is off or the bot is not running."""
        if not self._config.streaming or self._out.bot is None:
            return None
        try:
            address = ChatAddress.parse(chat_id)
        except ValueError:
            return None
        reply_to = metadata.get("reply_to")
        return TelegramLive(
            self._out,
            address,
            reply_to=reply_to if isinstance(reply_to, int) else None,
            interval=self.live_interval,
        )

    async def typing(self, chat_id: str) -> None:
        await self._out.typing(chat_id)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A photo's, voice note's or document's bytes (telegram_files.py)."""
        bot = self._out.bot
        if bot is None:
            raise AttachmentUnavailableError("Telegram is not connected right now")
        return await fetch(bot, attachment, max_bytes)
