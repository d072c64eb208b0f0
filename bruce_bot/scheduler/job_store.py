"""APScheduler and its job store: the jobs that say when `jobs.fire_task(task_id)` runs.

The job store (a `SQLAlchemyJobStore` on Bruce's own database) is synchronous, so the scheduler
runs in its own thread and every call to it from the event loop goes through a worker thread: a
blocking SQLite write on the event loop would wait for the write lock that one of Bruce's own
async transactions holds while it waits for the event loop — a deadlock that ends, after
SQLite's timeout, in "database is locked" and a scheduler that no longer wakes up. `TaskJobs`
keeps one job per task that can fire, following its row; on PostgreSQL a process that does not
lead the scheduler still adds and removes jobs (its scheduler stays paused) and tells the leader.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import structlog
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger
from sqlalchemy.exc import SQLAlchemyError

from bruce_bot.scheduler import jobs
from bruce_bot.scheduler.leader import SchedulerLeadership
from bruce_bot.scheduler.timing import cron_trigger, zone_of
from bruce_bot.storage.database import SQLITE_BUSY_TIMEOUT_MS
from bruce_bot.storage.tasks import TaskRecord

log = structlog.get_logger(__name__)

JOB_TABLE_ATTEMPTS = 5  # tries to start the scheduler while another process creates its table
JOBSTORE_TABLE = "apscheduler_jobs"


def job_id(task_id: int) -> str:
    return f"task-{task_id}"


class TaskScheduler(BackgroundScheduler):
    """APScheduler in its own thread, kept alive when a round of job processing fails.

    A failure in a round (a job store write that met a locked database) would otherwise end the
    thread silently and no task would fire again. The round is retried later; a job whose
    firing was already handed over may be handed over again, and the task_runs ledger makes
    that second firing a no-op.
    """

    def _process_jobs(self) -> float | None:
        try:
            return super()._process_jobs()
        except Exception as exc:
            log.error("scheduler_round_failed", error=repr(exc))
            return float(self.jobstore_retry_interval)


def create_scheduler(
    sync_database_url: str, zone: ZoneInfo, grace_seconds: int
) -> BackgroundScheduler:
    """The scheduler for `TaskService`. `grace_seconds` is deliberately not APScheduler's
    misfire grace time: APScheduler drops a job later than that without a trace (a one-shot is
    then never delivered; with 0, every job is "late" by a few milliseconds). Every due job is
    handed over, and the service applies the grace period itself."""
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

    engine_options: dict[str, Any] = {}
    if sync_database_url.startswith("sqlite"):
        engine_options["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        engine_options["pool_pre_ping"] = True  # a restarted server costs a reconnect
    store = SQLAlchemyJobStore(
        url=sync_database_url, tablename=JOBSTORE_TABLE, engine_options=engine_options
    )
    return TaskScheduler(
        jobstores={"default": store},
        timezone=zone,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
    )


async def start_paused(scheduler: BackgroundScheduler) -> None:
    """Start APScheduler paused; this creates its job table if there is none. Processes
    starting together on a new PostgreSQL database race to create it and the losers' CREATE
    TABLE fails: once the winner's table exists, the next try finds it."""
    for attempt in range(1, JOB_TABLE_ATTEMPTS + 1):
        try:
            await asyncio.to_thread(scheduler.start, paused=True)
            return
        except SQLAlchemyError as exc:
            if attempt == JOB_TABLE_ATTEMPTS:
                raise
            log.warning("scheduler_start_retried", attempt=attempt, error=repr(exc))
            await asyncio.sleep(0.2 * attempt)


def trigger_of(task: TaskRecord, first: datetime) -> BaseTrigger:
    zone = zone_of(task.timezone)
    if task.cron:
        return cron_trigger(task.cron, zone)
    return DateTrigger(run_date=first, timezone=zone)


class TaskJobs:
    """The scheduler's jobs, one per task that can fire, added and removed from the event loop."""

    def __init__(
        self, scheduler: BackgroundScheduler, leadership: SchedulerLeadership | None = None
    ) -> None:
        self._scheduler = scheduler
        # None: this process is the only scheduler (SQLite: the instance lock sees to that).
        self._leadership = leadership

    @property
    def is_leader(self) -> bool:
        """Whether this process runs the scheduler (always, without a leader election)."""
        return self._leadership is None or self._leadership.is_leader

    async def start(self) -> None:
        await start_paused(self._scheduler)

    def resume(self) -> None:
        self._scheduler.resume()

    def pause(self) -> None:
        if self._scheduler.running:
            self._scheduler.pause()

    def wakeup(self) -> None:
        self._scheduler.wakeup()

    async def shutdown(self) -> None:
        if self._scheduler.running:
            await asyncio.to_thread(self._scheduler.shutdown, wait=False)

    async def schedule(self, task: TaskRecord, next_run: datetime) -> None:
        """The task's job, added or replaced, to fire first at `next_run`."""
        await asyncio.to_thread(
            self._scheduler.add_job,
            jobs.fire_task,
            trigger=trigger_of(task, next_run),
            args=[task.id],
            id=job_id(task.id),
            name=task.title,
            replace_existing=True,
            next_run_time=next_run,
        )
        if not self.is_leader:
            assert self._leadership is not None
            try:
                await self._leadership.announce_jobs_changed()
            except Exception as exc:  # the leader finds the job at its next check anyway
                log.warning("scheduler_leader_not_told", task_id=task.id, error=repr(exc))

    async def unschedule(self, task_id: int) -> None:
        await asyncio.to_thread(self._remove, job_id(task_id))

    async def remove_others(self, task_ids: set[int]) -> None:
        """Remove the jobs of every task but these (orphans a crash or a deletion left)."""
        wanted = {job_id(task_id) for task_id in task_ids}
        # Loading the jobs also drops rows that cannot be unpickled (logged by APScheduler).
        for job in await asyncio.to_thread(self._scheduler.get_jobs):
            if job.id not in wanted:
                log.info("orphan_job_removed", job_id=job.id)
                await asyncio.to_thread(self._remove, job.id)

    def _remove(self, job: str) -> None:
        try:
            self._scheduler.remove_job(job)
        except JobLookupError:
            pass
