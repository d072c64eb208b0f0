"""The summaries store: each session's latest rolling summary, cached in memory.

Only the summarizer of this daemon writes summaries, so after the first read per session the
latest one is served from memory and the per-message path does not query it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import async_sessionmaker

from bruce_bot.domain import utcnow
from bruce_bot.storage.models import SessionSummaryRow


@dataclass(frozen=True, slots=True)
class Summary:
    content: str
    covers_until_message_id: int


class SummaryStore:
    def __init__(self, sessions: async_sessionmaker) -> None:
        self._sessions = sessions
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
        async with self._sessions() as db:
            row = (await db.execute(query)).first()
        summary = Summary(row[0], row[1]) if row else None
        self._latest[session_id] = summary
        return summary

    async def save(self, session_id: int, content: str, covers_until_message_id: int) -> Summary:
        async with self._sessions() as db:
            await db.execute(
                insert(SessionSummaryRow).values(
                    session_id=session_id,
                    content=content,
                    covers_until_message_id=covers_until_message_id,
                    created_at=utcnow(),
                )
            )
            await db.commit()
        summary = Summary(content, covers_until_message_id)
        self._latest[session_id] = summary
        return summary
