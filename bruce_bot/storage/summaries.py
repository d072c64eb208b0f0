"""The summaries store: each session's latest rolling summary, cached in memory.

Only the summarizer of this daemon writes summaries, so after the first read per session the
latest one is served from memory and the per-message path does not query it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.models import SessionSummaryRow


@dataclass(frozen=True, slots=True)
class Summary:
    content: str
    covers_until_message_id: int


class SummaryStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._latest: dict[int, Summary | None] = {}

    async def latest(self, session_id: int) -> Summary | None:
        if session_id in self._latest:
            return self._latest[session_id]
        query = (
            select(SessionSummaryRow.content, SessionSummaryRow.covers_until_message_id)
            .where(SessionSummaryRow.session_id == session_id)
            .order_by(SessionSummaryRow.id.desc())
            .limit(1)
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        summary = Summary(row[0], row[1]) if row else None
        self._latest[session_id] = summary
        return summary

    async def save(self, session_id: int, content: str, covers_until_message_id: int) -> Summary:
        row = {
            "session_id": session_id,
            "content": content,
            "covers_until_message_id": covers_until_message_id,
            "created_at": utcnow(),
        }
        async with self._engine.begin() as connection:
            await connection.execute(SessionSummaryRow.__table__.insert(), row)
        summary = Summary(content, covers_until_message_id)
        self._latest[session_id] = summary
        return summary
