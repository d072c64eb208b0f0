"""One run-time override: a row of the `settings` table that wins over a config.yml value.

Every value the dashboard changes while Bruce runs is an `Override`: its key in `settings`; the
config.yml value it stands in for (`default`, what a reset goes back to); its validation
(`parse`: a stored or typed value to the value used, or ValueError saying what is wrong and what
would do), how it is kept in the row (`dump`); and what makes a change count at once (`apply`,
run when another process announces a change; None: the value is read where it is used, each
time). `current` says where the value in use comes from: the dashboard, or config.yml — also
when a stored value no longer passes `parse` (written by hand, or by another version; logged).
The settings store caches its rows and forgets those another process announces
(storage/settings.py), so reading an override for each use costs no query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import structlog

from bruce_bot.storage.changes import EVERYTHING
from bruce_bot.storage.settings import SettingsStore

log = structlog.get_logger(__name__)

T = TypeVar("T")
Source = Literal["config", "dashboard"]


@dataclass(frozen=True, slots=True)
class Current(Generic[T]):
    """The value in use and where it comes from."""

    value: T
    source: Source


def _as_stored(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Override(Generic[T]):
    key: str
    default: T  # config.yml's value
    parse: Callable[[Any], T]
    dump: Callable[[T], Any] = _as_stored
    apply: Callable[[], None] | None = None
    # A value saved equal to config.yml's is not kept: the setting follows the file again. The
    # Settings page's text settings keep what the owner typed (the page shows it as theirs).
    follows_equal: bool = True

    async def current(self, store: SettingsStore) -> Current[T]:
        stored = await store.get(self.key)
        if stored is None:
            return Current(self.default, "config")
        try:
            return Current(self.parse(stored), "dashboard")
        except ValueError as exc:
            # Not the value itself: it may be a secret.
            log.warning("setting_ignored", key=self.key, error=str(exc))
            return Current(self.default, "config")

    async def value(self, store: SettingsStore) -> T:
        """The value in use: the dashboard's, else config.yml's."""
        return (await self.current(store)).value

    async def save(self, store: SettingsStore, value: T) -> None:
        """Store `value` (already parsed: `parse` is the validation)."""
        if self.follows_equal and self.dump(value) == self.dump(self.default):
            await store.unset(self.key)
        else:
            await store.set(self.key, self.dump(value))

    async def reset(self, store: SettingsStore) -> None:
        """Back to config.yml's value."""
        await store.unset(self.key)

    def named_by(self, key: str) -> bool:
        """Whether a change-feed notice of the `settings` topic concerns this override."""
        return key in (self.key, EVERYTHING)


def changed_elsewhere(overrides: Iterable[Override[Any]], key: str) -> None:
    """A change-feed notice of the `settings` topic (storage/changes.py): the `apply` hook of
    each override it names (all, for EVERYTHING) runs, a hook shared by several only once."""
    hooks: list[Callable[[], None]] = []
    for override in overrides:
        hook = override.apply
        if hook is not None and override.named_by(key) and hook not in hooks:
            hooks.append(hook)
    for hook in hooks:
        hook()
