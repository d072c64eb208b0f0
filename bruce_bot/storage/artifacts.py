"""The artifacts store: the files the agent saved (`artifact_save`), one row per file.

The file itself lives under `<data_dir>/artifacts/<uuid>/<filename>`; the row is what the web
route trusts: a request is served only when its uuid and file name match a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.models import ArtifactRow, columns_for, from_row, table_of

_artifacts = table_of(ArtifactRow)


@dataclass(frozen=True, slots=True)
class StoredArtifact:
    uuid: str
    session_id: int | None
    title: str
    filename: str
    content_type: str
    size_bytes: int
    created_at: datetime


_COLUMNS = columns_for(_artifacts, StoredArtifact)


class ArtifactStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(
        self,
        *,
        uuid: str,
        session_id: int | None,
        title: str,
        filename: str,
        content_type: str,
        size_bytes: int,
    ) -> StoredArtifact:
        artifact = StoredArtifact(
            uuid, session_id, title, filename, content_type, size_bytes, utcnow()
        )
        row = {
            "uuid": uuid,
            "session_id": session_id,
            "title": title,
            "filename": filename,
            "content_type": content_type,
            "size_bytes": size_bytes,
            "created_at": artifact.created_at,
        }
        async with self._engine.begin() as connection:
            await connection.execute(_artifacts.insert(), row)
        return artifact

    async def get(self, uuid: str) -> StoredArtifact | None:
        query = select(*_COLUMNS).where(_artifacts.c.uuid == uuid)
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return from_row(StoredArtifact, row) if row else None

    async def list_recent(
        self, limit: int = 100, session_id: int | None = None
    ) -> list[StoredArtifact]:
        """The newest artifacts first (of one session when `session_id` is given)."""
        query = select(*_COLUMNS)
        if session_id is not None:
            query = query.where(_artifacts.c.session_id == session_id)
        query = query.order_by(_artifacts.c.id.desc()).limit(limit)
        async with self._engine.connect() as connection:
            return [from_row(StoredArtifact, row) for row in await connection.execute(query)]
