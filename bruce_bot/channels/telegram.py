"""The Telegram channel: python-telegram-bot (PTB) on one side, Bruce's inbox on the other.

The only module that imports `telegram`. Updates arrive by long polling (default) or by webhook
(`mode: webhook`, secret header checked by PTB). Each addressed message (a private chat; in a
group, an @mention, a text_mention or a reply to one of the bot's messages) passes the allowlist
first, then becomes an `InboundMessage` that the inbox stores before the update is acknowledged
(see telegram_intake.py). A stranger gets one polite reply an hour naming their user id;
nothing of theirs is stored. `/start`, `/help`, `/new` and `/reminders` are answered here. Replies
go out as Telegram HTML (telegram_markup.py) with a plain-text re-send when Telegram refuses the
markup; failures become `DeliveryError`s, and the outbox is the one place that retries them.

Telegram as it really arrives: the parts of an album become one message (telegram_albums.py);
each forum topic is its own conversation, and everything for it is sent into that topic
(telegram_chats.py names the sessions); service messages (members, titles, pins, topics, video
chats...) and channel posts copied into a discussion group are passed over in silence; a group
upgraded to a supergroup is followed to its new id, whether Telegram announces it or a send
fails with ChatMigrated (the answer is re-sent there at once); an update PTB cannot parse gets
a short notice when an allowed person sent it (telegram_raw.py).

Buttons: a message with `choices` carries them as an inline keyboard under its last piece
(telegram_buttons.py). A press arrives as a callback query; the presser must be on the
allowlist, the data goes to `inbox.choose` for the conversation the message is in (its topic
too), the query is answered (the client stops spinning), the buttons are taken off the message
and the outcome is sent as a reply to it. A press Bruce does not know any more is answered
"This button is no longer active."
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import structlog
from telegram import (
    Bot,
    BotCommand,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    Update,
    User,
)
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler, filters
from telegram.request import HTTPXRequest

from bruce_bot.channels.base import DeliveryError, InboxPort
from bruce_bot.channels.telegram_albums import AlbumBook, AlbumPart
from bruce_bot.channels.telegram_buttons import Press, Presses, button_row
from bruce_bot.channels.telegram_chats import ChatAddress
from bruce_bot.channels.telegram_entities import (
    command_of,
    mentions_of_bot,
    without_bot_mentions,
)
from bruce_bot.channels.telegram_intake import ProcessedUpdateQueue
from bruce_bot.channels.telegram_markup import (
    TELEGRAM_TEXT_LIMIT,
    DeliveredPieces,
    Piece,
    fit_plain,
    render_pieces,
)
from bruce_bot.channels.telegram_raw import UnreadableMessage, UnreadableUpdates, chat_id_of
from bruce_bot.channels.telegram_refusals import RefusalLog
from bruce_bot.channels.telegram_texts import (
    ANONYMOUS_REPLY,
    COMMAND_FAILED,
    COMMANDS,
    GREETING,
    HELP,
    NOT_SAVED,
    ONLY_TEXT,
    RESTARTING,
    STRANGER_REPLY,
    UNREADABLE,
)
from bruce_bot.config import TelegramConfig
from bruce_bot.domain import Choice, InboundMessage, OutboundMessage

log = structlog.get_logger(__name__)

TELEGRAM_CHANNEL = "telegram"
# The outbox splits at this many characters; the HTML of a part may grow (escaping, tags) and
# emoji count twice in Telegram's UTF-16 limit, so `send` re-splits any part that still does not
# fit 4096. This margin makes that rare.
MAX_MESSAGE_CHARS = 3800
POLL_TIMEOUT = timedelta(seconds=25)
BOOTSTRAP_RETRIES = 3
RECONNECT_FIRST_DELAY_SECONDS = 1.0
RECONNECT_MAX_DELAY_SECONDS = 60.0
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
_SUPPORTED_CHATS = (ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP)
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
_ALBUM_KINDS = (
    ("photo", "photo"),
    ("video", "video"),
    ("document", "file"),
    ("audio", "audio file"),
)

_COMMAND_NAMES = frozenset(name for name, _ in COMMANDS)


class _UpdateCheckingRequest(HTTPXRequest):
    """The getUpdates connection, with a guard against updates PTB cannot parse.

    PTB parses a whole batch at once; one malformed update makes it log the failure and fetch
    the same batch again, forever, so nobody would be answered any more. Here each update of a
    batch is parsed on its own first, and one that fails is replaced by an empty update with the
    same id, so the offset moves past it and the rest are handled. `seen` is told of every
    update of the batch (the parsed one, or None for one that could not be parsed) before any
    of them is handled.
    """

    def __init__(self, seen: Callable[[Any, Update | None], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._seen = seen

    async def post(self, url: str, *args: Any, **kwargs: Any) -> Any:
        result = await super().post(url, *args, **kwargs)
        if not (url.endswith("/getUpdates") and isinstance(result, list)):
            return result
        checked: list[dict[str, Any]] = []
        for item in result:
            raw, parsed = _checked_update(item)
            if raw is not None:
                checked.append(raw)
                _tell(self._seen, item, parsed)
        return checked


def _checked_update(item: Any) -> tuple[dict[str, Any] | None, Update | None]:
    """(the update to hand to PTB or None to drop it, the parsed update or None)."""
    update_id = item.get("update_id") if isinstance(item, dict) else None
    if not isinstance(update_id, int) or isinstance(update_id, bool):
        log.warning("telegram_update_unreadable", reason="no update_id")
        return None, None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PTB's deprecation notes are not parse errors
            parsed = Update.de_json(item, None)
    except Exception as exc:
        log.warning(
            "telegram_update_malformed",
            update_id=update_id,
            chat_id=chat_id_of(item),
            error=repr(exc),
        )
        return {"update_id": update_id}, None
    return item, parsed  # type: ignore[return-value]


def _tell(listener: Callable[..., None], *args: Any) -> None:
    """Intake bookkeeping must never stop intake."""
    try:
        listener(*args)
    except Exception:
        log.exception("telegram_intake_note_failed")


class TelegramChannel:
    name = TELEGRAM_CHANNEL
    max_message_chars = MAX_MESSAGE_CHARS

    def __init__(
        self, config: TelegramConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._config = config
        self._allowed = frozenset(config.allowed_user_ids)
        self._app: Application | None = None  # type: ignore[type-arg]
        self._inbox: InboxPort | None = None
        self._can_send = False
        self._bot_id = 0
        self._bot_username = ""
        self._port: InboxPort | None = None  # for chat migrations, which sends follow too
        self._refusals = RefusalLog(clock)
        self._albums = AlbumBook()
        self._unreadable = UnreadableUpdates()
        self._delivered = DeliveredPieces()
        self._presses = Presses(TELEGRAM_CHANNEL, self._allowed)
        self._updates_request: _UpdateCheckingRequest | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._commands_registered = False

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self, inbox: InboxPort) -> None:
        """Connect and start receiving. A wrong token or setting stops start-up with a message
        that names the key; an unreachable Bot API does not: Bruce starts without Telegram and
        keeps trying in the background (replies meanwhile wait in the outbox)."""
        if not self._allowed:
            log.warning(
                "telegram_allowlist_empty",
                hint="nobody can talk to Bruce on Telegram: add user ids to "
                "channels.telegram.allowed_user_ids in config.yml",
            )
        app = self._build_application()
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
                    f"Telegram refused Bruce's start-up request: {self._scrub(str(exc))}. Check "
                    "the channels.telegram settings in config.yml."
                ) from None
            log.warning(
                "telegram_unreachable",
                error=self._scrub(str(exc)),
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

    async def _connect(self, app: Application) -> None:  # type: ignore[type-arg]
        """Every step of start-up, each skipped when already done, so it can be retried."""
        await app.initialize()  # getMe: checks the token; idempotent
        self._bot_id = app.bot.id
        self._bot_username = app.bot.username
        self._can_send = True
        if not self._commands_registered:
            try:
                await app.bot.set_my_commands([BotCommand(n, text) for n, text in COMMANDS])
            except BadRequest as exc:  # the menu is a convenience: not worth failing over
                log.warning("telegram_commands_not_registered", error=self._scrub(str(exc)))
            self._commands_registered = True
        if not app.running:
            await app.start()
        assert app.updater is not None
        if not app.updater.running:
            if self._config.mode == "webhook":
                await self._start_webhook(app)
            else:
                await app.updater.start_polling(
                    timeout=POLL_TIMEOUT,
                    bootstrap_retries=BOOTSTRAP_RETRIES,
                    allowed_updates=list(ALLOWED_UPDATES),
                    drop_pending_updates=False,
                    error_callback=self._on_polling_error,
                )
        log.info(
            "telegram_started",
            mode=self._config.mode,
            bot_username=self._bot_username,
            allowed_users=len(self._allowed),
        )

    async def _keep_connecting(self, app: Application) -> None:  # type: ignore[type-arg]
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
                log.error("telegram_start_refused", error=self._scrub(str(exc)))
                return
            except (NetworkError, RetryAfter) as exc:
                delay = min(delay * 2, RECONNECT_MAX_DELAY_SECONDS)
                log.warning(
                    "telegram_unreachable", error=self._scrub(str(exc)), retry_in_seconds=delay
                )
            except Exception:
                log.exception("telegram_start_failed")
                return

    async def _abort(self, app: Application) -> None:  # type: ignore[type-arg]
        """Undo a start-up that cannot succeed."""
        await self.stop()
        await self.close()
        await _release_connections(app, self._updates_request)

    async def stop(self) -> None:
        """Stop intake: no more updates are fetched, the ones fetched are handled. Sending keeps
        working (running turns still reply) until `close`."""
        connecting, self._connecting = self._connecting, None
        if connecting is not None:
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connecting
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
        self._can_send = False
        self._port = None
        if app is not None:
            await app.shutdown()

    def _build_application(self) -> Application:  # type: ignore[type-arg]
        config = self._config
        updates_request = _UpdateCheckingRequest(self._saw_raw, connection_pool_size=1)
        self._updates_request = updates_request
        builder = (
            ApplicationBuilder()
            .token(config.token)
            .concurrent_updates(False)  # one update at a time, in order: see telegram_intake.py
            .update_queue(ProcessedUpdateQueue(self._saw_update))
            .get_updates_request(updates_request)
            .job_queue(None)
            # No AIORateLimiter: its RetryAfter retries would stack on the outbox's, and its
            # per-group pacing would hold replies behind typing indicators. A 429 becomes a
            # DeliveryError with retry_after, and the outbox (the one retry owner) waits it out.
        )
        if config.base_url:
            base_url = config.base_url.rstrip("/")
            builder = builder.base_url(base_url).base_file_url(_file_url(base_url))
        return builder.build()

    async def _start_webhook(self, app: Application) -> None:  # type: ignore[type-arg]
        webhook = self._config.webhook
        secret = _webhook_secret(self._config)
        assert app.updater is not None
        await app.updater.start_webhook(
            listen=webhook.listen,
            port=webhook.port,
            url_path=urlsplit(webhook.url).path.strip("/"),
            webhook_url=webhook.url,
            secret_token=secret,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=False,
            bootstrap_retries=BOOTSTRAP_RETRIES,
        )
        log.info("telegram_webhook_listening", listen=webhook.listen, port=webhook.port)

    # ---- receiving ---------------------------------------------------------------------------

    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if update.callback_query is not None:
            await self._on_press(update.callback_query)
            return
        message = update.message
        if message is None:
            unreadable = self._unreadable.pop(update.update_id)
            if unreadable is not None:
                await self._tell_unreadable(unreadable)
            elif update.edited_message is not None:
                # An edit is not a new message; answering it again would confuse the chat.
                log.debug("telegram_edit_ignored", update_id=update.update_id)
            return
        chat = message.chat
        if chat.type not in _SUPPORTED_CHATS:
            return
        moved = _migration_of(message)
        if moved is not None:
            await self._follow_migration(*moved)
            return
        if _is_service(update) or message.is_automatic_forward:
            # Service messages (members, title, pins, topics, video chats...) and channel posts
            # copied into their discussion group: nobody is speaking to Bruce.
            return
        user = message.from_user
        if user is None or (user.is_bot and message.sender_chat is None):
            return
        address = _address_of(message)
        in_group = chat.type != ChatType.PRIVATE
        body = message.text if message.text is not None else message.caption
        entities = message.entities if message.text is not None else message.caption_entities
        command, command_target = command_of(body, entities, _COMMAND_NAMES)
        for_me = command_target.lower() == self._bot_username.lower()
        if command_target and not for_me:
            command = None  # "/new@other_bot" is another bot's business
        addressed = (
            not in_group
            or for_me
            or command is not None
            or bool(mentions_of_bot(body, entities, self._bot_username, self._bot_id))
            or _replies_to(message, self._bot_id)
        )
        if not addressed:
            return
        # Who speaks comes before anything else: a stranger's words are never stored.
        if message.sender_chat is not None:  # an anonymous admin, or someone posting as a channel
            await self._refuse(message, message.sender_chat.id, ANONYMOUS_REPLY)
            return
        if user.id not in self._allowed:
            await self._refuse(message, user.id, STRANGER_REPLY.format(user_id=user.id))
            return
        if command is not None:
            await self._run_command(command, message, user, address)
            return
        if message.media_group_id:
            turn = self._albums.take(
                _album_part(message, address, self._bot_username, self._bot_id)
            )
            if turn.action == "notice":
                await self._reply(message, ONLY_TEXT)
            elif turn.action == "submit":
                await self._submit(message, user, turn.text, address)
            return
        if body is None:
            if _has_content(message):  # a sticker, a voice note, a location, a bare photo...
                await self._reply(message, ONLY_TEXT)
            return
        text = without_bot_mentions(body, entities, self._bot_username, self._bot_id)
        await self._submit(message, user, text, address)

    def _saw_raw(self, item: Any, parsed: Update | None) -> None:
        """Every update of a getUpdates batch, before any of it is handled."""
        if parsed is not None:
            self._saw_update(parsed)
            return
        self._unreadable.note(item)

    def _saw_update(self, update: Any) -> None:
        """An update queued (webhook posts wait their turn here) or fetched in a batch."""
        if not isinstance(update, Update):
            return
        message = update.message
        if message is not None and message.media_group_id:
            self._albums.expect(
                _album_part(message, _address_of(message), self._bot_username, self._bot_id)
            )

    async def _submit(self, message: Message, user: User, text: str, address: ChatAddress) -> None:
        inbox = self._inbox
        if inbox is None:
            await self._reply(message, RESTARTING)
            return
        metadata: dict[str, Any] = (
            {"group": True, "reply_to": message.message_id}
            if message.chat.type != ChatType.PRIVATE
            else {}
        )
        inbound = InboundMessage(
            TELEGRAM_CHANNEL,
            str(address),
            text,
            user_id=str(user.id),
            user_name=_display_name(user),
            platform_message_id=str(message.message_id),
            metadata=metadata,
        )
        try:
            submission = await inbox.submit(inbound)
        except Exception:
            log.exception(
                "telegram_submit_failed", chat_id=str(address), message_id=message.message_id
            )
            await self._reply(message, NOT_SAVED)
            return
        if not submission.accepted:
            log.info(
                "telegram_message_not_accepted",
                chat_id=str(address),
                message_id=message.message_id,
                reason=submission.reason,
            )
            if submission.reason == "stopping":
                await self._reply(message, RESTARTING)

    async def _on_press(self, query: CallbackQuery) -> None:
        """A button under one of Bruce's messages was pressed (telegram_buttons.py decides)."""
        message = query.message
        accessible = isinstance(message, Message) and message.is_accessible
        address: ChatAddress | None = None
        if isinstance(message, Message) and accessible:
            address = _address_of(message)
        elif message is not None:  # deleted, or too old to be shown (date 0): no topic known
            address = ChatAddress(message.chat.id)
        press = Press(
            query.from_user.id,
            str(address) if address is not None else "",
            message.message_id if message is not None else None,
            query.data,
        )
        answer = await self._presses.answer(press, self._inbox)
        await self._answer_press(query, answer.notice)
        if answer.reply is None or address is None or message is None:
            return
        if accessible:
            await self._remove_buttons(address, message.message_id)
        try:
            pieces = [Piece(chunk, None) for chunk in fit_plain(answer.reply)]
            await self._send_pieces(address, pieces, message.message_id)
        except DeliveryError as exc:
            log.warning("telegram_reply_failed", chat_id=str(address), error=str(exc))

    async def _answer_press(self, query: CallbackQuery, text: str | None) -> None:
        """Stop the client's spinner, with a short notice (`text`) or silently."""
        try:
            await self._sending_bot().answer_callback_query(query.id, text=text)
        except (TelegramError, DeliveryError) as exc:  # too late (~15 s), or the bot stopped
            log.info("telegram_press_not_answered", error=self._scrub(str(exc)))

    async def _remove_buttons(self, address: ChatAddress, message_id: int) -> None:
        try:
            await self._sending_bot().edit_message_reply_markup(address.chat_id, message_id)
        except (TelegramError, DeliveryError) as exc:  # gone, too old, or already without
            log.info(
                "telegram_buttons_not_removed",
                chat_id=str(address),
                message_id=message_id,
                error=self._scrub(str(exc)),
            )

    async def _refuse(self, message: Message, sender_id: int, reply: str) -> None:
        """One polite reply an hour to a sender Bruce may not answer (a user id, or the id of
        the group or channel an anonymous sender speaks as)."""
        if not self._refusals.due(sender_id):
            log.debug("telegram_stranger_ignored", sender_id=sender_id, chat_id=message.chat.id)
            return
        log.warning("telegram_stranger_refused", sender_id=sender_id, chat_id=message.chat.id)
        await self._reply(message, reply)

    async def _tell_unreadable(self, unreadable: UnreadableMessage) -> None:
        """The notice for an update PTB could not parse, for an allowed sender only."""
        chat_id = str(unreadable.address)
        if unreadable.sender_id not in self._allowed or not unreadable.addressed_to(
            self._bot_username, self._bot_id
        ):
            log.info("telegram_unreadable_not_answered", chat_id=chat_id)
            return
        log.info("telegram_unreadable_answered", chat_id=chat_id)
        try:
            await self._send_pieces(unreadable.address, [Piece(UNREADABLE, None)], None)
        except DeliveryError as exc:
            log.warning("telegram_reply_failed", chat_id=chat_id, error=str(exc))

    async def _run_command(
        self, command: str, message: Message, user: User, address: ChatAddress
    ) -> None:
        chat_id = str(address)
        log.info("telegram_command", command=command, chat_id=chat_id, user_id=user.id)
        try:
            if command == "start":
                reply = GREETING.format(name=_display_name(user))
            elif command == "help":
                reply = HELP.format(username=self._bot_username)
            elif self._inbox is None:
                reply = RESTARTING
            elif command == "new":
                reply = await self._inbox.new_conversation(TELEGRAM_CHANNEL, chat_id)
            else:
                reply = await self._inbox.describe_reminders(TELEGRAM_CHANNEL, chat_id)
        except Exception:
            log.exception("telegram_command_failed", command=command, chat_id=chat_id)
            reply = COMMAND_FAILED
        await self._reply(message, reply)

    async def _reply(self, message: Message, text: str) -> None:
        """A direct answer from the adapter (not a model reply): best effort, never raises."""
        try:
            await self._send_pieces(
                _address_of(message),
                [Piece(chunk, None) for chunk in fit_plain(text)],
                message.message_id if message.chat.type != ChatType.PRIVATE else None,
            )
        except DeliveryError as exc:
            log.warning("telegram_reply_failed", chat_id=message.chat.id, error=str(exc))

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
            error=self._scrub(repr(error)),
            exc_info=error,
        )

    def _on_polling_error(self, exc: TelegramError) -> None:
        # Called by PTB's retry loop, which keeps polling with a growing pause (up to 30 s).
        log.warning("telegram_polling_failed", error=self._scrub(str(exc)))

    # ---- sending -----------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        try:
            address = ChatAddress.parse(message.chat_id)
        except ValueError:
            raise DeliveryError(
                f"not a Telegram chat id: {message.chat_id!r}", permanent=True
            ) from None
        part = int(message.metadata.get("part", 0))
        reply_to = message.metadata.get("reply_to") if part == 0 else None
        pieces = render_pieces(message.text)
        key = (message.chat_id, message.message_id, part) if message.message_id else None
        done = self._delivered.done(key)

        def delivered(count: int) -> None:
            if len(pieces) > 1:
                self._delivered.note(key, done + count)

        buttons = _keyboard(message.choices)
        await self._send_pieces(address, pieces[done:], reply_to, delivered, buttons)
        self._delivered.forget(key)

    async def typing(self, chat_id: str) -> None:
        bot = self._sending_bot()
        try:
            address = ChatAddress.parse(chat_id)
        except ValueError:
            raise DeliveryError(f"not a Telegram chat id: {chat_id!r}", permanent=True) from None
        try:
            await bot.send_chat_action(
                chat_id=address.chat_id,
                action=ChatAction.TYPING,
                message_thread_id=address.thread_id,
            )
        except TelegramError as exc:
            raise self._delivery_error(exc) from None

    async def _send_pieces(
        self,
        address: ChatAddress,
        pieces: Sequence[Piece],
        reply_to: int | None,
        delivered: Callable[[int], None] | None = None,
        buttons: InlineKeyboardMarkup | None = None,
    ) -> None:
        """Send `pieces` in order; `buttons` go under the last one."""
        bot = self._sending_bot()
        for index, piece in enumerate(pieces):
            replying = (
                ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
                if reply_to is not None and index == 0
                else None
            )
            markup = buttons if index == len(pieces) - 1 else None
            try:
                try:
                    await self._send_piece(bot, address, piece, replying, markup)
                except ChatMigrated as moved:  # the group became a supergroup: follow it now
                    await self._follow_migration(address.chat_id, moved.new_chat_id)
                    address = ChatAddress(moved.new_chat_id)
                    await self._send_piece(bot, address, piece, replying, markup)
            except TelegramError as exc:
                raise self._delivery_error(exc) from None
            if delivered is not None:
                delivered(index + 1)

    async def _send_piece(
        self,
        bot: Bot,
        address: ChatAddress,
        piece: Piece,
        replying: ReplyParameters | None,
        buttons: InlineKeyboardMarkup | None = None,
    ) -> None:
        chat_id, thread = address.chat_id, address.thread_id
        if piece.html is not None:
            try:
                await bot.send_message(
                    chat_id,
                    piece.html,
                    parse_mode=ParseMode.HTML,
                    reply_parameters=replying,
                    message_thread_id=thread,
                    reply_markup=buttons,
                )
                return
            except BadRequest as exc:
                if "can't parse entities" not in exc.message.lower():
                    raise
                log.info("telegram_markup_refused", chat_id=str(address), error=exc.message)
        chunks = fit_plain(piece.source, TELEGRAM_TEXT_LIMIT)
        for index, chunk in enumerate(chunks):
            await bot.send_message(
                chat_id,
                chunk,
                reply_parameters=replying if index == 0 else None,
                message_thread_id=thread,
                reply_markup=buttons if index == len(chunks) - 1 else None,
            )

    def _sending_bot(self) -> Bot:
        if self._app is None or not self._can_send:
            raise DeliveryError("the Telegram channel is not running")
        return self._app.bot

    def _delivery_error(self, exc: TelegramError) -> DeliveryError:
        """Telegram's error as the outbox understands it: retry later, or never."""
        text = self._scrub(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, RetryAfter):
            return DeliveryError(text, retry_after=_retry_after_seconds(exc))
        if isinstance(exc, Forbidden):  # blocked by the user, kicked from the group
            return DeliveryError(text, permanent=True)
        if isinstance(exc, BadRequest):  # "chat not found" and every other refusal of the request
            return DeliveryError(text, permanent=True)
        if isinstance(exc, (InvalidToken, ChatMigrated)):
            return DeliveryError(text, permanent=True)
        if isinstance(exc, NetworkError):  # includes TimedOut and 5xx answers
            return DeliveryError(text)
        return DeliveryError(text)

    def _scrub(self, text: str) -> str:
        token = self._config.token
        return text.replace(token, "***") if token else text


