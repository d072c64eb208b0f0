"""The tasks store: proactive tasks (the source of truth) and the ledger of their firings.

`task_runs` is unique on (task, scheduled_for): `fire` returns None when that firing was already
claimed, which is how a firing is delivered at most once even if it is triggered twice. `fire`
claims the run, advances the task and stores the firing's message (a reminder for the outbox, a
briefing's task message for the inbox) in ONE commit, so a crash leaves all of it or none. A run
is open (`running`, `undelivered`) until its message's fate closes it (`settle_runs`): delivered
when the reminder (or the briefing's answer) was sent, failed when that failed for good. The
`messages` rows are written here, on the same engine, because they belong to that commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import case, exists, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bruce_bot.domain import MessageStatus, Role, utcnow
from bruce_bot.storage.leases import Claimant, default_claimant
from bruce_bot.storage.messages import ANSWERS
from bruce_bot.storage.models import (
    MessageRow,
    ProactiveTaskRow,
    TaskRunRow,
    columns_for,
    from_row,
    inserted_id,
    table_of,
)

_tasks = table_of(ProactiveTaskRow)
_runs = table_of(TaskRunRow)
_messages = table_of(MessageRow)

# What a task does when it fires: send its text (a reminder), run a turn on it (a briefing), or
# check a page or search against a condition (a watch: its `watches` row, storage/watches.py).
TaskMode = Literal["message", "agent", "watch"]
# Active tasks fire; paused ones (set aside: a chat that refuses the bot, a schedule that cannot
# be read) and unconfirmed ones (waiting for the user's yes) do not; done (a one-shot that
# fired), cancelled and missed (a one-shot due while Bruce was down) ones are over.
TaskStatus = Literal["active", "paused", "unconfirmed", "done", "cancelled", "missed"]
# A firing: running and undelivered ones are open, the others closed.
# A watch's check is closed at once: `checked` (a verdict came) or `failed`.
RunStatus = Literal["running", "undelivered", "delivered", "failed", "missed", "checked"]

RUN_KEY = "task_run_id"  # key of the `extra` of a firing's message: the run it belongs to
# Key of the `extra` of a briefing's message: the person who set the task up (whose memories
# its turn uses), "<channel>:<user id>".
PERSON_KEY = "person"
OPEN_RUN_STATUSES: tuple[RunStatus, ...] = ("running", "undelivered")
CLOSED_RUN_STATUSES: tuple[RunStatus, ...] = ("delivered", "failed", "missed", "checked")
# What a reminder's delivery status (or a briefing answer's) makes of its run.
_FATES: dict[MessageStatus, tuple[RunStatus, str | None]] = {
    "sent": ("delivered", None),
    "failed": ("failed", "delivery failed"),
    "undelivered": ("undelivered", "delivery undelivered: the outbox tries again"),
}
_REPLY_SCAN = 50  # assistant messages after a briefing's task message searched for its answer


@dataclass(frozen=True, slots=True)
class TaskRecord:
    id: int
    session_id: int
    channel: str
    chat_id: str
    title: str
    mode: TaskMode
    content: str
    run_at: datetime | None
    cron: str | None
    timezone: str
    status: TaskStatus
    next_run_at: datetime | None
    created_at: datetime
    origin: str | None = None
    created_by: str | None = None  # the person who asked for it, "<channel>:<user id>"
    question_message_id: int | None = None  # unconfirmed: Bruce's question about it, once asked


_COLUMNS = columns_for(_tasks, TaskRecord)


@dataclass(frozen=True, slots=True)
class Firing:
    """A claimed firing: its run, the message stored with it, how many times it was handed over."""

    run_id: int
    message_id: int | None
    attempts: int


@dataclass(frozen=True, slots=True)
class OpenRun:
    """A run that is not closed (or has a status Bruce does not know), as start-up finds it."""

    id: int
    task_id: int
    scheduled_for: datetime
    status: str
    message_id: int | None
    attempts: int
    created_at: datetime
    task_found: bool
    message_role: Role | None  # assistant: a reminder or notice · user: a briefing's task message
    message_status: str | None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """A run whose message's fate moved it on (closed it, or made it `undelivered`)."""

    run_id: int
    task_id: int
    status: RunStatus


