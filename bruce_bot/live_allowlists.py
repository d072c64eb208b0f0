"""Who may talk to Bruce on Telegram and Discord, changed from the dashboard while Bruce runs.

Each platform's allowlist is stored under `channels.<name>.allowed_user_ids` in `settings` (a
list of ids as text: Discord's ids are too big for a browser's numbers) and wins over
config.yml's `allowed_user_ids`; resetting deletes it, back to the file. The channels ask
`allowed_user_ids(channel)` for each message (the `AllowlistPort` of channels/policy.py), so a
change counts from the next message, in every process: the settings store caches the value and
forgets it when another process announces a write (the change feed). People the owner approved
by pairing (`approved_users`) are let in besides, whatever the list says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import structlog

from bruce_bot.storage.settings import SettingsStore

log = structlog.get_logger(__name__)

MAX_IDS = 1000
MAX_ID = 2**63 - 1  # Discord's snowflakes and Telegram's ids both fit a signed 64-bit integer
Source = Literal["config", "dashboard"]


def allowlist_setting(channel: str) -> str:
    return f"channels.{channel}.allowed_user_ids"


class AllowlistRefused(ValueError):
    """Ids that cannot be stored; the message names the field and the entry, and the fix."""


def parse_ids(values: Sequence[object], field: str = "allowed_user_ids") -> list[int]:
    """The user ids in `values` (numbers, or their digits as text), sorted, without repeats;
    AllowlistRefused naming the first one that is not a user id."""
    if len(values) > MAX_IDS:
        raise AllowlistRefused(f"{field}: {len(values)} ids; at most {MAX_IDS} are kept")
    ids: set[int] = set()
    for index, value in enumerate(values):
        text = str(value).strip() if isinstance(value, str | int) else ""
        if isinstance(value, bool) or not text.isdigit() or not 0 < int(text) <= MAX_ID:
            raise AllowlistRefused(
                f"{field}[{index}]: {str(value)[:40]!r} is not a user id. A user id is a "
                "positive number: the one Bruce's reply to a stranger names, or Discord's "
                '"Copy User ID" (developer mode)'
            )
        ids.add(int(text))
    return sorted(ids)


@dataclass(frozen=True, slots=True)
class AllowlistView:
    channel: str
    user_ids: list[int]  # in use
    source: Source
    config_user_ids: list[int]  # config.yml's, what a reset goes back to


class LiveAllowlists:
    def __init__(self, configured: Mapping[str, Iterable[int]], store: SettingsStore) -> None:
        """`configured`: config.yml's `allowed_user_ids` per platform channel."""
        self._configured = {name: frozenset(ids) for name, ids in configured.items()}
        self._store = store

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(self._configured)

    async def _stored(self, channel: str) -> frozenset[int] | None:
        value = await self._store.get(allowlist_setting(channel))
        if not isinstance(value, list):
            return None
        try:
            return frozenset(parse_ids(value))
        except AllowlistRefused as exc:  # written by hand in the database: config.yml's then
            log.warning("allowlist_setting_ignored", channel=channel, error=str(exc))
            return None

    async def allowed_user_ids(self, channel: str) -> frozenset[int]:
        """The ids let in on `channel`: the dashboard's list, else config.yml's."""
        stored = await self._stored(channel)
        return stored if stored is not None else self._configured.get(channel, frozenset())

    async def view(self, channel: str) -> AllowlistView:
        stored = await self._stored(channel)
        configured = sorted(self._configured.get(channel, ()))
        if stored is None:
            return AllowlistView(channel, configured, "config", configured)
        return AllowlistView(channel, sorted(stored), "dashboard", configured)

    async def save(self, channel: str, values: Sequence[object]) -> AllowlistView:
        """Store `values` as `channel`'s allowlist (the same as config.yml's: follow the file
        again); AllowlistRefused when one is not a user id, and nothing is stored."""
        ids = parse_ids(values)
        if frozenset(ids) == self._configured.get(channel, frozenset()):
            await self._store.unset(allowlist_setting(channel))
        else:
            await self._store.set(allowlist_setting(channel), [str(i) for i in ids])
        log.info("allowlist_saved", channel=channel, count=len(ids))
        return await self.view(channel)

    async def reset(self, channel: str) -> AllowlistView:
        await self._store.unset(allowlist_setting(channel))
        log.info("allowlist_reset", channel=channel)
        return await self.view(channel)
