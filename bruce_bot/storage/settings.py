"""The settings store: the rows of the `settings` table, a value (JSON) under a key.

What a key means, how its value is checked and where the value in use comes from (the row, or
config.yml) is its `Override`'s (bruce_bot/settings/). Values are cached after the first read.
This process's writes go through this store, so they keep the cache true; another process
sharing the database announces its writes on the change feed (topic `settings`, the key), and
the cached value is forgotten to be read again.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.changes import EVERYTHING, ChangeFeed, LocalFeed
from bruce_bot.storage.models import SettingRow, table_of

TOPIC = "settings"
_UNSET = object()


class SettingsStore:
    def __init__(self, engine: AsyncEngine, feed: ChangeFeed | None = None) -> None:
        self._engine = engine
        self._feed = feed or LocalFeed()
        self._cache: dict[str, Any] = {}
        # Bumped by every notice: a value read (or written) while one arrived may be older than
        # what the notice announced, so it is not cached.
        self._epoch = 0
        self._feed.subscribe(TOPIC, self._changed_elsewhere)

    def _changed_elsewhere(self, key: str) -> None:
        self._epoch += 1
        if key == EVERYTHING:
            self._cache.clear()
        else:
            self._cache.pop(key, None)

    def _keep(self, key: str, value: Any, epoch: int) -> None:
        if self._epoch == epoch:
            self._cache[key] = value
        else:
            self._cache.pop(key, None)

    async def get(self, key: str, default: Any = None) -> Any:
        cached = self._cache.get(key, _UNSET)
        if cached is _UNSET:
            epoch = self._epoch
            async with self._engine.connect() as connection:
                row = (
                    await connection.execute(select(SettingRow.value).where(SettingRow.key == key))
                ).first()
            cached = row[0] if row else None
            self._keep(key, cached, epoch)
        return default if cached is None else cached

    async def set(self, key: str, value: Any) -> None:
        table = table_of(SettingRow)
        epoch = self._epoch
        async with self._engine.begin() as connection:
            changed = await connection.execute(
                update(table).where(table.c.key == key).values(value=value, updated_at=utcnow())
            )
            if changed.rowcount == 0:
                await connection.execute(
                    table.insert(), {"key": key, "value": value, "updated_at": utcnow()}
                )
            await self._feed.publish_with(connection, TOPIC, key)
        self._keep(key, value, epoch)

    async def unset(self, key: str) -> None:
        epoch = self._epoch
        async with self._engine.begin() as connection:
            await connection.execute(delete(SettingRow).where(SettingRow.key == key))
            await self._feed.publish_with(connection, TOPIC, key)
        self._keep(key, None, epoch)
