"""The settings the Settings page edits as text: the base system prompt, the timezone and the
agent's max turns, each an `Override` of a config.yml key (`/api/settings`, web/api/settings.py).

A turn reads them for each request (agent/turn.py, agent/subagent.py), as do the pages, the
budget and the scheduler for the timezone, so a change counts from the next message, without a
restart. `EDITABLE` is the one list of what the page edits and how it shows each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bruce_bot.config import Config
from bruce_bot.settings.override import Override

# The dashboard's base system prompt, over `agent.system_prompt`.
SYSTEM_PROMPT_SETTING = "agent.system_prompt"
# The timezone turns are told the time in (an IANA name), over `app.timezone`.
TIMEZONE_SETTING = "app.timezone"
# The most model calls one turn may make, over `agent.max_turns` (stored as text).
MAX_TURNS_SETTING = "agent.max_turns"
MAX_TURNS_RANGE = range(1, 51)


def _zone(value: Any) -> ZoneInfo:
    name = str(value).strip()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder, as "Europe"
        raise ValueError(
            f"'{name[:60]}' is not a timezone this system knows; use an IANA name such as "
            "Europe/Lisbon or America/Sao_Paulo"
        ) from None


def _turns(value: Any) -> int:
    try:
        turns = int(str(value).strip())
    except ValueError:
        turns = 0
    if turns not in MAX_TURNS_RANGE:
        raise ValueError(
            f"'{str(value)[:20]}' is not a number of model calls from {MAX_TURNS_RANGE.start} "
            f"to {MAX_TURNS_RANGE.stop - 1}"
        )
    return turns


def system_prompt(configured: str) -> Override[str]:
    return Override(SYSTEM_PROMPT_SETTING, configured, str, follows_equal=False)


def timezone(configured: ZoneInfo) -> Override[ZoneInfo]:
    return Override(TIMEZONE_SETTING, configured, _zone, lambda zone: zone.key, follows_equal=False)


def max_turns(configured: int) -> Override[int]:
    return Override(MAX_TURNS_SETTING, configured, _turns, str, follows_equal=False)


@dataclass(frozen=True, slots=True)
class Editable:
    """A setting of the Settings page: how the page shows it, and its override for a config."""

    key: str
    label: str
    description: str
    max_chars: int
    override: Callable[[Config], Override[Any]]
    multiline: bool = True


EDITABLE = {
    setting.key: setting
    for setting in (
        Editable(
            SYSTEM_PROMPT_SETTING,
            "Base system prompt",
            "The first layer of every agent request: who Bruce is and how it behaves. "
            "Takes effect from the next message.",
            50_000,
            lambda config: system_prompt(config.agent.system_prompt),
        ),
        Editable(
            TIMEZONE_SETTING,
            "Timezone",
            "Your timezone (an IANA name such as Europe/Lisbon): the time Bruce tells the "
            "model, the times and days the dashboard shows, the month of the budget, and the "
            "zone of new reminders made without one. Takes effect from the next message or page "
            "view; reminders already set keep theirs.",
            60,
            lambda config: timezone(config.app.zone),
            multiline=False,
        ),
        Editable(
            MAX_TURNS_SETTING,
            "Agent max turns",
            "The most model calls one answer may take (each tool round is one), 1 to 50. "
            "Takes effect from the next message.",
            2,
            lambda config: max_turns(config.agent.max_turns),
            multiline=False,
        ),
    )
}


def editable_overrides(config: Config) -> dict[str, Override[Any]]:
    """The Settings page's overrides, over `config`'s values (what a reset goes back to)."""
    return {key: setting.override(config) for key, setting in EDITABLE.items()}
