"""The web sessions store: the browsers signed in to the dashboard, one row per login.

A row is found by the SHA-256 of the browser's cookie (the cookie itself is never stored, so a
copy of the database signs nobody in) and named to the owner by an opaque `public_id`. Rows
made under another `web.auth_token` (another fingerprint) or past `expires_at` count as gone:
the web layer asks only for live rows and `purge` removes the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.storage.models import WebSessionRow, columns_for, from_row, table_of

_web_sessions = table_of(WebSessionRow)


@dataclass(frozen=True, slots=True)
class WebSessionRecord:
    id: str  # SHA-256 (hex) of the cookie value
    public_id: str
    token_fingerprint: str
    user_agent: str
    client_address: str
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime


_COLUMNS = columns_for(_web_sessions, WebSessionRecord)


class WebSessionStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(self, record: WebSessionRecord) -> None:
        row = asdict(record)
        async with self._engine.begin() as connection:
            await connection.execute(_web_sessions.insert(), row)

    async def get(self, session_id: str) -> WebSessionRecord | None:
        query = select(*_COLUMNS).where(_web_sessions.c.id == session_id)
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return from_row(WebSessionRecord, row) if row else None

    async def renew(self, session_id: str, seen_at: datetime, expires_at: datetime) -> None:
        query = (
            update(_web_sessions)
            .where(_web_sessions.c.id == session_id)
            .values(last_seen_at=seen_at, expires_at=expires_at)
        )
        async with self._engine.begin() as connection:
            await connection.execute(query)

    async def delete(self, session_id: str) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(delete(_web_sessions).where(_web_sessions.c.id == session_id))

    async def revoke(self, public_id: str, token_fingerprint: str) -> bool:
        """Delete the live row named `public_id`; False when there is none."""
        query = delete(_web_sessions).where(
            _web_sessions.c.public_id == public_id,
            _web_sessions.c.token_fingerprint == token_fingerprint,
        )
        async with self._engine.begin() as connection:
            return (await connection.execute(query)).rowcount > 0

    async def live(self, token_fingerprint: str, now: datetime) -> list[WebSessionRecord]:
        """The rows of this token that have not expired, the most recently seen first."""
        query = (
            select(*_COLUMNS)
            .where(
                _web_sessions.c.token_fingerprint == token_fingerprint,
                _web_sessions.c.expires_at > now,
            )
            .order_by(_web_sessions.c.last_seen_at.desc(), _web_sessions.c.created_at.desc())
        )
        async with self._engine.connect() as connection:
            return [from_row(WebSessionRecord, row) for row in await connection.execute(query)]

    async def purge(self, token_fingerprint: str, now: datetime) -> int:
        """Delete the expired rows and those of another token; returns how many went."""
        query = delete(_web_sessions).where(
            or_(
                _web_sessions.c.expires_at <= now,
                _web_sessions.c.token_fingerprint != token_fingerprint,
            )
        )
        async with self._engine.begin() as connection:
            return (await connection.execute(query)).rowcount