# ---- small helpers ---------------------------------------------------------------------------


async def _release_connections(
    app: Application,  # type: ignore[type-arg]
    updates: HTTPXRequest | None,
) -> None:
    """Close the HTTP clients of an application whose initialisation failed half-way."""
    for request in (app.bot.request, updates):
        if request is None:
            continue
        with contextlib.suppress(Exception):
            await request.shutdown()


def _file_url(base_url: str) -> str:
    """The file URL of a Bot API server from its method URL (…/bot → …/file/bot)."""
    if base_url.endswith("/bot"):
        return base_url[: -len("/bot")] + "/file/bot"
    return base_url


def _webhook_secret(config: TelegramConfig) -> str:
    """The secret Telegram will send with each post; a wrong webhook setting stops start-up."""
    webhook = config.webhook
    if not webhook.url:
        raise RuntimeError(
            "channels.telegram.mode is webhook but channels.telegram.webhook.url is empty: "
            "set it to the public https URL that reaches Bruce, or use mode: polling."
        )
    secret = webhook.secret_token
    if not secret:
        # Bruce registers the webhook itself, so it can choose a secret Telegram will send.
        log.info("telegram_webhook_secret_generated")
        return secrets.token_urlsafe(32)
    if not _SECRET_TOKEN.fullmatch(secret):
        raise RuntimeError(
            "channels.telegram.webhook.secret_token may only contain letters, digits, _ and "
            "- (1-256 characters), as Telegram requires."
        )
    return secret


