"""The sessions store: one conversation per (channel, chat id), cached in memory.

Bruce's daemon is the only writer of its sessions, so once a session is known its id and
timestamps are kept in memory and the per-message path never has to look them up again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import SessionKey, utcnow
from bruce_bot.storage.models import SessionRow


@dataclass(slots=True)
class SessionRecord:
    id: int
    channel: str
    chat_id: str
    kind: str
    last_message_at: datetime | None
    context_start_message_id: int
    title: str | None = None
    # Kept by the analytical brain; shown to the agent through its system prompt.
    parent_id: int | None = None
    nickname: str | None = None
    active_skills: list[str] = field(default_factory=list)
    active_workflow: str | None = None

    def __post_init__(self) -> None:
        if self.active_skills is None:  # a row written before the column had a default
            self.active_skills = []


_table = SessionRow.__table__
# In the order of SessionRecord's fields.
_COLUMNS = (
    _table.c.id,
    _table.c.channel,
    _table.c.chat_id,
    _table.c.kind,
    _table.c.last_message_at,
    _table.c.context_start_message_id,
    _table.c.title,
    _table.c.parent_id,
    _table.c.nickname,
    _table.c.active_skills,
    _table.c.active_workflow,
)


class SessionStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._by_key: dict[SessionKey, SessionRecord] = {}
        self._by_id: dict[int, SessionRecord] = {}

    def _remember(self, record: SessionRecord) -> SessionRecord:
        self._by_key[SessionKey(record.channel, record.chat_id)] = record
        self._by_id[record.id] = record
        return record

    async def get_or_create(self, key: SessionKey) -> SessionRecord:
        cached = self._by_key.get(key)
        if cached is not None:
            return cached
        query = select(*_COLUMNS).where(
            _table.c.channel == key.channel, _table.c.chat_id == key.chat_id
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            values = {
                "channel": key.channel,
                "chat_id": key.chat_id,
                "kind": "parent",
                "active_skills": [],
                "context_start_message_id": 0,
                "created_at": utcnow(),
            }
            try:
                async with self._engine.begin() as connection:
                    await connection.execute(_table.insert(), values)
            except IntegrityError:  # created concurrently: read it back below
                pass
            async with self._engine.connect() as connection:
                row = (await connection.execute(query)).one()
        return self._remember(SessionRecord(*row))

    async def find(self, key: SessionKey) -> SessionRecord | None:
        """The session of `key` if there is one (never creates it)."""
        cached = self._by_key.get(key)
        if cached is not None:
            return cached
        query = select(*_COLUMNS).where(
            _table.c.channel == key.channel, _table.c.chat_id == key.chat_id
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return self._remember(SessionRecord(*row)) if row is not None else None

    async def move_chat(self, key: SessionKey, new_chat_id: str) -> SessionRecord | None:
        """The chat of `key` now has the id `new_chat_id`: the session follows it, keeping its
        id, history and summary (the cached record changes in place, so a turn running for it
        replies to the new id). Returns the moved session; None when `key` has no session, or
        when `new_chat_id` already has one of its own: two sessions are not merged, the old one
        stays where it is as history (the caller moves what must follow the chat)."""
        session = await self.find(key)
        if session is None or await self.find(SessionKey(key.channel, new_chat_id)) is not None:
            return None
        async with self._engine.begin() as connection:
            await connection.execute(
                update(_table).where(_table.c.id == session.id).values(chat_id=new_chat_id)
            )
        self._by_key.pop(key, None)
        session.chat_id = new_chat_id
        self._remember(session)
        return session

    async def get(self, session_id: int) -> SessionRecord | None:
        cached = self._by_id.get(session_id)
        if cached is not None:
            return cached
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(select(*_COLUMNS).where(_table.c.id == session_id))
            ).first()
        return self._remember(SessionRecord(*row)) if row is not None else None

    def touch(self, session_id: int, at: datetime) -> None:
        """Record in the cache that the session had a message at `at` (persisted by the turn)."""
        record = self._by_id.get(session_id)
        if record is not None:
            record.last_message_at = at

    async def set_context_start(self, session_id: int, message_id: int) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                update(_table)
                .where(_table.c.id == session_id)
                .values(context_start_message_id=message_id)
            )
        record = self._by_id.get(session_id)
        if record is not None:
            record.context_start_message_id = message_id

    async def get_many(self, session_ids: Iterable[int]) -> dict[int, SessionRecord]:
        """The sessions with these ids that exist, by id (cached ones without a query)."""
        wanted = set(session_ids)
        found = {sid: self._by_id[sid] for sid in wanted if sid in self._by_id}
        missing = wanted - found.keys()
        if missing:
            query = select(*_COLUMNS).where(_table.c.id.in_(missing))
            async with self._engine.connect() as connection:
                for row in await connection.execute(query):
                    record = self._remember(SessionRecord(*row))
                    found[record.id] = record
        return found

    async def list_recent(self, limit: int = 100) -> list[SessionRecord]:
        """Sessions with the most recent activity first (for the dashboard and the API)."""
        query = (
            select(*_COLUMNS)
            .order_by(_table.c.last_message_at.desc().nulls_last(), _table.c.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as connection:
            return [SessionRecord(*row) for row in await connection.execute(query)]

    # ---- what the analytical brain maintains ---------------------------------------------------

    async def create_child(self, parent_id: int, key: SessionKey) -> SessionRecord:
        """A sub-agent's session under `parent_id` (kind `child`)."""
        values = {
            "channel": key.channel,
            "chat_id": key.chat_id,
            "kind": "child",
            "parent_id": parent_id,
            "active_skills": [],
            "context_start_message_id": 0,
            "created_at": utcnow(),
        }
        async with self._engine.begin() as connection:
            result = await connection.execute(_table.insert(), values)
            session_id = int(result.inserted_primary_key[0])
            row = (
                await connection.execute(select(*_COLUMNS).where(_table.c.id == session_id))
            ).one()
        return self._remember(SessionRecord(*row))

    async def _set(self, session_id: int, **values: object) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(update(_table).where(_table.c.id == session_id).values(values))
        record = self._by_id.get(session_id)
        if record is not None:
            for name, value in values.items():
                setattr(record, name, value)

    async def set_title(self, session_id: int, title: str) -> None:
        await self._set(session_id, title=title)

    async def set_active_skills(self, session_id: int, names: list[str]) -> None:
        await self._set(session_id, active_skills=list(names))

    async def set_active_workflow(self, session_id: int, name: str | None) -> None:
        await self._set(session_id, active_workflow=name)

    async def nickname_taken(self, nickname: str, by_other_than: int) -> bool:
        query = select(_table.c.id).where(
            _table.c.nickname == nickname, _table.c.id != by_other_than
        )
        async with self._engine.connect() as connection:
            return (await connection.execute(query)).first() is not None

    async def set_nickname(self, session_id: int, nickname: str) -> bool:
        """Give the session `nickname`; False when another session already has it."""
        try:
            await self._set(session_id, nickname=nickname)
        except IntegrityError:  # the unique index: taken by another session meanwhile
            return False
        return True
