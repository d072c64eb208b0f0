"""Who may talk to Bruce on each platform, changed from the dashboard while Bruce runs.

Telegram's and Discord's ids are numbers; Matrix's and Slack's are text ("@alice:example.org",
"U012ABCDEF"), checked against the shape their platform's spec gives (`text_user_ids`) with an
error that shows one.

Each platform's allowlist is stored under `channels.<name>.allowed_user_ids` in `settings` (a
list of ids as text: Discord's ids are too big for a browser's numbers) and wins over
config.yml's `allowed_user_ids`; resetting deletes it, back to the file. The channels ask
`allowed_user_ids(channel)` for each message (the `AllowlistPort` of channels/policy.py), so a
change counts from the next message, in every process: the settings store caches the value and
forgets it when another process announces a write (the change feed). People the owner approved
by pairing (`approved_users`) are let in besides, whatever the list says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from bruce_bot import platforms
from bruce_bot.settings.override import Override, Source
from bruce_bot.storage.settings import SettingsStore

UserId = int | str  # Matrix's user ids are text (channels/policy.py)

log = structlog.get_logger(__name__)

MAX_IDS = 1000
MAX_ID = 2**63 - 1  # Discord's snowflakes and Telegram's ids both fit a signed 64-bit integer


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


def parse_text_ids(
    values: Sequence[object], spec: platforms.PlatformSpec, field: str = "allowed_user_ids"
) -> list[str]:
    """The user ids of a platform whose ids are text (`spec.text_user_ids`: Matrix's, Slack's)
    in `values`, sorted, without repeats; AllowlistRefused naming the first entry that is not
    one."""
    shape = spec.text_user_ids
    assert shape is not None
    if len(values) > MAX_IDS:
        raise AllowlistRefused(f"{field}: {len(values)} ids; at most {MAX_IDS} are kept")
    ids: set[str] = set()
    for index, value in enumerate(values):
        text = value.strip() if isinstance(value, str) else ""
        if not shape.matches(text):
            raise AllowlistRefused(
                f"{field}[{index}]: {str(value)[:60]!r} is not a {spec.title} user id. One "
                f"{shape.looks_like}"
            )
        ids.add(text)
    return sorted(ids)


def parser_of(channel: str) -> Callable[[Sequence[object]], Sequence[UserId]]:
    """How `channel`'s ids are read: as its platform's text ids, else as numbers."""
    spec = platforms.find(channel)
    if spec is None or spec.text_user_ids is None:
        return parse_ids
    return lambda values: parse_text_ids(values, spec)


def _stored(channel: str) -> Any:
    def stored_ids(value: Any) -> frozenset[UserId]:
        if not isinstance(value, list):
            raise AllowlistRefused("allowed_user_ids: not a list of user ids")
        return frozenset(parser_of(channel)(value))

    return stored_ids


def _as_stored(ids: frozenset[UserId]) -> list[str]:
    return sorted(str(i) for i in ids)


def allowlist(channel: str, configured: Iterable[UserId]) -> Override[frozenset[UserId]]:
    """`channel`'s allowlist over config.yml's `allowed_user_ids` (`configured`; Matrix's are
    text, and so are those saved in Settings for it)."""
    return Override(allowlist_setting(channel), frozenset(configured), _stored(channel), _as_stored)


@dataclass(frozen=True, slots=True)
class AllowlistView:
    channel: str
    user_ids: list[UserId]  # in use
    source: Source
    config_user_ids: list[UserId]  # config.yml's, what a reset goes back to


class Allowlists:
    def __init__(self, configured: Mapping[str, Iterable[UserId]], store: SettingsStore) -> None:
        """`configured`: config.yml's `allowed_user_ids` per platform channel."""
        self._overrides = {name: allowlist(name, ids) for name, ids in configured.items()}
        self._store = store

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(self._overrides)

    def _override(self, channel: str) -> Override[frozenset[UserId]]:
        return self._overrides.get(channel) or allowlist(channel, ())

    async def allowed_user_ids(self, channel: str) -> frozenset[UserId]:
        """The ids let in on `channel`: the dashboard's list, else config.yml's."""
        return await self._override(channel).value(self._store)

    async def view(self, channel: str) -> AllowlistView:
        override = self._override(channel)
        current = await override.current(self._store)
        return AllowlistView(
            channel, sorted(current.value), current.source, sorted(override.default)
        )

    async def save(self, channel: str, values: Sequence[object]) -> AllowlistView:
        """Store `values` as `channel`'s allowlist (the same as config.yml's: follow the file
        again); AllowlistRefused when one is not a user id, and nothing is stored."""
        ids: list[UserId] = list(parser_of(channel)(values))
        await self._override(channel).save(self._store, frozenset(ids))
        log.info("allowlist_saved", channel=channel, count=len(ids))
        return await self.view(channel)

    async def reset(self, channel: str) -> AllowlistView:
        await self._override(channel).reset(self._store)
        log.info("allowlist_reset", channel=channel)
        return await self.view(channel)