def _keyboard(choices: Sequence[Choice]) -> InlineKeyboardMarkup | None:
    row = button_row(choices)
    if not row:
        return None
    buttons = [InlineKeyboardButton(choice.label, callback_data=choice.data) for choice in row]
    return InlineKeyboardMarkup([buttons])


def _address_of(message: Message) -> ChatAddress:
    """The conversation a message belongs to: its chat, or its forum topic."""
    return ChatAddress.of_message(
        message.chat.id,
        is_forum=message.chat.is_forum,
        is_topic_message=message.is_topic_message,
        thread_id=message.message_thread_id,
    )


def _album_part(message: Message, address: ChatAddress, username: str, bot_id: int) -> AlbumPart:
    caption = message.caption
    if caption is not None:
        caption = without_bot_mentions(caption, message.caption_entities, username, bot_id)
    kind = next((name for field, name in _ALBUM_KINDS if message[field]), "part")
    return AlbumPart(str(address), str(message.media_group_id), message.message_id, kind, caption)


def _replies_to(message: Message, bot_id: int) -> bool:
    """Whether the message replies to one of the bot's own messages."""
    replied = message.reply_to_message
    if replied is None or replied.from_user is None or replied.from_user.id != bot_id:
        return False
    # In a forum topic every message that replies to nothing "replies" to the topic's first
    # message; when the bot opened the topic, that is not a reply to the bot.
    topic_root = bool(message.is_topic_message) and (
        replied.message_id == message.message_thread_id
    )
    return not topic_root and replied.forum_topic_created is None


def _migration_of(message: Message) -> tuple[int, int] | None:
    """(old, new) chat id of the service message announcing a group's upgrade, in the old
    group (migrate_to_chat_id) or in the new supergroup (migrate_from_chat_id)."""
    if message.migrate_to_chat_id:
        return message.chat.id, message.migrate_to_chat_id
    if message.migrate_from_chat_id:
        return message.migrate_from_chat_id, message.chat.id
    return None


def _is_service(update: Update) -> bool:
    """A service message: members joined or left, a new title or photo, a pin, a topic opened,
    a video chat, an auto-delete timer... (PTB's own list, which follows the Bot API)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB's int-or-timedelta transition warnings
        return bool(filters.StatusUpdate.ALL.check_update(update))


def _has_content(message: Message) -> bool:
    """Something a person sent (media, a location, a poll...), as opposed to an empty or
    unknown message."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB's successful_payment deprecation warning
        return message.effective_attachment is not None


def _display_name(user: User) -> str:
    return user.first_name or (f"@{user.username}" if user.username else str(user.id))


def _retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB's int-or-timedelta transition warning
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
