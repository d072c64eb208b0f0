"""The tasks store: proactive tasks (the source of truth) and the ledger of their firings.

`task_runs` is unique on (task, scheduled_for): `start_run` returns None when that firing was
already claimed, which is how a firing is delivered at most once even if it is triggered twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.models import ProactiveTaskRow, TaskRunRow

_tasks = ProactiveTaskRow.__table__
_runs = TaskRunRow.__table__


@dataclass(frozen=True, slots=True)
class TaskRecord:
    id: int
    session_id: int
    channel: str
    chat_id: str
    title: str
    mode: str
    content: str
    run_at: datetime | None
    cron: str | None
    timezone: str
    status: str
    next_run_at: datetime | None
    created_at: datetime


_COLUMNS = tuple(_tasks.c[name] for name in TaskRecord.__slots__)  # type: ignore[attr-defined]


class TaskStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(self, **values: Any) -> TaskRecord:
        values.setdefault("status", "active")
        values.setdefault("created_at", utcnow())
        async with self._engine.begin() as connection:
            result = await connection.execute(_tasks.insert(), values)
        task = await self.get(int(result.inserted_primary_key[0]))
        assert task is not None
        return task

    async def get(self, task_id: int) -> TaskRecord | None:
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(select(*_COLUMNS).where(_tasks.c.id == task_id))
            ).first()
        return TaskRecord(*row) if row else None

    async def active(self, session_id: int | None = None) -> list[TaskRecord]:
        query = select(*_COLUMNS).where(_tasks.c.status == "active")
        if session_id is not None:
            query = query.where(_tasks.c.session_id == session_id)
        query = query.order_by(_tasks.c.next_run_at, _tasks.c.id)
        async with self._engine.connect() as connection:
            return [TaskRecord(*row) for row in await connection.execute(query)]

    async def listing(self, status: str | None = None, limit: int = 100) -> list[TaskRecord]:
        """Tasks for the dashboard: active and paused ones first, soonest next run first, then
        the others newest first; only those with `status` when given."""
        waiting = case((_tasks.c.status.in_(("active", "paused")), 0), else_=1)
        query = select(*_COLUMNS)
        if status is not None:
            query = query.where(_tasks.c.status == status)
        query = query.order_by(
            waiting, _tasks.c.next_run_at.asc().nulls_last(), _tasks.c.id.desc()
        ).limit(limit)
        async with self._engine.connect() as connection:
            return [TaskRecord(*row) for row in await connection.execute(query)]

    async def with_status(self, status: str, session_id: int) -> list[TaskRecord]:
        query = (
            select(*_COLUMNS)
            .where(_tasks.c.status == status, _tasks.c.session_id == session_id)
            .order_by(_tasks.c.id)
        )
        async with self._engine.connect() as connection:
            return [TaskRecord(*row) for row in await connection.execute(query)]

    async def count_open(self, session_id: int) -> int:
        """Tasks of the session that may still fire: active, paused or awaiting confirmation."""
        query = select(func.count()).where(
            _tasks.c.session_id == session_id,
            _tasks.c.status.in_(("active", "paused", "unconfirmed")),
        )
        async with self._engine.connect() as connection:
            return int((await connection.execute(query)).scalar() or 0)

    async def delete(self, task_id: int) -> None:
        """Remove a task that never ran (a refused confirmation): it leaves nothing behind."""
        async with self._engine.begin() as connection:
            await connection.execute(_runs.delete().where(_runs.c.task_id == task_id))
            await connection.execute(_tasks.delete().where(_tasks.c.id == task_id))

    async def update(self, task_id: int, **values: Any) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(update(_tasks).where(_tasks.c.id == task_id).values(**values))

    async def move_chat(
        self, channel: str, old_chat_id: str, new_chat_id: str, *, to_session: int | None = None
    ) -> int:
        """Tasks addressed to a chat that changed its id go to the new id (and, given
        `to_session`, belong to that session from now on); returns how many moved."""
        values: dict[str, Any] = {"chat_id": new_chat_id}
        if to_session is not None:
            values["session_id"] = to_session
        query = (
            update(_tasks)
            .where(_tasks.c.channel == channel, _tasks.c.chat_id == old_chat_id)
            .values(**values)
        )
        async with self._engine.begin() as connection:
            result = await connection.execute(query)
        return int(result.rowcount or 0)

    async def start_run(
        self, task_id: int, scheduled_for: datetime, late_seconds: float
    ) -> int | None:
        """Claim one firing; None when (task, scheduled_for) was already claimed."""
        row = {
            "task_id": task_id,
            "scheduled_for": scheduled_for,
            "status": "running",
            "late_seconds": late_seconds,
            "created_at": utcnow(),
        }
        try:
            async with self._engine.begin() as connection:
                result = await connection.execute(_runs.insert(), row)
        except IntegrityError:
            return None
        return int(result.inserted_primary_key[0])

    async def finish_run(self, run_id: int, status: str, error: str | None = None) -> None:
        values: dict[str, Any] = {"status": status, "error": error}
        if status == "delivered":
            values["delivered_at"] = utcnow()
        async with self._engine.begin() as connection:
            await connection.execute(update(_runs).where(_runs.c.id == run_id).values(**values))

    async def recent_runs(self, task_id: int, limit: int = 50) -> list[dict[str, Any]]:
        """The task's latest firings, newest first."""
        query = (
            select(_runs)
            .where(_runs.c.task_id == task_id)
            .order_by(_runs.c.scheduled_for.desc(), _runs.c.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as connection:
            return [dict(row._mapping) for row in await connection.execute(query)]

    async def last_runs(self, task_ids: list[int]) -> dict[int, dict[str, Any]]:
        """The latest firing of each of these tasks that has fired, by task id."""
        if not task_ids:
            return {}
        latest = (
            select(func.max(_runs.c.id))
            .where(_runs.c.task_id.in_(task_ids))
            .group_by(_runs.c.task_id)
            .scalar_subquery()
        )
        query = select(_runs).where(_runs.c.id.in_(latest))
        async with self._engine.connect() as connection:
            rows = [dict(row._mapping) for row in await connection.execute(query)]
        return {row["task_id"]: row for row in rows}

    async def runs(self, task_id: int) -> list[dict[str, Any]]:
        query = select(_runs).where(_runs.c.task_id == task_id).order_by(_runs.c.scheduled_for)
        async with self._engine.connect() as connection:
            return [dict(row._mapping) for row in await connection.execute(query)]
