"""The Telegram channel: python-telegram-bot (PTB) on one side, Bruce's inbox on the other.

The only module that imports `telegram`. Updates arrive by long polling (default) or by webhook
(`mode: webhook`, secret header checked by PTB). Each addressed message (a private chat; in a
group, an @mention, a text_mention or a reply to one of the bot's messages) passes the allowlist
first, then becomes an `InboundMessage` that the inbox stores before the update is acknowledged
(see `_ProcessedUpdateQueue`). A stranger gets one polite reply an hour naming their user id;
nothing of theirs is stored. `/start`, `/help`, `/new` and `/reminders` are answered here. Replies
go out as Telegram HTML (telegram_markup.py) with a plain-text re-send when Telegram refuses the
markup; failures become `DeliveryError`s, and the outbox is the one place that retries them.
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
    Message,
    MessageEntity,
    ReplyParameters,
    Update,
    User,
)
from telegram.constants import ChatAction, ChatType, MessageEntityType, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler
from telegram.request import HTTPXRequest

from bruce_bot.channels.base import DeliveryError, InboxPort
from bruce_bot.channels.telegram_markup import (
    TELEGRAM_TEXT_LIMIT,
    Piece,
    fit_plain,
    render_pieces,
)
from bruce_bot.config import TelegramConfig
from bruce_bot.domain import InboundMessage, OutboundMessage

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
STRANGER_REPLY_INTERVAL_SECONDS = 3600.0
ALLOWED_UPDATES = ("message", "edited_message")
_SUPPORTED_CHATS = (ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP)
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
_MAX_TRACKED_PARTS = 256

COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "Say hello and see what Bruce can do"),
    ("help", "How to talk to Bruce"),
    ("new", "Start a new conversation (earlier messages are set aside)"),
    ("reminders", "List your scheduled reminders and briefings"),
)
GREETING = (
    "Hi {name}! I'm Bruce, your personal assistant. Just write to me in plain words: I can "
    "search the web and read pages for you, write reports you can open in a browser, and "
    'remind you of things or send you a briefing at a time you choose ("remind me tomorrow at '
    '9 to call Ana").\n\n'
    "/new starts a fresh conversation · /reminders lists what is scheduled · /help shows this "
    "again."
)
HELP = (
    "Write to me as you would to a person; I remember our conversation until you send /new.\n\n"
    "• Ask questions, or ask me to look something up on the web.\n"
    "• Ask for a report or a summary: I save it and send you the link.\n"
    "• Ask me to remind you, once or every day/week, or to send you a briefing.\n\n"
    "/new: start a new conversation\n/reminders: what is scheduled\n/help: this message\n\n"
    "In a group, mention me (@{username}) or reply to one of my messages."
)
STRANGER_REPLY = (
    "Sorry, I only talk to people my owner has allowed. Your Telegram user id is {user_id}. If "
    "you are the owner, add {user_id} to channels.telegram.allowed_user_ids in config.yml and "
    "restart me."
)
ONLY_TEXT = "I can only read text for now. Please write your message (a caption works too)."
NOT_SAVED = "Sorry, I couldn't save your message just now. Please send it again in a minute."
RESTARTING = "I'm restarting right now. Please send that again in a minute."
COMMAND_FAILED = "Sorry, that didn't work on my side. It has been logged; please try again."


class _ProcessedUpdateQueue(asyncio.Queue):  # type: ignore[type-arg]
    """PTB's update queue, changed so that `put` returns only after the update was processed.

    Why: PTB's updater puts a fetched batch into this queue and then at once moves its offset
    past the batch; the very next getUpdates call carries that offset, which confirms the
    updates to Telegram, whether or not a handler has run yet. A crash in between would lose
    them. With this queue the updater's `await put(update)` waits until the application called
    `task_done()` for that update, i.e. until our handler returned, and our handler returns only
    after `inbox.submit` stored the message. So an update is confirmed (by the next getUpdates;
    on stop, by the updater's final getUpdates) only once the message is durable. The same holds
    for webhooks: PTB's webhook handler awaits `put` before answering 200, and Telegram
    redelivers an update that was not answered 200.

    It relies on the application processing updates one at a time, in order
    (`concurrent_updates(False)`), so the n-th `task_done` belongs to the n-th update put.
    Updates cut off by a stop before being processed are simply not confirmed: Telegram sends
    them again, and the inbox drops duplicates by platform message id.
    """

    def __init__(self) -> None:
        super().__init__()
        self._processed: list[asyncio.Future[None]] = []

    def put_nowait(self, item: Any) -> None:
        super().put_nowait(item)
        self._processed.append(asyncio.get_running_loop().create_future())

    async def put(self, item: Any) -> None:
        self.put_nowait(item)
        await self._processed[-1]

    def task_done(self) -> None:
        super().task_done()
        if self._processed:
            done = self._processed.pop(0)
            if not done.done():
                done.set_result(None)


class _UpdateCheckingRequest(HTTPXRequest):
    """The getUpdates connection, with a guard against updates PTB cannot parse.

    PTB parses a whole batch at once; one malformed update makes it log the failure and fetch
    the same batch again, forever, so nobody would be answered any more. Here each update of a
    batch is parsed on its own first, and one that fails is replaced by an empty update with the
    same id, so the offset moves past it and the rest are handled.
    """

    async def post(self, url: str, *args: Any, **kwargs: Any) -> Any:
        result = await super().post(url, *args, **kwargs)
        if url.endswith("/getUpdates") and isinstance(result, list):
            return [checked for item in result if (checked := _checked_update(item)) is not None]
        return result


def _checked_update(item: Any) -> dict[str, Any] | None:
    update_id = item.get("update_id") if isinstance(item, dict) else None
    if not isinstance(update_id, int) or isinstance(update_id, bool):
        log.warning("telegram_update_unreadable", reason="no update_id")
        return None
    try:
        Update.de_json(item, None)
    except Exception as exc:
        log.warning("telegram_update_malformed", update_id=update_id, error=repr(exc))
        return {"update_id": update_id}
    return item  # type: ignore[no-any-return]


class TelegramChannel:
    name = TELEGRAM_CHANNEL
    max_message_chars = MAX_MESSAGE_CHARS

    def __init__(
        self, config: TelegramConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._config = config
        self._allowed = frozenset(config.allowed_user_ids)
        self._clock = clock
        self._app: Application | None = None  # type: ignore[type-arg]
        self._inbox: InboxPort | None = None
        self._can_send = False
        self._bot_id = 0
        self._bot_username = ""
        self._refused_at: dict[int, float] = {}
        # Pieces already delivered of a part that became several messages, so that a retry of
        # the part by the outbox does not send them twice: (chat, message id, part) -> count.
        self._delivered_pieces: dict[tuple[str, int, int], int] = {}
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
        self._inbox = inbox
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
        if app is not None:
            await app.shutdown()

    def _build_application(self) -> Application:  # type: ignore[type-arg]
        config = self._config
        updates_request = _UpdateCheckingRequest(connection_pool_size=1)
        self._updates_request = updates_request
        builder = (
            ApplicationBuilder()
            .token(config.token)
            .concurrent_updates(False)  # one update at a time, in order: see the queue above
            .update_queue(_ProcessedUpdateQueue())
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
        if not webhook.url:
            raise RuntimeError(
                "channels.telegram.mode is webhook but channels.telegram.webhook.url is empty: "
                "set it to the public https URL that reaches Bruce, or use mode: polling."
            )
        secret = webhook.secret_token
        if not secret:
            # Bruce registers the webhook itself, so it can choose a secret Telegram will send.
            secret = secrets.token_urlsafe(32)
            log.info("telegram_webhook_secret_generated")
        elif not _SECRET_TOKEN.fullmatch(secret):
            raise RuntimeError(
                "channels.telegram.webhook.secret_token may only contain letters, digits, _ and "
                "- (1-256 characters), as Telegram requires."
            )
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
        message = update.message
        if message is None:
            if update.edited_message is not None:
                # An edit is not a new message; answering it again would confuse the chat.
                log.debug("telegram_edit_ignored", update_id=update.update_id)
            return
        user = message.from_user
        chat = message.chat
        if user is None or user.is_bot or chat.type not in _SUPPORTED_CHATS:
            return
        in_group = chat.type != ChatType.PRIVATE
        is_text = message.text is not None
        body = message.text if is_text else message.caption
        entities = tuple(message.entities if is_text else message.caption_entities)
        command, command_target = _command_of(body, entities)
        for_me = command_target.lower() == self._bot_username.lower()
        if command_target and not for_me:
            command = None  # "/new@other_bot" is another bot's business
        addressed = (
            not in_group
            or for_me
            or command is not None
            or bool(self._my_mentions(body, entities))
            or self._replies_to_me(message)
        )
        if not addressed:
            return
        # The allowlist comes before anything else: a stranger's words are never stored.
        if user.id not in self._allowed:
            await self._refuse(message, user)
            return
        if command is not None:
            await self._run_command(command, message, user)
            return
        if body is None:
            await self._reply(message, ONLY_TEXT)
            return
        await self._submit(message, user, self._without_my_mentions(body, entities), in_group)

    async def _submit(self, message: Message, user: User, text: str, in_group: bool) -> None:
        inbox = self._inbox
        if inbox is None:
            await self._reply(message, RESTARTING)
            return
        metadata: dict[str, Any] = (
            {"group": True, "reply_to": message.message_id} if in_group else {}
        )
        inbound = InboundMessage(
            TELEGRAM_CHANNEL,
            str(message.chat.id),
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
                "telegram_submit_failed", chat_id=message.chat.id, message_id=message.message_id
            )
            await self._reply(message, NOT_SAVED)
            return
        if not submission.accepted:
            log.info(
                "telegram_message_not_accepted",
                chat_id=message.chat.id,
                message_id=message.message_id,
                reason=submission.reason,
            )
            if submission.reason == "stopping":
                await self._reply(message, RESTARTING)

    async def _refuse(self, message: Message, user: User) -> None:
        now = self._clock()
        last = self._refused_at.get(user.id)
        if last is not None and now - last < STRANGER_REPLY_INTERVAL_SECONDS:
            log.debug("telegram_stranger_ignored", user_id=user.id, chat_id=message.chat.id)
            return
        self._refused_at = {
            uid: at
            for uid, at in self._refused_at.items()
            if now - at < STRANGER_REPLY_INTERVAL_SECONDS
        }
        self._refused_at[user.id] = now
        log.warning("telegram_stranger_refused", user_id=user.id, chat_id=message.chat.id)
        await self._reply(message, STRANGER_REPLY.format(user_id=user.id))

    async def _run_command(self, command: str, message: Message, user: User) -> None:
        chat_id = str(message.chat.id)
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
                message.chat.id,
                [Piece(chunk, None) for chunk in fit_plain(text)],
                message.message_id if message.chat.type != ChatType.PRIVATE else None,
            )
        except DeliveryError as exc:
            log.warning("telegram_reply_failed", chat_id=message.chat.id, error=str(exc))

    def _my_mentions(
        self, body: str | None, entities: Sequence[MessageEntity]
    ) -> list[MessageEntity]:
        if not body:
            return []
        mine = f"@{self._bot_username}".lower()
        return [
            entity
            for entity in entities
            if (entity.type == MessageEntityType.MENTION and _slice(body, entity).lower() == mine)
            or (
                entity.type == MessageEntityType.TEXT_MENTION
                and entity.user is not None
                and entity.user.id == self._bot_id
            )
        ]

    def _without_my_mentions(self, body: str, entities: Sequence[MessageEntity]) -> str:
        """The text without "@bruce_bot" (a text_mention is the user's own words: it stays);
        the text unchanged when the mention is all there is."""
        spans = [
            (entity.offset, entity.offset + entity.length)
            for entity in self._my_mentions(body, entities)
            if entity.type == MessageEntityType.MENTION
        ]
        if not spans:
            return body
        units = body.encode("utf-16-le")
        kept: list[bytes] = []
        position = 0
        for start, end in sorted(spans):
            kept.append(units[position * 2 : start * 2])
            position = max(position, end)
        kept.append(units[position * 2 :])
        text = re.sub(r"[ \t]{2,}", " ", b"".join(kept).decode("utf-16-le", "replace")).strip()
        return text or body

    def _replies_to_me(self, message: Message) -> bool:
        replied = message.reply_to_message
        return (
            replied is not None
            and replied.from_user is not None
            and replied.from_user.id == self._bot_id
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
            chat_id = int(message.chat_id)
        except ValueError:
            raise DeliveryError(
                f"not a Telegram chat id: {message.chat_id!r}", permanent=True
            ) from None
        part = int(message.metadata.get("part", 0))
        reply_to = message.metadata.get("reply_to") if part == 0 else None
        pieces = render_pieces(message.text)
        key = (message.chat_id, message.message_id, part) if message.message_id else None
        done = self._delivered_pieces.get(key, 0) if key else 0

        def delivered(count: int) -> None:
            if key is not None and len(pieces) > 1:
                if len(self._delivered_pieces) >= _MAX_TRACKED_PARTS:
                    self._delivered_pieces.pop(next(iter(self._delivered_pieces)))
                self._delivered_pieces[key] = done + count

        await self._send_pieces(chat_id, pieces[done:], reply_to, delivered)
        if key is not None:
            self._delivered_pieces.pop(key, None)

    async def typing(self, chat_id: str) -> None:
        bot = self._sending_bot()
        try:
            await bot.send_chat_action(chat_id=int(chat_id), action=ChatAction.TYPING)
        except TelegramError as exc:
            raise self._delivery_error(exc) from None

    async def _send_pieces(
        self,
        chat_id: int,
        pieces: Sequence[Piece],
        reply_to: int | None,
        delivered: Callable[[int], None] | None = None,
    ) -> None:
        bot = self._sending_bot()
        for index, piece in enumerate(pieces):
            replying = (
                ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
                if reply_to is not None and index == 0
                else None
            )
            try:
                await self._send_piece(bot, chat_id, piece, replying)
            except TelegramError as exc:
                raise self._delivery_error(exc) from None
            if delivered is not None:
                delivered(index + 1)

    async def _send_piece(
        self, bot: Bot, chat_id: int, piece: Piece, replying: ReplyParameters | None
    ) -> None:
        if piece.html is not None:
            try:
                await bot.send_message(
                    chat_id, piece.html, parse_mode=ParseMode.HTML, reply_parameters=replying
                )
                return
            except BadRequest as exc:
                if "can't parse entities" not in exc.message.lower():
                    raise
                log.info("telegram_markup_refused", chat_id=chat_id, error=exc.message)
        for index, chunk in enumerate(fit_plain(piece.source, TELEGRAM_TEXT_LIMIT)):
            await bot.send_message(
                chat_id, chunk, reply_parameters=replying if index == 0 else None
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


def _slice(text: str, entity: MessageEntity) -> str:
    """The text an entity covers; Telegram counts offsets in UTF-16 code units."""
    units = text.encode("utf-16-le")
    start, end = entity.offset * 2, (entity.offset + entity.length) * 2
    return units[start:end].decode("utf-16-le", "replace")


def _command_of(body: str | None, entities: Sequence[MessageEntity]) -> tuple[str | None, str]:
    """(known command name or None, the bot it names or "") of a message that starts with a
    bot_command entity; commands without that entity are plain text."""
    if not body:
        return None, ""
    entity = next(
        (e for e in entities if e.type == MessageEntityType.BOT_COMMAND and e.offset == 0), None
    )
    if entity is None:
        return None, ""
    name, _, target = _slice(body, entity).lstrip("/").partition("@")
    name = name.lower()
    return (name if name in dict(COMMANDS) else None), target


def _display_name(user: User) -> str:
    return user.first_name or (f"@{user.username}" if user.username else str(user.id))


def _retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB's int-or-timedelta transition warning
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
