"""The summaries store: each session's latest rolling summary, cached in memory.

The summarizer writes summaries through this store, so after the first read per session the
latest one is served from memory and the per-message path does not query it. A summary written by
another process sharing the database comes as a notice on the change feed (topic `summary`, the
session id), and the session's cached summary is forgotten to be read again.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.changes import EVERYTHING, ChangeFeed, LocalFeed
from bruce_bot.storage.models import SessionSummaryRow, table_of

log = structlog.get_logger(__name__)

TOPIC = "summary"


@dataclass(frozen=True, slots=True)
class Summary:
    content: str
    covers_until_message_id: int


class SummaryStore:
    def __init__(self, engine: AsyncEngine, feed: ChangeFeed | None = None) -> None:
        self._engine = engine
        self._feed = feed or LocalFeed()
        self._latest: dict[int, Summary | None] = {}
        # Bumped by every notice: a summary read (or saved) while one arrived may already be
        # superseded, so it is not cached.
        self._epoch = 0
        self._feed.subscribe(TOPIC, self._changed_elsewhere)

    def _changed_elsewhere(self, key: str) -> None:
        self._epoch += 1
        if key == EVERYTHING:
            self._latest.clear()
            return
        try:
            self._latest.pop(int(key), None)
        except ValueError:
            log.warning("summary_notice_ignored", key=key)

    def _keep(self, session_id: int, summary: Summary | None, epoch: int) -> None:
        if self._epoch == epoch:
            self._latest[session_id] = summary
        else:
            self._latest.pop(session_id, None)

    def forget(self, session_id: int) -> None:
        """The session was deleted: drop its cached summary (its id may be used again)."""
        self._epoch += 1
        self._latest.pop(session_id, None)

    async def latest(self, session_id: int) -> Summary | None:
        if session_id in self._latest:
            return self._latest[session_id]
        epoch = self._epoch
        query = (
            select(SessionSummaryRow.content, SessionSummaryRow.covers_until_message_id)
            .where(SessionSummaryRow.session_id == session_id)
            .order_by(SessionSummaryRow.id.desc())
            .limit(1)
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        summary = Summary(row[0], row[1]) if row else None
        self._keep(session_id, summary, epoch)
        return summary

    async def save(self, session_id: int, content: str, covers_until_message_id: int) -> Summary:
        row = {
            "session_id": session_id,
            "content": content,
            "covers_until_message_id": covers_until_message_id,
            "created_at": utcnow(),
        }
        epoch = self._epoch
        async with self._engine.begin() as connection:
            await connection.execute(table_of(SessionSummaryRow).insert(), row)
            await self._feed.publish_with(connection, TOPIC, str(session_id))
        summary = Summary(content, covers_until_message_id)
        self._keep(session_id, summary, epoch)
        return summary