class TaskStore:
    def __init__(self, engine: AsyncEngine, claimant: Claimant | None = None) -> None:
        self._engine = engine
        # A reminder is stored in this process's hands: it delivers it right after the commit.
        self._claimant = claimant or default_claimant()

    async def create(self, **values: Any) -> TaskRecord:
        values.setdefault("status", "active")
        values.setdefault("created_at", utcnow())
        async with self._engine.begin() as connection:
            result = await connection.execute(_tasks.insert(), values)
        task = await self.get(inserted_id(result))
        assert task is not None
        return task

    async def by_origin(self, session_id: int, origin: str) -> TaskRecord | None:
        """The task a tool call with this origin already created in the session, if any."""
        query = select(*_COLUMNS).where(
            _tasks.c.session_id == session_id, _tasks.c.origin == origin
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return from_row(TaskRecord, row) if row else None

    async def get(self, task_id: int) -> TaskRecord | None:
        query = select(*_COLUMNS).where(_tasks.c.id == task_id)
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return from_row(TaskRecord, row) if row else None

    async def active(self, session_id: int | None = None) -> list[TaskRecord]:
        query = select(*_COLUMNS).where(_tasks.c.status == "active")
        if session_id is not None:
            query = query.where(_tasks.c.session_id == session_id)
        query = query.order_by(_tasks.c.next_run_at, _tasks.c.id)
        async with self._engine.connect() as connection:
            return [from_row(TaskRecord, row) for row in await connection.execute(query)]

    async def listing(
        self, status: TaskStatus | None = None, limit: int = 100, session_id: int | None = None
    ) -> list[TaskRecord]:
        """Tasks for the dashboard: active and paused ones first, soonest next run first, then
        the others newest first; only those with `status` (of `session_id`) when given."""
        waiting = case((_tasks.c.status.in_(("active", "paused")), 0), else_=1)
        query = select(*_COLUMNS)
        if status is not None:
            query = query.where(_tasks.c.status == status)
        if session_id is not None:
            query = query.where(_tasks.c.session_id == session_id)
        query = query.order_by(
            waiting, _tasks.c.next_run_at.asc().nulls_last(), _tasks.c.id.desc()
        ).limit(limit)
        async with self._engine.connect() as connection:
            return [from_row(TaskRecord, row) for row in await connection.execute(query)]

    async def with_status(
        self, status: TaskStatus, session_id: int | None = None
    ) -> list[TaskRecord]:
        """The tasks with `status`, of one session or (None) of all."""
        query = select(*_COLUMNS).where(_tasks.c.status == status).order_by(_tasks.c.id)
        if session_id is not None:
            query = query.where(_tasks.c.session_id == session_id)
        async with self._engine.connect() as connection:
            return [from_row(TaskRecord, row) for row in await connection.execute(query)]

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
        """Claim one firing without a message; None when (task, scheduled_for) was already
        claimed. Firings go through `fire`, which stores their message in the same commit."""
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
        return inserted_id(result)

    async def finish_run(
        self, run_id: int, status: RunStatus, error: str | None = None, *, only_open: bool = False
    ) -> bool:
        """Set a run's outcome; with `only_open`, only if the run is still open. Returns whether
        the run changed."""
        query = update(_runs).where(_runs.c.id == run_id).values(**_outcome(status, error))
        if only_open:
            query = query.where(_runs.c.status.in_(OPEN_RUN_STATUSES))
        async with self._engine.begin() as connection:
            result = await connection.execute(query)
        return bool(result.rowcount)

    async def fire(
        self,
        task_id: int,
        scheduled_for: datetime,
        late_seconds: float,
        *,
        message: dict[str, Any] | None = None,
        task_values: dict[str, Any] | None = None,
        status: RunStatus = "running",
        error: str | None = None,
    ) -> Firing | None:
        """Claim one firing, advance the task and store the firing's message, in one commit.

        `message` is a `messages` row; its `extra` gets the run id. `task_values` advance the
        task, only if it still waits for this firing (its next run is `scheduled_for`) — also
        when the firing was claimed before, so that a task cannot stay due for a firing that
        will never run again. Returns None when the firing was already claimed; a `running` run
        without a message (left by a crash before messages were stored with their run) is taken
        over instead, its `attempts` counted up.
        """
        try:
            async with self._engine.begin() as connection:
                if task_values is not None:
                    await _advance(connection, task_id, scheduled_for, task_values)
                claimed = await _claim(
                    connection, task_id, scheduled_for, late_seconds, _outcome(status, error)
                )
                if claimed is None:
                    return None  # the task's advance above is kept
                run_id, attempts = claimed
                message_id = None
                if message is not None:
                    message_id = await self._store_message(connection, run_id, message)
        except _ClaimLost:  # claimed at the same moment by another transaction
            return None
        return Firing(run_id, message_id, attempts)

    async def _store_message(
        self, connection: AsyncConnection, run_id: int, message: dict[str, Any]
    ) -> int:
        stored = {**message, "extra": {**(message.get("extra") or {}), RUN_KEY: run_id}}
        if stored.get("role") == "assistant":
            stored.update(self._claimant.stamp())
        message_id = inserted_id(await connection.execute(_messages.insert(), stored))
        await connection.execute(
            update(_runs).where(_runs.c.id == run_id).values(message_id=message_id)
        )
        return message_id

    async def open_runs(self, run_ids: Sequence[int] | None = None) -> list[OpenRun]:
        """Runs not closed (all, or those of `run_ids`), with whether their task exists and
        their message's role and status."""
        query = (
            select(
                _runs.c.id,
                _runs.c.task_id,
                _runs.c.scheduled_for,
                _runs.c.status,
                _runs.c.message_id,
                _runs.c.attempts,
                _runs.c.created_at,
                _tasks.c.id.is_not(None),
                _messages.c.role,
                _messages.c.status,
            )
            .outerjoin(_tasks, _tasks.c.id == _runs.c.task_id)
            .outerjoin(_messages, _messages.c.id == _runs.c.message_id)
            .where(_runs.c.status.not_in(CLOSED_RUN_STATUSES))
            .order_by(_runs.c.id)
        )
        if run_ids is not None:
            query = query.where(_runs.c.id.in_(list(run_ids)))
        async with self._engine.connect() as connection:
            return [from_row(OpenRun, row) for row in await connection.execute(query)]

    async def reopen_run(self, run_id: int, note: str) -> None:
        """Count one more hand-over of an open firing (run again after a restart), with a note."""
        query = (
            update(_runs)
            .where(_runs.c.id == run_id)
            .values(status="running", attempts=_runs.c.attempts + 1, error=note)
        )
        async with self._engine.begin() as connection:
            await connection.execute(query)

    async def link_message(self, run_id: int, message_id: int) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                update(_runs).where(_runs.c.id == run_id).values(message_id=message_id)
            )

    async def find_unlinked_message(
        self,
        *,
        session_id: int,
        after: datetime,
        platform_message_id: str | None = None,
        content_prefix: str | None = None,
    ) -> int | None:
        """A firing's message stored before runs recorded theirs: the briefing's task message
        (by its platform id) or the reminder (by its text), not linked to any run yet."""
        linked = exists().where(_runs.c.message_id == _messages.c.id)
        query = select(_messages.c.id).where(_messages.c.session_id == session_id, ~linked)
        if platform_message_id is not None:
            query = query.where(
                _messages.c.role == "user", _messages.c.platform_message_id == platform_message_id
            )
        elif content_prefix is not None:
            query = query.where(
                _messages.c.role == "assistant",
                _messages.c.kind == "reminder",
                _messages.c.created_at >= after,
                _messages.c.content.startswith(content_prefix, autoescape=True),
            )
        else:
            return None
        async with self._engine.connect() as connection:
            found = (await connection.execute(query.order_by(_messages.c.id).limit(1))).scalar()
        return int(found) if found is not None else None

    async def settle_runs(
        self,
        run_ids: Sequence[int] | None = None,
        statuses: Sequence[RunStatus] = OPEN_RUN_STATUSES,
        *,
        error: str | None = None,
    ) -> list[RunOutcome]:
        """Move runs on from their message's fate: a reminder's delivery status, or for a
        briefing that of the answer its turn stored. Runs whose message is still on its way
        (pending, or a briefing's turn not over) are left as they are. `error`, when given,
        is what a run that is not delivered records."""
        query = (
            select(
                _runs.c.id,
                _runs.c.task_id,
                _runs.c.status,
                _messages.c.id,
                _messages.c.session_id,
                _messages.c.role,
                _messages.c.status,
            )
            .join(_messages, _messages.c.id == _runs.c.message_id)
            .where(_runs.c.status.in_(list(statuses)))
        )
        if run_ids is not None:
            query = query.where(_runs.c.id.in_(list(run_ids)))
        outcomes: list[RunOutcome] = []
        async with self._engine.begin() as connection:
            rows: list[Sequence[Any]] = list(await connection.execute(query))
            for run_id, task_id, status, message_id, session_id, role, message_status in rows:
                if role == "user":  # a briefing: its fate is its answer's
                    fate = await _briefing_fate(connection, session_id, message_id, message_status)
                else:
                    fate = _FATES.get(message_status)
                if fate is None or fate[0] == status:
                    continue
                new_status, why = fate
                if error is not None and new_status != "delivered":
                    why = error
                await connection.execute(
                    update(_runs)
                    .where(_runs.c.id == run_id, _runs.c.status == status)
                    .values(**_outcome(new_status, why))
                )
                outcomes.append(RunOutcome(run_id, task_id, fate[0]))
        return outcomes

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


