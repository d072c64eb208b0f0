"""The settings store: run-time key/value settings that win over the YAML file (DESIGN §4).

Values are cached after the first read; writes go through this store, so the cache stays true.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import async_sessionmaker

from bruce_bot.domain import utcnow
from bruce_bot.storage.models import SettingRow

_UNSET = object()


class SettingsStore:
    def __init__(self, sessions: async_sessionmaker) -> None:
        self._sessions = sessions
        self._cache: dict[str, Any] = {}

    async def get(self, key: str, default: Any = None) -> Any:
        cached = self._cache.get(key, _UNSET)
        if cached is _UNSET:
            async with self._sessions() as db:
                row = (
                    await db.execute(select(SettingRow.value).where(SettingRow.key == key))
                ).first()
            cached = row[0] if row else None
            self._cache[key] = cached
        return default if cached is None else cached

    async def set(self, key: str, value: Any) -> None:
        async with self._sessions() as db:
            row = await db.get(SettingRow, key)
            if row is None:
                db.add(SettingRow(key=key, value=value, updated_at=utcnow()))
            else:
                row.value = value
                row.updated_at = utcnow()
            await db.commit()
        self._cache[key] = value

    async def unset(self, key: str) -> None:
        async with self._sessions() as db:
            await db.execute(delete(SettingRow).where(SettingRow.key == key))
            await db.commit()
        self._cache[key] = None
