"""Confirmations by reaction: ✅ or ❌ on a question of Bruce's that carries choices.

Matrix has no buttons. A message sent with choices (`OutboundMessage.choices`: Confirm / Cancel,
Run / Deny) is remembered by its event id, and Bruce reacts to it with ✅ and ❌ itself so a tap
is all it takes; an allowed user's `m.reaction` (an `m.annotation` with that key) on it is the
press of the first choice (✅) or the second (❌), handed to the channel policy's `Presses` (which
asks `inbox.choose`). The words the question names ("yes 42") work as on every platform.
Strangers' reactions, other keys and reactions to other messages are ignored.
"""

from __future__ import annotations

from typing import Any

from bruce_bot.channels.recent import Recent
from bruce_bot.domain import Choice

YES, NO = "\u2705", "\u274c"  # ✅ ❌: what Bruce offers under its question
YES_KEYS = frozenset({YES, "\u2714", "\U0001f44d"})  # ✅ ✔ 👍
NO_KEYS = frozenset({NO, "\u2716", "\U0001f44e"})  # ❌ ✖ 👎


def reaction_of(event: dict[str, Any]) -> tuple[str, str] | None:
    """(the event reacted to, the key) of an `m.reaction`, None for anything else."""
    if event.get("type") != "m.reaction" or "state_key" in event:
        return None
    content = event.get("content")
    relates = content.get("m.relates_to") if isinstance(content, dict) else None
    if not isinstance(relates, dict) or relates.get("rel_type") != "m.annotation":
        return None
    target, key = relates.get("event_id"), relates.get("key")
    if not isinstance(target, str) or not isinstance(key, str):
        return None
    return target, key.replace("\ufe0f", "")  # the emoji variation selector is not meaning


def reaction_content(event_id: str, key: str) -> dict[str, Any]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


class Offers:
    """The questions with choices Bruce sent recently: event id -> (a number, chat, choices)."""

    def __init__(self) -> None:
        self._numbers: Recent[str] = Recent()
        self._offers: dict[str, tuple[int, str, tuple[Choice, ...]]] = {}
        self._count = 0

    def add(self, event_id: str, chat: str, choices: tuple[Choice, ...]) -> None:
        self._count += 1
        self._numbers.add(event_id)
        self._offers[event_id] = (self._count, chat, choices)
        for old in [key for key in self._offers if key not in self._numbers]:
            del self._offers[old]  # forgotten by `Recent`: drop it here too

    def pressed(self, event_id: str, key: str) -> tuple[int, str, str] | None:
        """(the offer's number, its chat, the chosen `Choice.data`) a reaction stands for."""
        offer = self._offers.get(event_id)
        if offer is None:
            return None
        number, chat, choices = offer
        index = 0 if key in YES_KEYS else 1 if key in NO_KEYS else None
        if index is None or index >= len(choices):
            return None
        return number, chat, choices[index].data
