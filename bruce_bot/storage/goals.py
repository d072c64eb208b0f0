"""The goals store: what a session is working towards, as the analytical brain records it.

Goals form a two-level tree per session: root goals and the sub-goals (TODO items) under them.
Completing a root goal completes its active sub-goals in the same commit. The open tree (active
root goals with all their sub-goals) is read on every turn for the agent's prompt, so it is cached
per session and dropped whenever the session's goals change; Bruce's daemon is their only writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.models import GoalRow

ACTIVE = "active"
COMPLETED = "completed"


@dataclass(frozen=True, slots=True)
class Goal:
    id: int
    session_id: int
    description: str
    status: str
    parent_goal_id: int | None
    created_at: datetime
    completed_at: datetime | None

    @property
    def is_active(self) -> bool:
        return self.status == ACTIVE


_goals = GoalRow.__table__
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
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._open: dict[int, tuple[Goal, ...]] = {}
        self._changes: dict[int, int] = {}  # per session: bumped by every write

    def _changed(self, session_id: int) -> None:
        self._changes[session_id] = self._changes.get(session_id, 0) + 1
        self._open.pop(session_id, None)

    async def open_tree(self, session_id: int) -> tuple[Goal, ...]:
        """Active goals and the sub-goals (done or not) of active root goals, oldest first."""
        cached = self._open.get(session_id)
        if cached is not None:
            return cached
        version = self._changes.get(session_id, 0)
        async with self._engine.connect() as connection:
            rows = await connection.execute(OPEN_TREE, {"sid": session_id})
            tree = tuple(Goal(*row) for row in rows)
        if self._changes.get(session_id, 0) == version:  # no write raced with this read
            self._open[session_id] = tree
        return tree

    async def get(self, goal_id: int) -> Goal | None:
        async with self._engine.connect() as connection:
            row = (await connection.execute(ONE, {"gid": goal_id})).first()
        return Goal(*row) if row is not None else None

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
            goal_id = int(result.inserted_primary_key[0])
            row = (await connection.execute(ONE, {"gid": goal_id})).one()
        self._changed(session_id)
        return Goal(*row)

    async def describe(self, goal: Goal, description: str) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                update(_goals).where(_goals.c.id == goal.id).values(description=description)
            )
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
                done += [int(child) for child in children.scalars()]
            await connection.execute(
                update(_goals)
                .where(_goals.c.id.in_(done), _goals.c.status == ACTIVE)
                .values(status=COMPLETED, completed_at=now)
            )
        self._changed(goal.session_id)
        return done
