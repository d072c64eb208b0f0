"""The store of tool calls held for the user's yes (`pending_actions`).

`hold` stores the call during the turn; Bruce's question about it comes after the turn's reply
(`ask`, which stores the question and marks the action asked in one commit, for unconfirmed
tasks too), so the question is the chat's newest message. A crash between the two leaves an
unasked action, which the next look at the chat asks about (`unasked`). Each later step is a
conditional update, so a confirmation pressed twice, or in two processes at once, runs the call
once: `claim` moves it from waiting to running for exactly one caller.

The same table keeps the questions a tool asks before it runs (run_code's approvals,
agent/asking.py), told apart by their status: `asking`, then `approved`, `denied` or `expired`
(`decide`, a conditional update too). For them `arguments` is what the user is shown, `result`
who answered ("telegram:42", "dashboard"; "" when nobody did) and `resolved_at` when.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.leases import Claimant, default_claimant
from bruce_bot.storage.messages import INSERT_MESSAGE
from bruce_bot.storage.models import (
    PendingActionRow,
    ProactiveTaskRow,
    columns_for,
    from_row,
    inserted_id,
    table_of,
)

_actions = table_of(PendingActionRow)
_tasks = table_of(ProactiveTaskRow)

WAITING = "waiting"
# A tool's question waiting for the user's Run or Deny (agent/asking.py), and its outcomes.
ASKING = "asking"
DECIDED = ("approved", "denied", "expired")
# The data of the buttons under Bruce's question about an action.
CONFIRM_PREFIX = "action-confirm:"
CANCEL_PREFIX = "action-cancel:"
# What a question may show in full: past this (a long file's content, say) it is refused.
MAX_SHOWN_CHARS = 3_000


@dataclass(frozen=True, slots=True)
class PendingAction:
    id: int
    session_id: int
    tool: str
    arguments: str
    reason: str
    origin: str
    person: str
    task_run: bool
    status: str
    question_message_id: int | None
    result: str | None
    created_at: datetime
    resolved_at: datetime | None


_COLUMNS = columns_for(_actions, PendingAction)


class ApprovalStore:
    def __init__(self, engine: AsyncEngine, claimant: Claimant | None = None) -> None:
        self._engine = engine
        self._claimant = claimant or default_claimant()

    async def hold(
        self,
        session_id: int,
        tool: str,
        arguments: str,
        *,
        reason: str,
        origin: str,
        person: str,
        task_run: bool,
        status: str = WAITING,
        at: datetime | None = None,
    ) -> tuple[PendingAction, bool]:
        """The held call and whether it is new; a call held before under the same `origin` (a
        turn resumed after a crash) is returned as it is. Bruce asks about it after the turn's
        reply (`ask`), so its question is the newest message of the chat."""
        row = {
            "session_id": session_id,
            "tool": tool,
            "arguments": arguments,
            "reason": reason,
            "origin": origin,
            "person": person,
            "task_run": task_run,
            "status": status,
            "created_at": at or utcnow(),
        }
        by_origin = select(*_COLUMNS).where(
            _actions.c.session_id == session_id, _actions.c.origin == origin
        )
        try:
            async with self._engine.begin() as connection:
                found = (await connection.execute(by_origin)).first()
                if found is not None:
                    return from_row(PendingAction, found), False
                inserted = await connection.execute(_actions.insert(), row)
                action_id = inserted_id(inserted)
        except IntegrityError:  # the same call held by another process at the same moment
            async with self._engine.connect() as connection:
                return from_row(PendingAction, (await connection.execute(by_origin)).one()), False
        held = await self.get(action_id)
        assert held is not None
        return held, True

    async def unasked(self, session_id: int | None = None) -> list[PendingAction]:
        """Waiting actions nobody was asked about yet (a crash came between), oldest first."""
        query = select(*_COLUMNS).where(
            _actions.c.status == WAITING, _actions.c.question_message_id.is_(None)
        )
        if session_id is not None:
            query = query.where(_actions.c.session_id == session_id)
        async with self._engine.connect() as connection:
            result = await connection.execute(query.order_by(_actions.c.id))
            return [from_row(PendingAction, row) for row in result]

    async def ask(
        self,
        session_id: int,
        text: str,
        extra: dict[str, Any],
        *,
        action: int | None = None,
        task: int | None = None,
    ) -> int | None:
        """Store Bruce's question about a held action or an unconfirmed task, and mark it asked,
        in one commit; the question's message id, or None when it was asked already."""
        table, key = (_actions, action) if action is not None else (_tasks, task)
        message = {
            "session_id": session_id,
            "role": "assistant",
            "kind": "notice",
            "content": text,
            "status": "pending",
            "extra": extra,
            "created_at": utcnow(),
            **self._claimant.stamp(),
        }
        async with self._engine.begin() as connection:
            inserted = await connection.execute(INSERT_MESSAGE, message)
            message_id = inserted_id(inserted)
            marked = await connection.execute(
                update(table)
                .where(table.c.id == key, table.c.question_message_id.is_(None))
                .values(question_message_id=message_id)
            )
            if not marked.rowcount:
                await connection.rollback()  # asked meanwhile (another process): keep one
                return None
        return message_id

    async def get(self, action_id: int) -> PendingAction | None:
        async with self._engine.connect() as connection:
            result = await connection.execute(select(*_COLUMNS).where(_actions.c.id == action_id))
            row = result.first()
        return from_row(PendingAction, row) if row is not None else None

    async def waiting(self, session_id: int) -> list[PendingAction]:
        async with self._engine.connect() as connection:
            result = await connection.execute(
                select(*_COLUMNS)
                .where(_actions.c.session_id == session_id, _actions.c.status == WAITING)
                .order_by(_actions.c.id)
            )
            return [from_row(PendingAction, row) for row in result]

    async def _move(self, action_id: int, session_id: int, to: str, **values: Any) -> bool:
        """Waiting → `to`, for one caller only."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                update(_actions)
                .where(
                    _actions.c.id == action_id,
                    _actions.c.session_id == session_id,
                    _actions.c.status == WAITING,
                )
                .values(status=to, **values)
            )
        return bool(result.rowcount)

    async def claim(self, action_id: int, session_id: int) -> bool:
        """Take a waiting action to run it; False when it is not waiting (any more)."""
        return await self._move(action_id, session_id, "running")

    async def cancel(self, action_id: int, session_id: int) -> bool:
        return await self._move(action_id, session_id, "cancelled", resolved_at=utcnow())

    async def finish(self, action_id: int, *, ok: bool, result: str) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                update(_actions)
                .where(_actions.c.id == action_id)
                .values(status="done" if ok else "failed", result=result, resolved_at=utcnow())
            )

    # ---- a tool's questions (agent/asking.py) --------------------------------------------------

    async def asking(self) -> list[PendingAction]:
        """Every question still waiting for the user's answer, oldest first."""
        async with self._engine.connect() as connection:
            result = await connection.execute(
                select(*_COLUMNS).where(_actions.c.status == ASKING).order_by(_actions.c.id)
            )
            return [from_row(PendingAction, row) for row in result]

    async def decide(self, action_id: int, to: str, by: str, at: datetime) -> bool:
        """Asking → `to` (one of `DECIDED`), for one caller only."""
        assert to in DECIDED
        async with self._engine.begin() as connection:
            result = await connection.execute(
                update(_actions)
                .where(_actions.c.id == action_id, _actions.c.status == ASKING)
                .values(status=to, result=by, resolved_at=at)
            )
        return bool(result.rowcount)

    async def renew(self, action_id: int, at: datetime) -> bool:
        """Ask a question again from `at` (a turn resumed after its time ran out unanswered,
        with Bruce down): asked anew, nothing asked yet."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                update(_actions)
                .where(_actions.c.id == action_id, _actions.c.status == ASKING)
                .values(created_at=at, question_message_id=None)
            )
        return bool(result.rowcount)
