"""Buttons under Bruce's Telegram messages: which choices Telegram can carry.

A message's `Choice`s become one row of inline buttons; a press comes back as a callback query
whose `data` is the choice's data. Telegram takes 1-64 bytes of callback data and refuses the
whole message otherwise ("BUTTON_DATA_INVALID"), so a choice that does not fit is left out (the
text always says how to answer in words). What a press gets is the channel policy's decision
(policy.py: `Presses`); telegram.py turns it into Bot API calls. No SDK import here.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from bruce_bot.domain import Choice

log = structlog.get_logger(__name__)

CALLBACK_DATA_LIMIT = 64  # bytes (UTF-8), Telegram's limit for callback_data
LABEL_LIMIT = 64  # characters shown on a button; longer labels are cut


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
