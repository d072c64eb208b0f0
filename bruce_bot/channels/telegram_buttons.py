"""Buttons under Bruce's Telegram messages, and what a press on one of them gets.

A message's `Choice`s become one row of inline buttons; a press comes back as a callback query
whose `data` is the choice's data. Telegram takes 1-64 bytes of callback data and refuses the
whole message otherwise ("BUTTON_DATA_INVALID"), so a choice that does not fit is left out (the
text always says how to answer in words). Once a press was answered, the buttons are taken off
the message; a second tap that was already on its way (a double tap, a client that has not
redrawn yet, Telegram sending the query again) finds the message in `UsedButtons` and is told
the button is no longer active instead of getting a second outcome. `Presses` decides what a
press gets (telegram.py turns it into Bot API calls). No SDK import here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from bruce_bot.channels.base import InboxPort
from bruce_bot.channels.telegram_texts import (
    BUTTON_INACTIVE,
    PRESS_FAILED,
    PRESS_NOT_ALLOWED,
    RESTARTING,
)
from bruce_bot.domain import Choice

log = structlog.get_logger(__name__)

CALLBACK_DATA_LIMIT = 64  # bytes (UTF-8), Telegram's limit for callback_data
LABEL_LIMIT = 64  # characters shown on a button; longer labels are cut
USED_KEPT = 1000


def button_row(choices: Sequence[Choice]) -> list[Choice]:
    """The choices Telegram can carry as buttons, in order (label trimmed to fit)."""
    row: list[Choice] = []
    for choice in choices:
        size = len(choice.data.encode("utf-8"))
        label = choice.label.strip()
        if not label or not 1 <= size <= CALLBACK_DATA_LIMIT:
            log.warning("telegram_button_left_out", label=choice.label, data_bytes=size)
            continue
        if len(label) > LABEL_LIMIT:
            label = label[: LABEL_LIMIT - 1] + "…"
        row.append(Choice(label, choice.data))
    return row


class UsedButtons:
    """The messages (chat, message id) whose buttons were pressed and answered; the oldest are
    forgotten first."""

    def __init__(self, size: int = USED_KEPT) -> None:
        self._size = size
        self._used: dict[tuple[str, int], None] = {}

    def note(self, chat_id: str, message_id: int) -> None:
        self._used[(chat_id, message_id)] = None
        if len(self._used) > self._size:
            del self._used[next(iter(self._used))]

    def __contains__(self, key: object) -> bool:
        return key in self._used


@dataclass(frozen=True, slots=True)
class Press:
    """A tap on a button under one of Bruce's messages. `chat_id` is the conversation the
    message is in (its topic too); `message_id` and `data` are None when Telegram sent none (a
    message sent in inline mode, a game button)."""

    user_id: int
    chat_id: str
    message_id: int | None
    data: str | None


@dataclass(frozen=True, slots=True)
class PressAnswer:
    """What a press gets: `notice` shown as a toast (None: nothing, the spinner just stops);
    `reply`, when there is one, is the outcome: the buttons go and it is sent in answer."""

    notice: str | None
    reply: str | None = None


class Presses:
    def __init__(self, channel: str, allowed: frozenset[int]) -> None:
        self._channel = channel
        self._allowed = allowed
        self._used = UsedButtons()

    async def answer(self, press: Press, inbox: InboxPort | None) -> PressAnswer:
        if press.user_id not in self._allowed:
            log.warning("telegram_stranger_press_refused", sender_id=press.user_id)
            return PressAnswer(PRESS_NOT_ALLOWED)
        if inbox is None:
            return PressAnswer(RESTARTING)
        if press.message_id is None or press.data is None:
            return PressAnswer(BUTTON_INACTIVE)
        if (press.chat_id, press.message_id) in self._used:
            return PressAnswer(BUTTON_INACTIVE)
        try:
            reply = await inbox.choose(self._channel, press.chat_id, press.data)
        except Exception:
            log.exception("telegram_press_failed", chat_id=press.chat_id, data=press.data)
            return PressAnswer(PRESS_FAILED)
        log.info("telegram_press", chat_id=press.chat_id, data=press.data, known=reply is not None)
        if reply is None:
            return PressAnswer(BUTTON_INACTIVE)
        self._used.note(press.chat_id, press.message_id)
        return PressAnswer(None, reply)
