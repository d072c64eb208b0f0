"""The watches store: what each watch checks, what it saw last, and each check in one commit.

A watch is a `proactive_tasks` row of mode `watch` (its chat, title, status and `next_run_at`)
plus a `watches` row (its target, condition, interval and the state one check hands the next).
`record_check` claims the check's `task_runs` row (unique per task and due time: a check is
recorded at most once), stores the alert or notice it owes the user, moves the task's next check
on and updates the watch's state, all in ONE commit: a crash leaves all of it or none, and an
alert is stored before the outbox delivers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.leases import Claimant, default_claimant
from bruce_bot.storage.models import (
    MessageRow,
    ProactiveTaskRow,
    TaskRunRow,
    WatchRow,
    columns_for,
    from_row,
    inserted_id,
    table_of,
)
from bruce_bot.storage.tasks import RUN_KEY, RunStatus

_watches = table_of(WatchRow)
_tasks = table_of(ProactiveTaskRow)
_runs = table_of(TaskRunRow)
_messages = table_of(MessageRow)

WATCH_MODE = "watch"


@dataclass(frozen=True, slots=True)
class WatchRecord:
    task_id: int
    url: str | None
    query: str | None
    condition: str
    interval_seconds: float
    content_hash: str | None
    matched_hash: str | None
    verdict: str | None
    reason: str | None
    checked_at: datetime | None
    failures: int
    failures_told: bool
    unsure_told: bool

    @property
    def target(self) -> str:
        """What the watch reads, as the user reads it."""
        return self.url or f"search: {self.query}"


_COLUMNS = columns_for(_watches, WatchRecord)


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One check as `record_check` stores it: its run, the watch's new state, what to send."""

    task_id: int
    scheduled_for: datetime
    late_seconds: float
    status: RunStatus  # checked | failed
    verdict: str | None
    reason: str | None
    error: str | None
    next_check: datetime
    state: dict[str, Any]  # the `watches` columns this check changes
    message: dict[str, Any] | None = None  # an alert or notice, a `messages` row


class WatchStore:
    def __init__(self, engine: AsyncEngine, claimant: Claimant | None = None) -> None:
        self._engine = engine
        # An alert is stored in this process's hands: it delivers it right after the commit.
        self._claimant = claimant or default_claimant()

    async def create(self, task: dict[str, Any], watch: dict[str, Any]) -> int:
        """A watch's task row and its `watches` row, in one commit; the task's id."""
        values = {"created_at": utcnow(), **task}
        async with self._engine.begin() as connection:
            task_id = inserted_id(await connection.execute(_tasks.insert(), values))
            await connection.execute(_watches.insert(), {"task_id": task_id, **watch})
        return task_id

    async def get(self, task_id: int) -> WatchRecord | None:
        query = select(*_COLUMNS).where(_watches.c.task_id == task_id)
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return from_row(WatchRecord, row) if row else None

    async def of_tasks(self, task_ids: Sequence[int]) -> dict[int, WatchRecord]:
        if not task_ids:
            return {}
        query = select(*_COLUMNS).where(_watches.c.task_id.in_(list(task_ids)))
        async with self._engine.connect() as connection:
            rows = [from_row(WatchRecord, row) for row in await connection.execute(query)]
        return {watch.task_id: watch for watch in rows}

    async def record_check(self, check: CheckRecord) -> int | None:
        """Store one check in one commit; the id of the message it stored (None: none), or
        raises `AlreadyRecorded` when this check (task, due time) was recorded before."""
        run = {
            "task_id": check.task_id,
            "scheduled_for": check.scheduled_for,
            "late_seconds": check.late_seconds,
            "status": check.status,
            "error": check.error,
            "verdict": check.verdict,
            "reason": check.reason,
            "attempts": 1,
            "created_at": utcnow(),
            "delivered_at": utcnow() if check.status == "checked" else None,
        }
        try:
            async with self._engine.begin() as connection:
                run_id = inserted_id(await connection.execute(_runs.insert(), run))
                message_id = None
                if check.message is not None:
                    stored = {
                        **check.message,
                        "extra": {**(check.message.get("extra") or {}), RUN_KEY: run_id},
                        **self._claimant.stamp(),
                    }
                    message_id = inserted_id(await connection.execute(_messages.insert(), stored))
                    await connection.execute(
                        update(_runs).where(_runs.c.id == run_id).values(message_id=message_id)
                    )
                await connection.execute(
                    update(_tasks)
                    .where(_tasks.c.id == check.task_id, _tasks.c.status == "active")
                    .values(next_run_at=check.next_check)
                )
                await connection.execute(
                    update(_watches)
                    .where(_watches.c.task_id == check.task_id)
                    .values(**check.state)
                )
        except IntegrityError:
            raise AlreadyRecorded(check.task_id, check.scheduled_for) from None
        return message_id


class AlreadyRecorded(Exception):
    """This check (task, due time) was recorded before: another firing of it came first."""

    def __init__(self, task_id: int, scheduled_for: datetime) -> None:
        super().__init__(f"task {task_id}: the check due at {scheduled_for} is recorded already")
