"""Buttons under Bruce's Slack messages, as Block Kit, and a press read back from Slack.

A message with `choices` is sent as blocks: its text in `section` blocks (mrkdwn, at most 3000
characters each, Slack's limit for a section) and one `actions` block of buttons (the first one
primary; `value` = the choice's data, `action_id` unique in the message). The plain `text` goes
too, for notifications and clients without blocks. A press comes back as a `block_actions`
interaction (Socket Mode's `interactive` envelope, or the Events API's form post); what it gets
is the channel policy's decision (policy.py: `Presses`). No SDK here: blocks are JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from bruce_bot.channels.slack.address import SlackAddress
from bruce_bot.channels.slack.mrkdwn import split_mrkdwn
from bruce_bot.domain import Choice

log = structlog.get_logger(__name__)

ACTIONS_BLOCK_ID = "bruce_choices"
SECTION_TEXT_LIMIT = 3000
BUTTON_TEXT_LIMIT = 75
BUTTON_VALUE_LIMIT = 2000
MAX_BUTTONS = 25  # in one actions block
MAX_SECTIONS = 40  # of the 50 blocks a message may carry


def choice_blocks(mrkdwn: str, choices: tuple[Choice, ...]) -> list[dict[str, Any]] | None:
    """The text and its buttons as blocks; None without a button to show."""
    buttons: list[dict[str, Any]] = []
    for choice in choices:
        label = choice.label.strip()[:BUTTON_TEXT_LIMIT]
        if not label or not 1 <= len(choice.data) <= BUTTON_VALUE_LIMIT:
            log.warning("slack_button_left_out", label=choice.label, data_chars=len(choice.data))
            continue
        button: dict[str, Any] = {
            "type": "button",
            "text": {"type": "plain_text", "text": label},
            "action_id": f"choice_{len(buttons)}",
            "value": choice.data,
        }
        if not buttons:
            button["style"] = "primary"
        buttons.append(button)
    if not buttons:
        return None
    return [
        *text_blocks(mrkdwn),
        {"type": "actions", "block_id": ACTIONS_BLOCK_ID, "elements": buttons[:MAX_BUTTONS]},
    ]


def text_blocks(mrkdwn: str) -> list[dict[str, Any]]:
    pieces = [p for p in split_mrkdwn(mrkdwn, SECTION_TEXT_LIMIT) if p.strip()][:MAX_SECTIONS]
    return [{"type": "section", "text": {"type": "mrkdwn", "text": p}} for p in pieces]


def without_buttons(blocks: Any) -> list[dict[str, Any]]:
    """A message's blocks (as Slack sent them back) with its buttons taken off."""
    if not isinstance(blocks, list):
        return []
    return [
        block
        for block in blocks
        if isinstance(block, dict)
        and block.get("type") != "actions"
        and block.get("block_id") != ACTIONS_BLOCK_ID
    ]


@dataclass(frozen=True, slots=True)
class Pressed:
    """A `block_actions` interaction, read: who pressed what under which message."""

    user_id: str | None
    address: SlackAddress | None
    message_ts: str | None
    data: str | None
    text: str  # the message's text (kept when its buttons go)
    blocks: list[dict[str, Any]]


def read_press(payload: dict[str, Any]) -> Pressed | None:
    """None when the interaction is not a button press (a modal, a shortcut...)."""
    if payload.get("type") != "block_actions":
        return None
    user = payload.get("user") or {}
    channel = (payload.get("channel") or {}).get("id")
    container = payload.get("container") or {}
    message = payload.get("message") or {}
    message_ts = message.get("ts") or container.get("message_ts")
    thread = message.get("thread_ts") or container.get("thread_ts")
    actions = [a for a in payload.get("actions") or () if isinstance(a, dict)]
    value = actions[0].get("value") if actions else None
    address = None
    if isinstance(channel, str) and channel:
        direct = channel.startswith("D")
        # A top-level message in a channel is only ever Bruce's in answer to a thread root,
        # so its thread is its own ts; in a DM a top-level message is the DM itself.
        root = thread if isinstance(thread, str) else (None if direct else message_ts)
        address = SlackAddress(channel, root if isinstance(root, str) else None)
    return Pressed(
        user.get("id") if isinstance(user.get("id"), str) else None,
        address,
        message_ts if isinstance(message_ts, str) else None,
        value if isinstance(value, str) else None,
        str(message.get("text") or ""),
        without_buttons(message.get("blocks")),
    )
