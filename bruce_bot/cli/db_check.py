"""`bruce db check`: rows a crash, a bug or a hand edit left in a state Bruce cannot use.

The daemon repairs or skips such rows on its own at start-up (with a log line naming the id); this
report lets the owner see them before starting, or after a log line said something was set
aside. It reads only: messages and task runs with a status nothing knows, tasks whose schedule
cannot be read or whose scheduler job is gone, runs left open for longer than the grace period,
messages left in a turn by a process that is not running, and conversations still held by the
lease of a process that stopped renewing it (PostgreSQL with several processes). The schema is
brought up to date first, so the rows are read as this version of Bruce reads them; exit status
1 when something needs a look.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import get_args

from sqlalchemy import inspect, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from bruce_bot.cli.common import load
from bruce_bot.config import Config
from bruce_bot.domain import MessageStatus, utcnow
from bruce_bot.scheduler.service import JOBSTORE_TABLE, job_id
from bruce_bot.scheduler.timing import ScheduleError, cron_trigger, zone_of
from bruce_bot.storage.database import upgrade_schema
from bruce_bot.storage.models import (
    Base,
    MessageRow,
    ProactiveTaskRow,
    SessionLeaseRow,
    TaskRunRow,
    table_of,
)
from bruce_bot.storage.tasks import OPEN_RUN_STATUSES, RunStatus, TaskStatus

MESSAGE_STATUSES: frozenset[str] = frozenset(get_args(MessageStatus))
TASK_STATUSES: frozenset[str] = frozenset(get_args(TaskStatus))
RUN_STATUSES: frozenset[str] = frozenset(get_args(RunStatus))


@dataclass(frozen=True, slots=True)
class Problem:
    table: str
    row_id: int
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.table} #{self.row_id}: {self.what} — {self.fix}"


def run(args: argparse.Namespace) -> int:
    config = load(args.config)
    asyncio.run(upgrade_schema(config.database_url))
    problems = asyncio.run(find_problems(config))
    where = config.database_url.split("@")[-1]
    if not problems:
        print(f"no problems found in {where}")
        return 0
    print(f"{len(problems)} row(s) need a look in {where}:")
    for problem in problems:
        print(f"  {problem}")
    return 1


async def find_problems(config: Config) -> list[Problem]:
    engine = create_async_engine(config.database_url)
    try:
        async with engine.connect() as connection:
            problems = await _statuses(connection)
            problems += await _tasks(connection)
            problems += await _open_runs(connection, config.scheduler.misfire_grace_seconds)
            problems += await _lapsed_leases(connection)
        return problems
    finally:
        await engine.dispose()


async def _statuses(connection: AsyncConnection) -> list[Problem]:
    problems: list[Problem] = []
    checks: tuple[tuple[type[Base], frozenset[str], str], ...] = (
        (MessageRow, MESSAGE_STATUSES, "start Bruce: it skips the message (nothing answers it)"),
        (ProactiveTaskRow, TASK_STATUSES, "cancel it in the dashboard (Schedules)"),
        (TaskRunRow, RUN_STATUSES, "start Bruce: it closes the run"),
    )
    for model, known, fix in checks:
        table = table_of(model)
        rows = await connection.execute(
            select(table.c.id, table.c.status).where(table.c.status.not_in(sorted(known)))
        )
        problems += [
            Problem(table.name, row.id, f"unknown status {row.status!r}", fix) for row in rows
        ]
    messages = table_of(MessageRow)
    pending = await connection.execute(
        select(messages.c.id).where(messages.c.status == "processing")
    )
    problems += [
        Problem(
            "messages",
            row.id,
            "left in a turn (status 'processing'); fine while Bruce runs",
            "start Bruce: it answers the message again",
        )
        for row in pending
    ]
    return problems


async def _tasks(connection: AsyncConnection) -> list[Problem]:
    table = table_of(ProactiveTaskRow)
    rows = (
        await connection.execute(
            select(table.c.id, table.c.cron, table.c.timezone).where(table.c.status == "active")
        )
    ).all()
    jobs = await _job_ids(connection)
    problems: list[Problem] = []
    for row in rows:
        try:
            zone = zone_of(row.timezone)
            if row.cron:
                cron_trigger(row.cron, zone)
        except (ScheduleError, ValueError) as exc:
            problems.append(
                Problem("proactive_tasks", row.id, f"schedule unreadable ({exc})", "cancel it")
            )
            continue
        if jobs is not None and job_id(row.id) not in jobs:
            problems.append(
                Problem(
                    "proactive_tasks",
                    row.id,
                    "active but its scheduler job is missing",
                    "start Bruce: it recreates the job at start-up",
                )
            )
    return problems


async def _job_ids(connection: AsyncConnection) -> set[str] | None:
    def has_table(sync: object) -> bool:
        return bool(inspect(sync).has_table(JOBSTORE_TABLE))

    has: Callable[[object], bool] = has_table
    if not await connection.run_sync(has):
        return None
    rows = await connection.execute(text(f"SELECT id FROM {JOBSTORE_TABLE}"))
    return {str(row[0]) for row in rows}


async def _open_runs(connection: AsyncConnection, grace_seconds: int) -> list[Problem]:
    table = table_of(TaskRunRow)
    cutoff = utcnow() - timedelta(seconds=max(grace_seconds, 3600))
    rows = await connection.execute(
        select(table.c.id, table.c.status).where(
            table.c.status.in_(OPEN_RUN_STATUSES), table.c.scheduled_for < cutoff
        )
    )
    return [
        Problem(
            "task_runs",
            row.id,
            f"still {row.status!r} long after it was due",
            "start Bruce: it finishes or closes the run",
        )
        for row in rows
    ]


async def _lapsed_leases(connection: AsyncConnection) -> list[Problem]:
    leases, messages = table_of(SessionLeaseRow), table_of(MessageRow)
    waiting = (
        select(messages.c.id)
        .where(
            messages.c.session_id == leases.c.session_id,
            messages.c.role == "user",
            messages.c.status.in_(("pending", "processing")),
        )
        .exists()
    )
    rows = await connection.execute(
        select(leases.c.session_id, leases.c.owner, leases.c.expires_at).where(
            leases.c.expires_at < utcnow(), waiting
        )
    )
    return [
        Problem(
            "session_leases",
            row.session_id,
            f"conversation with unanswered messages held by {row.owner}, which stopped "
            f"renewing its lease at {row.expires_at:%Y-%m-%d %H:%M:%S} UTC (it is not running)",
            "start Bruce (or wait for a running process): it takes the conversation over",
        )
        for row in rows
    ]