def _outcome(status: RunStatus, error: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {"status": status, "error": error}
    if status == "delivered":
        values["delivered_at"] = utcnow()
    return values


async def _briefing_fate(
    connection: AsyncConnection, session_id: int, task_message_id: int, status: MessageStatus
) -> tuple[RunStatus, str | None] | None:
    """What a briefing's run becomes: nothing yet while the inbox has its task message; then
    what became of the answer (the first assistant message answering it)."""
    if status in ("pending", "processing"):
        return None
    if status != "done":
        return ("failed", f"the briefing's turn ended {status}")
    query = (
        select(_messages.c.status, _messages.c.extra)
        .where(
            _messages.c.session_id == session_id,
            _messages.c.role == "assistant",
            _messages.c.id > task_message_id,
        )
        .order_by(_messages.c.id)
        .limit(_REPLY_SCAN)
    )
    replies: list[Sequence[Any]] = list(await connection.execute(query))
    for reply_status, extra in replies:
        if task_message_id in ((extra or {}).get(ANSWERS) or ()):
            return _FATES.get(reply_status)
    return None


class _ClaimLost(Exception):
    """Another transaction inserted the same firing first (its unique key)."""


async def _advance(
    connection: AsyncConnection,
    task_id: int,
    scheduled_for: datetime,
    task_values: dict[str, Any],
) -> None:
    """Advance the task, only if it still waits for this firing."""
    # Compared as datetimes: SQLite compares the stored text, and a row written by another tool
    # may spell the same time differently.
    waits_for = (
        await connection.execute(select(_tasks.c.next_run_at).where(_tasks.c.id == task_id))
    ).scalar()
    if waits_for == scheduled_for:
        await connection.execute(update(_tasks).where(_tasks.c.id == task_id).values(**task_values))


async def _claim(
    connection: AsyncConnection,
    task_id: int,
    scheduled_for: datetime,
    late_seconds: float,
    outcome: dict[str, Any],
) -> tuple[int, int] | None:
    """The firing's run id and attempts once claimed: a new run, or a `running` one left by a
    crash before its message was stored; None when it is someone else's."""
    found = (
        await connection.execute(
            select(_runs.c.id, _runs.c.status, _runs.c.message_id, _runs.c.attempts).where(
                _runs.c.task_id == task_id, _runs.c.scheduled_for == scheduled_for
            )
        )
    ).first()
    if found is None:
        row = {
            "task_id": task_id,
            "scheduled_for": scheduled_for,
            "late_seconds": late_seconds,
            "created_at": utcnow(),
            "attempts": 1,
            **outcome,
        }
        try:
            result = await connection.execute(_runs.insert(), row)
        except IntegrityError as exc:
            raise _ClaimLost from exc
        return inserted_id(result), 1
    if found.status != "running" or found.message_id is not None:
        return None
    taken = await connection.execute(
        update(_runs)
        .where(_runs.c.id == found.id, _runs.c.status == "running", _runs.c.message_id.is_(None))
        .values(late_seconds=late_seconds, attempts=_runs.c.attempts + 1, **outcome)
    )
    if not taken.rowcount:
        return None
    return int(found.id), int(found.attempts) + 1
