"""The audit store: every tool execution (docs/design.md) and every LLM call's token usage, and the
dashboard's queries over them (the tool log, usage per day, model, purpose and session).

Whoever wants to hear of usage as it is recorded (the monthly budget's watch) is given at
construction (`usage_recorded`); `MessageStore.finish_turn`, which records a turn's usage in its
own commit, is given the same listener.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import LLMCallRecord, utcnow
from bruce_bot.storage.messages import UsageListener, usage_row
from bruce_bot.storage.models import LLMCallRow, ToolExecutionRow, columns_for, from_row, table_of

_executions = table_of(ToolExecutionRow)
_calls = table_of(LLMCallRow)


@dataclass(frozen=True, slots=True)
class ToolExecutionRecord:
    id: int
    session_id: int | None
    turn: int
    tool_name: str
    input: str
    output: str | None
    error: str | None
    duration_ms: float
    created_at: datetime
    call_id: str | None = None
    answers_message_id: int | None = None
    details: str | None = None  # JSON (run_code: exit code, files, approval)


_EXECUTION_COLUMNS = columns_for(_executions, ToolExecutionRecord)


@dataclass(frozen=True, slots=True)
class UsageGroup:
    """LLM calls of one day (in the caller's timezone), model, purpose and session."""

    day: date
    model: str
    purpose: str
    session_id: int | None
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    errors: int


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """The tokens one model used over a stretch of time (what its cost is computed from)."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


def _counts() -> list[ColumnElement[Any]]:
    return [
        func.count(),
        func.coalesce(func.sum(_calls.c.input_tokens), 0),
        func.coalesce(func.sum(_calls.c.output_tokens), 0),
        func.coalesce(func.sum(_calls.c.cache_read_tokens), 0),
        func.coalesce(func.sum(_calls.c.cache_write_tokens), 0),
    ]


def _day_of(days: Sequence[tuple[date, datetime]]) -> ColumnElement[Any]:
    """The day (ISO text) a call's `created_at` falls in, from the days' starts: a day ends
    where the next begins, the last one now."""
    created = _calls.c.created_at
    starts = [start for _, start in days]
    last_day = literal(days[-1][0].isoformat())
    whens = [
        (created < end, day.isoformat()) for (day, _), end in zip(days, starts[1:], strict=False)
    ]
    return (case(*whens, else_=last_day) if whens else last_day).label("day")


class AuditStore:
    def __init__(self, engine: AsyncEngine, usage_recorded: UsageListener | None = None) -> None:
        self._engine = engine
        self._usage_recorded = usage_recorded

    async def record_tool_execution(
        self,
        *,
        session_id: int | None,
        turn: int,
        tool_name: str,
        tool_input: str,
        output: str | None,
        error: str | None,
        duration_ms: float,
        call_id: str | None = None,
        answers_message_id: int | None = None,
        details: str | None = None,
    ) -> None:
        row = {
            "session_id": session_id,
            "turn": turn,
            "tool_name": tool_name,
            "input": tool_input,
            "output": output,
            "error": error,
            "duration_ms": duration_ms,
            "created_at": utcnow(),
            "call_id": call_id,
            "answers_message_id": answers_message_id,
            "details": details,
        }
        async with self._engine.begin() as connection:
            await connection.execute(_executions.insert(), row)

    async def executions_answering(self, message_ids: Sequence[int]) -> list[ToolExecutionRecord]:
        """The tool executions recorded for a turn that answered any of `message_ids`, in the
        order they ran (what a turn cut by a crash already did)."""
        query = (
            select(*_EXECUTION_COLUMNS)
            .where(_executions.c.answers_message_id.in_(list(message_ids)))
            .order_by(_executions.c.id)
        )
        async with self._engine.connect() as connection:
            return [from_row(ToolExecutionRecord, row) for row in await connection.execute(query)]

    async def record_usage(self, session_id: int | None, usage: Sequence[LLMCallRecord]) -> None:
        if not usage:
            return
        now = utcnow()
        async with self._engine.begin() as connection:
            await connection.execute(
                _calls.insert(),
                [usage_row(session_id, record, now) for record in usage],
            )
        if self._usage_recorded is not None:
            self._usage_recorded(usage)

    async def tool_executions(
        self,
        *,
        session_id: int | None = None,
        tool_name: str | None = None,
        errors_only: bool = False,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[ToolExecutionRecord]:
        """The newest executions first; `before_id` pages back from an earlier answer."""
        query = select(*_EXECUTION_COLUMNS)
        if session_id is not None:
            query = query.where(_executions.c.session_id == session_id)
        if tool_name is not None:
            query = query.where(_executions.c.tool_name == tool_name)
        if errors_only:
            query = query.where(_executions.c.error.is_not(None))
        if before_id is not None:
            query = query.where(_executions.c.id < before_id)
        query = query.order_by(_executions.c.id.desc()).limit(limit)
        async with self._engine.connect() as connection:
            return [from_row(ToolExecutionRecord, row) for row in await connection.execute(query)]

    async def usage_groups(self, days: Sequence[tuple[date, datetime]]) -> list[UsageGroup]:
        """LLM calls per day × model × purpose × session, oldest day first: the finest grouping,
        which the dashboard sums up each way and prices.

        `days` are (day, its start as an aware datetime), oldest first; a day ends where the next
        begins and the last one at its start plus the time up to now. Passing the boundaries in
        lets the caller count days in its own timezone (DST included) on every database.
        """
        if not days:
            return []
        day_of = _day_of(days)
        session = _calls.c.session_id
        query = (
            select(
                day_of,
                _calls.c.model,
                _calls.c.purpose,
                session,
                *_counts(),
                func.count(_calls.c.error),
            )
            .where(_calls.c.created_at >= days[0][1])
            # By the label: PostgreSQL would see the CASE's parameters twice and refuse it.
            .group_by("day", _calls.c.model, _calls.c.purpose, session)
            .order_by(day_of, _calls.c.model, _calls.c.purpose, session)
        )
        async with self._engine.connect() as connection:
            rows: list[Any] = list(await connection.execute(query))
        return [
            UsageGroup(date.fromisoformat(row[0]), row[1], row[2], row[3], *map(int, row[4:]))
            for row in rows
        ]

    async def usage_by_model_since(self, start: datetime) -> list[ModelUsage]:
        """Tokens per model of the calls made from `start` on (the month's cost so far)."""
        query = (
            select(_calls.c.model, *_counts())
            .where(_calls.c.created_at >= start)
            .group_by(_calls.c.model)
            .order_by(_calls.c.model)
        )
        async with self._engine.connect() as connection:
            rows: list[Any] = list(await connection.execute(query))
        return [ModelUsage(row[0], *map(int, row[1:])) for row in rows]
