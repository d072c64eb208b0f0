"""Everything Bruce sends to Telegram: replies, typing, buttons, and answers to presses.

A reply goes out as Telegram HTML (telegram_markup.py) and is sent again as plain text when
Telegram refuses the markup; a part whose HTML grew past 4096 goes out as several messages, and
the ones already delivered are not sent twice when the outbox retries the part. A group that
became a supergroup is followed at once (the answer is re-sent to the new id). Telegram's errors
become `DeliveryError`s the outbox understands: retry later, or never. A live reply's message
(telegram_live.py) is turned into the reply by `finish_in`: its first piece edited in, formatted
the same way, the others sent after it.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

import structlog
from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    Message,
    ReplyParameters,
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

from bruce_bot.channels.base import DeliveryError
from bruce_bot.channels.telegram.buttons import button_row
from bruce_bot.channels.telegram.chats import ChatAddress
from bruce_bot.channels.telegram.markup import (
    TELEGRAM_TEXT_LIMIT,
    DeliveredPieces,
    PartKey,
    Piece,
    fit_plain,
    render_pieces,
)
from bruce_bot.channels.telegram.messages import address_of
from bruce_bot.domain import Choice, OutboundFile, OutboundMessage

log = structlog.get_logger(__name__)

Migrated = Callable[[int, int], Awaitable[None]]  # (old chat id, new chat id)


class TelegramSender:
    """Sends through the bot of a running application (`bot`; None: nothing can be sent)."""

    def __init__(self, token: str, migrated: Migrated) -> None:
        self._token = token
        self._migrated = migrated
        self._delivered = DeliveredPieces()
        self.bot: Bot | None = None

    async def send(self, message: OutboundMessage) -> None:
        address = _parse(message.chat_id)
        if message.file is not None:
            await self.send_file(address, message.file)
            return
        part = int(message.metadata.get("part", 0))
        pieces = render_pieces(message.text)
        key = (message.chat_id, message.message_id, part) if message.message_id else None
        done = self._already_sent(key, message)
        # The answer to the user's message is the reply's first message, not where it resumes.
        reply_to = message.metadata.get("reply_to") if part == 0 and done == 0 else None
        sent = done

        def delivered(count: int) -> None:
            nonlocal sent
            sent = done + count
            if len(pieces) > 1:
                self._delivered.note(key, sent)

        buttons = _keyboard(message.choices)
        try:
            await self.send_pieces(address, pieces[done:], reply_to, delivered, buttons)
        except DeliveryError as exc:
            exc.pieces_sent = sent  # recorded by the outbox: a retry, here or after a restart,
            raise  # starts after them
        self._delivered.forget(key)

    def _already_sent(self, key: PartKey | None, message: OutboundMessage) -> int:
        """Pieces of this part delivered by earlier attempts: those this process remembers,
        or those the outbox recorded (`pieces_sent`: an attempt before a restart)."""
        recorded = message.metadata.get("pieces_sent", 0)
        return max(self._delivered.done(key), recorded if isinstance(recorded, int) else 0)

    async def send_file(self, address: ChatAddress, file: OutboundFile) -> None:
        """A file as a document (an artifact sent with its reply); the bytes are in `file`."""
        bot = self._bot()
        try:
            await bot.send_document(
                chat_id=address.chat_id,
                document=InputFile(file.data, filename=file.filename, attach=True),
                message_thread_id=address.thread_id,
                disable_content_type_detection=True,
            )
        except TelegramError as exc:
            raise self._delivery_error(exc) from None

    async def finish_in(self, live_message_id: int, message: OutboundMessage) -> None:
        """A reply's part delivered into the live message (telegram_live.py) that showed it
        being written: its first piece edited in, formatted as `send` formats it, the others
        sent after it. Pieces delivered before an outbox retry are not delivered again."""
        address = _parse(message.chat_id)
        pieces = render_pieces(message.text)
        part = int(message.metadata.get("part", 0))
        key = (message.chat_id, message.message_id, part) if message.message_id else None
        done = self._already_sent(key, message)
        buttons = _keyboard(message.choices)
        sent = done

        def delivered(count: int) -> None:
            nonlocal sent
            sent = done + count
            self._delivered.note(key, sent)

        try:
            if done == 0:
                last = len(pieces) == 1
                try:
                    await self._edit_piece(
                        address, live_message_id, pieces[0], buttons if last else None
                    )
                except TelegramError as exc:
                    raise self._delivery_error(exc) from None
                delivered(1)
                done = 1
            await self.send_pieces(address, pieces[done:], None, delivered, buttons)
        except DeliveryError as exc:
            exc.pieces_sent = sent
            raise
        self._delivered.forget(key)

    async def _edit_piece(
        self,
        address: ChatAddress,
        message_id: int,
        piece: Piece,
        buttons: InlineKeyboardMarkup | None,
    ) -> None:
        bot = self._bot()
        try:
            if piece.html is not None:
                try:
                    await bot.edit_message_text(
                        piece.html,
                        chat_id=address.chat_id,
                        message_id=message_id,
                        parse_mode=ParseMode.HTML,
                        reply_markup=buttons,
                    )
                    return
                except BadRequest as exc:
                    if "can't parse entities" not in exc.message.lower():
                        raise
                    log.info("telegram_markup_refused", chat_id=str(address), error=exc.message)
            first, *rest = fit_plain(piece.source, TELEGRAM_TEXT_LIMIT)
            await bot.edit_message_text(
                first,
                chat_id=address.chat_id,
                message_id=message_id,
                reply_markup=None if rest else buttons,
            )
            if rest:
                await self.send_pieces(
                    address, [Piece(chunk, None) for chunk in rest], None, None, buttons
                )
        except BadRequest as exc:
            wording = exc.message.lower()
            if "message is not modified" in wording:
                return  # it shows this already
            if "message to edit not found" in wording or "can't be edited" in wording:
                # The user deleted the live message, or it can no longer change: a new one.
                log.info("telegram_live_message_gone", chat_id=str(address), error=exc.message)
                await _send_piece(bot, address, piece, None, buttons)
                return
            raise

    async def delete(self, address: ChatAddress, message_id: int) -> None:
        """Take one of the bot's messages down: best effort, never raises."""
        try:
            await self._bot().delete_message(address.chat_id, message_id)
        except (TelegramError, DeliveryError) as exc:
            log.info("telegram_delete_failed", chat_id=str(address), error=self.scrub(str(exc)))

    def delivery_error(self, exc: TelegramError) -> DeliveryError:
        """Telegram's error as the outbox understands it (see `_delivery_error`)."""
        return self._delivery_error(exc)

    async def typing(self, chat_id: str) -> None:
        bot = self._bot()
        address = _parse(chat_id)
        try:
            await bot.send_chat_action(
                chat_id=address.chat_id,
                action=ChatAction.TYPING,
                message_thread_id=address.thread_id,
            )
        except TelegramError as exc:
            raise self._delivery_error(exc) from None

    async def reply(self, message: Message, text: str) -> None:
        """A direct answer from the adapter (not a model reply): best effort, never raises."""
        replying = message.message_id if message.chat.type != ChatType.PRIVATE else None
        await self.say(address_of(message), text, replying)

    async def say(self, address: ChatAddress, text: str, reply_to: int | None) -> None:
        """Plain `text` from the adapter itself: best effort, never raises."""
        try:
            await self.send_pieces(
                address, [Piece(chunk, None) for chunk in fit_plain(text)], reply_to
            )
        except DeliveryError as exc:
            log.warning("telegram_reply_failed", chat_id=str(address), error=str(exc))

    async def answer_press(self, query: CallbackQuery, text: str | None) -> None:
        """Stop the client's spinner, with a short notice (`text`) or silently."""
        try:
            await self._bot().answer_callback_query(query.id, text=text)
        except (TelegramError, DeliveryError) as exc:  # too late (~15 s), or the bot stopped
            log.info("telegram_press_not_answered", error=self.scrub(str(exc)))

    async def remove_buttons(self, address: ChatAddress, message_id: int) -> None:
        try:
            await self._bot().edit_message_reply_markup(address.chat_id, message_id)
        except (TelegramError, DeliveryError) as exc:  # gone, too old, or already without
            log.info(
                "telegram_buttons_not_removed",
                chat_id=str(address),
                message_id=message_id,
                error=self.scrub(str(exc)),
            )

    async def send_pieces(
        self,
        address: ChatAddress,
        pieces: Sequence[Piece],
        reply_to: int | None,
        delivered: Callable[[int], None] | None = None,
        buttons: InlineKeyboardMarkup | None = None,
    ) -> None:
        """Send `pieces` in order; `buttons` go under the last one."""
        bot = self._bot()
        for index, piece in enumerate(pieces):
            replying = (
                ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
                if reply_to is not None and index == 0
                else None
            )
            markup = buttons if index == len(pieces) - 1 else None
            try:
                try:
                    await _send_piece(bot, address, piece, replying, markup)
                except ChatMigrated as moved:  # the group became a supergroup: follow it now
                    await self._migrated(address.chat_id, moved.new_chat_id)
                    address = ChatAddress(moved.new_chat_id)
                    await _send_piece(bot, address, piece, replying, markup)
            except TelegramError as exc:
                raise self._delivery_error(exc) from None
            if delivered is not None:
                delivered(index + 1)

    def scrub(self, text: str) -> str:
        """`text` without the bot token (PTB's errors may carry the URL)."""
        return text.replace(self._token, "***") if self._token else text

    def _bot(self) -> Bot:
        if self.bot is None:
            raise DeliveryError("the Telegram channel is not running")
        return self.bot

    def _delivery_error(self, exc: TelegramError) -> DeliveryError:
        """Telegram's error as the outbox understands it: retry later, or never."""
        text = self.scrub(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, RetryAfter):
            return DeliveryError(text, retry_after=retry_after_seconds(exc), rate_limited=True)
        if isinstance(exc, Forbidden):  # blocked by the user, kicked from the group
            return DeliveryError(text, permanent=True)
        if isinstance(exc, BadRequest):  # "chat not found" and every other refusal of the request
            return DeliveryError(text, permanent=True)
        if isinstance(exc, (InvalidToken, ChatMigrated)):
            return DeliveryError(text, permanent=True)
        if isinstance(exc, NetworkError):  # includes TimedOut and 5xx answers
            return DeliveryError(text)
        return DeliveryError(text)


async def _send_piece(
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


def _parse(chat_id: str) -> ChatAddress:
    try:
        return ChatAddress.parse(chat_id)
    except ValueError:
        raise DeliveryError(f"not a Telegram chat id: {chat_id!r}", permanent=True) from None


def _keyboard(choices: Sequence[Choice]) -> InlineKeyboardMarkup | None:
    row = button_row(choices)
    if not row:
        return None
    buttons = [InlineKeyboardButton(choice.label, callback_data=choice.data) for choice in row]
    return InlineKeyboardMarkup([buttons])


def retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB's int-or-timedelta transition warning
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
