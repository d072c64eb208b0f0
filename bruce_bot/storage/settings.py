"""The settings store: run-time key/value settings that win over the YAML file (docs/design.md).

Values are cached after the first read. This process's writes go through this store, so they keep
the cache true; another process sharing the database announces its writes on the change feed
(topic `settings`, the key), and the cached value is forgotten to be read again.
"""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.changes import EVERYTHING, ChangeFeed, LocalFeed
from bruce_bot.storage.models import SettingRow, table_of

TOPIC = "settings"
_UNSET = object()


# The dashboard's base system prompt; the config's `agent.system_prompt` when unset.
SYSTEM_PROMPT_SETTING = "agent.system_prompt"
# The timezone turns are told the time in (an IANA name), over `app.timezone`.
TIMEZONE_SETTING = "app.timezone"
# The most model calls one turn may make, over `agent.max_turns` (stored as text, 1-50).
MAX_TURNS_SETTING = "agent.max_turns"
MAX_TURNS_RANGE = range(1, 51)
# The LLM settings the dashboard changes, each stored as `llm.<field>` over config.yml's.
LLM_FIELDS = ("provider", "model", "background_model", "base_url", "api_key")


def llm_setting(field: str) -> str:
    return f"llm.{field}"


def token_setting(channel: str) -> str:
    """Where a platform's bot token saved in the dashboard is kept."""
    return f"channels.{channel}.token"


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

    async def zone(self, configured: ZoneInfo) -> ZoneInfo:
        """The timezone of turns: the dashboard's, else `configured` (also when the stored
        name is no longer known to this system's tz database)."""
        name = await self.get(TIMEZONE_SETTING)
        if not name:
            return configured
        try:
            return ZoneInfo(str(name))
        except (ZoneInfoNotFoundError, ValueError):
            return configured

    async def max_turns(self, configured: int) -> int:
        """The most model calls of one turn: the dashboard's, else `configured`."""
        value = await self.get(MAX_TURNS_SETTING)
        try:
            turns = int(str(value))
        except ValueError:
            return configured
        return turns if turns in MAX_TURNS_RANGE else configured

    async def system_prompt(self, configured: str) -> str:
        """The base system prompt: the dashboard's, else `configured` (the config's)."""
        return str(await self.get(SYSTEM_PROMPT_SETTING, configured))
