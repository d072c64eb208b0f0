"""Scheduler leadership on PostgreSQL: only the process holding an advisory lock runs APScheduler.

APScheduler 3 must have one scheduler per job store (docs/design.md). On SQLite the instance lock
file makes the daemon the only one. On PostgreSQL several processes, maybe on several machines,
share the database, so they elect a leader: the process that holds a session-level advisory lock,
on a connection of its own kept open for as long as it leads. The others run everything else and try
again every `retry_seconds`; PostgreSQL frees the lock when the leader stops or its connection
dies, and the next try takes over. The leader checks its connection as often and steps down when
it is gone (another process may lead by then).

The leader's connection also listens for a notification that followers send when they add a job
to the shared job store, so that the leader's scheduler wakes up for it at once rather than at its
next check.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from sqlalchemy import pool, text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

log = structlog.get_logger(__name__)

# Advisory locks belong to one database: Bruces on other databases of the server do not compete.
LEADER_LOCK_KEY = int.from_bytes(b"Bruce-SC", "big")
JOBS_CHANGED_CHANNEL = "bruce_scheduler_jobs"
RETRY_SECONDS = 15.0
# The longest a stop waits for each step of giving the leadership up.
STOP_TIMEOUT_SECONDS = 5.0


class SchedulerLeadership:
    """Takes part in the election; `TaskService` says what to do on winning and on losing."""

    def __init__(self, database_url: str, *, retry_seconds: float = RETRY_SECONDS) -> None:
        self._engine = create_async_engine(database_url, poolclass=pool.NullPool)
        self._retry_seconds = retry_seconds
        self._connection: AsyncConnection | None = None  # holds the lock while we lead
        self._watch_task: asyncio.Task[None] | None = None
        self._on_elected: Callable[[], Awaitable[None]] | None = None
        self._on_deposed: Callable[[], None] | None = None
        self._on_jobs_changed: Callable[[], None] | None = None

    @property
    def is_leader(self) -> bool:
        return self._connection is not None

    async def start(
        self,
        on_elected: Callable[[], Awaitable[None]],
        on_deposed: Callable[[], None],
        on_jobs_changed: Callable[[], None],
    ) -> None:
        """Try to lead now (awaiting `on_elected` if this process wins), then keep trying, or
        keep checking the lock, every `retry_seconds` in the background."""
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._on_jobs_changed = on_jobs_changed
        await self._round()
        self._watch_task = asyncio.create_task(self._watch(), name="scheduler-leadership")

    async def stop(self) -> None:
        """Stop taking part; a leader releases the lock (call it once its scheduler stopped)."""
        if self._watch_task is not None:
            self._watch_task.cancel()
            # Bounded: a round cancelled inside the driver (a connect, a listener) must not
            # hold up the stop; the lock goes with the connection anyway.
            await asyncio.wait({self._watch_task}, timeout=STOP_TIMEOUT_SECONDS)
            self._watch_task = None
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._connection.execute(
                        text("SELECT pg_advisory_unlock(:key)"), {"key": LEADER_LOCK_KEY}
                    ),
                    STOP_TIMEOUT_SECONDS,
                )
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._close(), STOP_TIMEOUT_SECONDS)
            log.info("scheduler_leadership_released")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._engine.dispose(), STOP_TIMEOUT_SECONDS)

    async def announce_jobs_changed(self) -> None:
        """Tell the leader that this process added a job to the shared job store."""
        async with self._engine.connect() as connection:
            await connection.execute(
                text("SELECT pg_notify(:channel, '')"), {"channel": JOBS_CHANGED_CHANNEL}
            )
            await connection.commit()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._retry_seconds)
            await self._round()

    async def _round(self) -> None:
        try:
            if self._connection is None:
                await self._try_to_lead()
            else:
                await self._check()
        except Exception as exc:  # the database is away: try again next round
            log.warning("scheduler_leadership_round_failed", error=repr(exc))

    async def _try_to_lead(self) -> None:
        connection = await self._engine.connect()
        try:
            # Autocommit: the lock is the session's; no transaction stays open while we lead.
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            won = (
                await connection.execute(
                    text("SELECT pg_try_advisory_lock(:key)"), {"key": LEADER_LOCK_KEY}
                )
            ).scalar()
            if won:
                raw = await connection.get_raw_connection()
                driver: Any = raw.driver_connection  # asyncpg's connection, which has no types
                await driver.add_listener(JOBS_CHANGED_CHANNEL, self._notified)
        except BaseException:
            await connection.close()
            raise
        if not won:
            await connection.close()
            return
        self._connection = connection
        log.info("scheduler_leader_elected")
        assert self._on_elected is not None
        try:
            await self._on_elected()
        except Exception:
            log.exception("scheduler_leader_start_failed")
            self._step_down()
            await self._close()  # frees the lock for another process; we retry later

    async def _check(self) -> None:
        assert self._connection is not None and self._on_jobs_changed is not None
        try:
            await asyncio.wait_for(
                self._connection.execute(text("SELECT 1")), timeout=self._retry_seconds
            )
        except Exception as exc:  # includes the timeout of a connection that went silent
            log.warning("scheduler_leadership_lost", error=repr(exc))
            self._step_down()
            await self._close(lost=True)
            return
        self._on_jobs_changed()  # in case a follower's notification was lost

    def _step_down(self) -> None:
        assert self._on_deposed is not None
        self._on_deposed()

    def _notified(self, *_: Any) -> None:
        if self._on_jobs_changed is not None:
            self._on_jobs_changed()

    async def _close(self, lost: bool = False) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        with contextlib.suppress(Exception):
            if lost:
                await connection.invalidate()  # drops the socket without talking to the server
            await connection.close()
