"""The goals store: what a session is working towards, as the analytical brain records it.

Goals form a two-level tree per session: root goals and the sub-goals (TODO items) under them.
Completing a root goal completes its active sub-goals in the same commit. The open tree (active
root goals with all their sub-goals) is read on every turn for the agent's prompt, so it is cached
per session and dropped whenever the session's goals change: by a write through this store, or by
one of another process sharing the database, which it announces on the change feed (topic
`goals`, the session id).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

import structlog
from sqlalchemy import bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.changes import EVERYTHING, ChangeFeed, LocalFeed
from bruce_bot.storage.models import GoalRow, from_row, inserted_id, table_of

log = structlog.get_logger(__name__)

TOPIC = "goals"

GoalStatus = Literal["active", "completed"]
ACTIVE: Final = "active"
COMPLETED: Final = "completed"


@dataclass(frozen=True, slots=True)
class Goal:
    id: int
    session_id: int
    description: str
    status: GoalStatus
    parent_goal_id: int | None
    created_at: datetime
    completed_at: datetime | None

    @property
    def is_active(self) -> bool:
        return self.status == ACTIVE


_goals = table_of(GoalRow)
_COLUMNS = (
    _goals.c.id,
    _goals.c.session_id,
    _goals.c.description,
    _goals.c.status,
    _goals.c.parent_goal_id,
    _goals.c.created_at,
    _goals.c.completed_at,
)
_active_roots = (
    select(_goals.c.id)
    .where(
        _goals.c.session_id == bindparam("sid"),
        _goals.c.status == ACTIVE,
        _goals.c.parent_goal_id.is_(None),
    )
    .scalar_subquery()
)
OPEN_TREE = (
    select(*_COLUMNS)
    .where(
        _goals.c.session_id == bindparam("sid"),
        (_goals.c.status == ACTIVE) | _goals.c.parent_goal_id.in_(_active_roots),
    )
    .order_by(_goals.c.id)
)
ONE = select(*_COLUMNS).where(_goals.c.id == bindparam("gid"))
COUNT_ACTIVE = select(func.count()).where(
    _goals.c.session_id == bindparam("sid"), _goals.c.status == ACTIVE
)


class GoalStore:
    def __init__(self, engine: AsyncEngine, feed: ChangeFeed | None = None) -> None:
        self._engine = engine
        self._feed = feed or LocalFeed()
        self._open: dict[int, tuple[Goal, ...]] = {}
        self._changes: dict[int, int] = {}  # per session: bumped by every write
        self._everything = 0  # bumped by every "anything may have changed" notice
        self._feed.subscribe(TOPIC, self._changed_elsewhere)

    def _changed(self, session_id: int) -> None:
        self._changes[session_id] = self._changes.get(session_id, 0) + 1
        self._open.pop(session_id, None)

    def _changed_elsewhere(self, key: str) -> None:
        if key == EVERYTHING:
            self._everything += 1
            self._open.clear()
            return
        try:
            self._changed(int(key))
        except ValueError:
            log.warning("goals_notice_ignored", key=key)

    async def _announce(self, connection: AsyncConnection, session_id: int) -> None:
        await self._feed.publish_with(connection, TOPIC, str(session_id))

    async def open_tree(self, session_id: int) -> tuple[Goal, ...]:
        """Active goals and the sub-goals (done or not) of active root goals, oldest first."""
        cached = self._open.get(session_id)
        if cached is not None:
            return cached
        version = (self._everything, self._changes.get(session_id, 0))
        async with self._engine.connect() as connection:
            rows = await connection.execute(OPEN_TREE, {"sid": session_id})
            tree = tuple(from_row(Goal, row) for row in rows)
        if (self._everything, self._changes.get(session_id, 0)) == version:  # no write raced
            self._open[session_id] = tree
        return tree

    async def of_session(self, session_id: int) -> list[Goal]:
        """Every goal of the session, done ones too, oldest first (for the dashboard)."""
        query = select(*_COLUMNS).where(_goals.c.session_id == session_id).order_by(_goals.c.id)
        async with self._engine.connect() as connection:
            return [from_row(Goal, row) for row in await connection.execute(query)]

    def forget(self, session_id: int) -> None:
        """The session was deleted: drop what is cached of it (its id may be used again)."""
        self._changed(session_id)

    async def get(self, goal_id: int) -> Goal | None:
        async with self._engine.connect() as connection:
            row = (await connection.execute(ONE, {"gid": goal_id})).first()
        return from_row(Goal, row) if row is not None else None

    async def count_active(self, session_id: int) -> int:
        async with self._engine.connect() as connection:
            return int((await connection.execute(COUNT_ACTIVE, {"sid": session_id})).scalar() or 0)

    async def add(self, session_id: int, description: str, parent_goal_id: int | None) -> Goal:
        values: dict[str, Any] = {
            "session_id": session_id,
            "description": description,
            "status": ACTIVE,
            "parent_goal_id": parent_goal_id,
            "created_at": utcnow(),
        }
        async with self._engine.begin() as connection:
            result = await connection.execute(_goals.insert(), values)
            goal_id = inserted_id(result)
            row = (await connection.execute(ONE, {"gid": goal_id})).one()
            await self._announce(connection, session_id)
        self._changed(session_id)
        return from_row(Goal, row)

    async def describe(self, goal: Goal, description: str) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                update(_goals).where(_goals.c.id == goal.id).values(description=description)
            )
            await self._announce(connection, goal.session_id)
        self._changed(goal.session_id)

    async def complete(self, goal: Goal) -> list[int]:
        """Complete the goal and, for a root goal, its active sub-goals; returns the ids done."""
        now = utcnow()
        async with self._engine.begin() as connection:
            done = [goal.id]
            if goal.parent_goal_id is None:
                children = await connection.execute(
                    select(_goals.c.id).where(
                        _goals.c.parent_goal_id == goal.id, _goals.c.status == ACTIVE
                    )
                )
                done += [int(row[0]) for row in children]
            await connection.execute(
                update(_goals)
                .where(_goals.c.id.in_(done), _goals.c.status == ACTIVE)
                .values(status=COMPLETED, completed_at=now)
            )
            await self._announce(connection, goal.session_id)
        self._changed(goal.session_id)
        return done
