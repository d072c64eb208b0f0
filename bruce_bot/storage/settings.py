"""The settings store: run-time key/value settings that win over the YAML file (DESIGN §4).

Values are cached after the first read; writes go through this store, so the cache stays true.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.models import SettingRow

_UNSET = object()


class SettingsStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._cache: dict[str, Any] = {}

    async def get(self, key: str, default: Any = None) -> Any:
        cached = self._cache.get(key, _UNSET)
        if cached is _UNSET:
            async with self._engine.connect() as connection:
                row = (
                    await connection.execute(select(SettingRow.value).where(SettingRow.key == key))
                ).first()
            cached = row[0] if row else None
            self._cache[key] = cached
        return default if cached is None else cached

    async def set(self, key: str, value: Any) -> None:
        table = SettingRow.__table__
        async with self._engine.begin() as connection:
            changed = await connection.execute(
                update(table).where(table.c.key == key).values(value=value, updated_at=utcnow())
            )
            if changed.rowcount == 0:
                await connection.execute(
                    table.insert(), {"key": key, "value": value, "updated_at": utcnow()}
                )
        self._cache[key] = value

    async def unset(self, key: str) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(delete(SettingRow).where(SettingRow.key == key))
        self._cache[key] = None
