"""The sessions store: one conversation per (channel, chat id), cached in memory.

Bruce's daemon is the only writer of its sessions, so once a session is known its id and
timestamps are kept in memory and the per-message path never has to look them up again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker

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


def _record(row: SessionRow) -> SessionRecord:
    return SessionRecord(
        id=row.id,
        channel=row.channel,
        chat_id=row.chat_id,
        kind=row.kind,
        last_message_at=row.last_message_at,
        context_start_message_id=row.context_start_message_id,
        title=row.title,
    )


class SessionStore:
    def __init__(self, sessions: async_sessionmaker) -> None:
        self._sessions = sessions
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
        query = select(SessionRow).where(
            SessionRow.channel == key.channel, SessionRow.chat_id == key.chat_id
        )
        async with self._sessions() as db:
            row = (await db.execute(query)).scalar_one_or_none()
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
                    await db.execute(insert(SessionRow).values(**values))
                    await db.commit()
                except IntegrityError:  # created concurrently (another process): read it back
                    await db.rollback()
                row = (await db.execute(query)).scalar_one()
            return self._remember(_record(row))

    async def get(self, session_id: int) -> SessionRecord | None:
        cached = self._by_id.get(session_id)
        if cached is not None:
            return cached
        async with self._sessions() as db:
            row = await db.get(SessionRow, session_id)
        return self._remember(_record(row)) if row is not None else None

    def touch(self, session_id: int, at: datetime) -> None:
        """Record in the cache that the session had a message at `at` (persisted by the turn)."""
        record = self._by_id.get(session_id)
        if record is not None:
            record.last_message_at = at

    async def set_context_start(self, session_id: int, message_id: int) -> None:
        async with self._sessions() as db:
            await db.execute(
                update(SessionRow)
                .where(SessionRow.id == session_id)
                .values(context_start_message_id=message_id)
            )
            await db.commit()
        record = self._by_id.get(session_id)
        if record is not None:
            record.context_start_message_id = message_id

    async def list_recent(self, limit: int = 100) -> list[SessionRecord]:
        """Sessions with the most recent activity first (for the dashboard and the API)."""
        query = (
            select(SessionRow)
            .order_by(SessionRow.last_message_at.desc().nulls_last(), SessionRow.id.desc())
            .limit(limit)
        )
        async with self._sessions() as db:
            return [_record(row) for row in (await db.execute(query)).scalars()]
