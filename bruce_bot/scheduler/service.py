"""The task service: create, list and cancel proactive tasks, and fire them when due.

`proactive_tasks` rows are the source of truth; APScheduler (a `SQLAlchemyJobStore` on the same
database) only decides when `jobs.fire_task(task_id)` runs. The job store is synchronous, so the
scheduler runs in its own thread and every call to it from the event loop goes through a worker
thread: a blocking SQLite write on the event loop would wait for the write lock that one of
Bruce's own async transactions holds while it waits for the event loop — a deadlock that ends,
after SQLite's timeout, in "database is locked" and a scheduler that no longer wakes up.
Firing claims a row in the `task_runs` ledger first, so a firing is delivered at most once.
Message mode sends the stored text through the outbox (no LLM); agent mode puts the instruction
into the session's inbox as a task, so it never overlaps a live turn. At start-up `reconcile`
recreates missing jobs, removes orphans, delivers what came due while Bruce was down (late, within
`scheduler.misfire_grace_seconds`) and tells the user once about what is older than that; a
firing that comes that late while Bruce runs (a machine suspended for days) is treated the same.
On PostgreSQL, several processes may share the job store: only the elected leader
(`leader.SchedulerLeadership`) reconciles and runs its scheduler; the others keep theirs paused,
which still lets them add and remove jobs, and tell the leader when they added one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import structlog
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger

from bruce_bot.config import SchedulerConfig
from bruce_bot.domain import InboundMessage, OutboundMessage, utcnow
from bruce_bot.inbox import Inbox
from bruce_bot.outbox import Outbox
from bruce_bot.scheduler import jobs
from bruce_bot.scheduler.leader import SchedulerLeadership
from bruce_bot.scheduler.timing import (
    ScheduleError,
    cron_trigger,
    describe_gap,
    describe_time,
    next_cron_time,
    parse_run_at,
    shortest_cron_gap,
    zone_of,
)
from bruce_bot.storage.database import SQLITE_BUSY_TIMEOUT_MS
from bruce_bot.storage.stores import Stores
from bruce_bot.storage.tasks import TaskRecord

log = structlog.get_logger(__name__)

LATE_AFTER_SECONDS = 60.0  # a firing later than this says so ("late: was due at 09:00")
JOBSTORE_TABLE = "apscheduler_jobs"
# A task set up after the turn read untrusted content: stored, but it fires only once the user
# confirms it.
UNCONFIRMED = "unconfirmed"


def describe_lateness(scheduled_for: datetime, now: datetime, zone: ZoneInfo) -> str:
    """ " (late: was due at 09:00)", with the day too when it was not today."""
    due, today = scheduled_for.astimezone(zone), now.astimezone(zone)
    day = "" if due.date() == today.date() else f" on {due:%a %d %b}"
    return f" (late: was due at {due:%H:%M}{day})"


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
            return super()._process_jobs()  # type: ignore[no-any-return]
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


class TaskService:
    def __init__(
        self,
        stores: Stores,
        inbox: Inbox,
        outbox: Outbox,
        scheduler: BackgroundScheduler,
        *,
        app_zone: ZoneInfo,
        rules: SchedulerConfig,
        channels: Collection[str] | None = None,
        leadership: SchedulerLeadership | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        # The channels this process can deliver to (None: all). `bruce chat` has only the
        # console: a Telegram reminder due meanwhile is left for the daemon, not failed.
        self._channels = frozenset(channels) if channels is not None else None
        self._stores = stores
        self._inbox = inbox
        self._outbox = outbox
        self._scheduler = scheduler
        # None: this process is the only scheduler (SQLite: the instance lock sees to that).
        self._leadership = leadership
        self._zone = app_zone
        self._grace = timedelta(seconds=rules.misfire_grace_seconds)
        self._rules = rules
        self._creating = asyncio.Lock()
        self._clock = clock
        self._firing: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    # ---- life cycle ------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this process runs the scheduler (always, without a leader election)."""
        return self._leadership is None or self._leadership.is_leader

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        jobs.bind(self)
        await asyncio.to_thread(self._scheduler.start, paused=True)  # creates the job table
        if self._leadership is None:
            await self._lead()
        else:
            await self._leadership.start(self._lead, self._step_down, self._scheduler.wakeup)

    async def _lead(self) -> None:
        await self.reconcile()
        if not self._stopping:
            self._scheduler.resume()

    def _step_down(self) -> None:
        if self._scheduler.running:
            self._scheduler.pause()
        log.info("scheduler_paused", reason="not the leader any more")

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop firing; deliveries already under way get `grace_seconds` to finish. A firing
        handed over after this point is left for the next start (the task is still due)."""
        self._stopping = True
        if self._scheduler.running:
            self._scheduler.pause()
        if self._firing:
            await asyncio.wait(set(self._firing), timeout=grace_seconds)
        if self._scheduler.running:
            await asyncio.to_thread(self._scheduler.shutdown, wait=False)
        if self._leadership is not None:
            await self._leadership.stop()  # only now: the next leader must not overlap with us
        jobs.unbind(self)

    # ---- the tools' side ------------------------------------------------------------------

    async def create(
        self,
        *,
        session_id: int,
        channel: str,
        chat_id: str,
        title: str,
        mode: str,
        content: str,
        run_at: str | None,
        cron: str | None,
        timezone: str | None,
        confirmed: bool = True,
    ) -> TaskRecord:
        """A new task; an unconfirmed one is stored but does not fire until `confirm`."""
        if bool(run_at) == bool(cron):
            raise ScheduleError(
                "give exactly one of run_at (a one-shot time) or cron (a recurring schedule)"
            )
        zone = zone_of(timezone) if timezone else self._zone
        now = self._clock()
        if run_at:
            first = parse_run_at(run_at, zone, now)
        else:
            assert cron is not None
            first = next_cron_time(cron, zone, now)
            if first is None:
                raise ScheduleError(f"cron '{cron}' never fires")
            if mode == "agent":
                self._check_interval(cron, zone, now)
        async with self._creating:  # the count and the insert as one step: calls run at once
            await self._check_room(session_id)
            task = await self._stores.tasks.create(
                session_id=session_id,
                channel=channel,
                chat_id=chat_id,
                title=title.strip()[:200],
                mode=mode,
                content=content,
                run_at=first if run_at else None,
                cron=cron,
                timezone=zone.key,
                next_run_at=first,
                status="active" if confirmed else UNCONFIRMED,
            )
        if confirmed:
            await self._schedule(task, first)
        log.info(
            "task_created",
            task_id=task.id,
            mode=mode,
            next_run_at=first.isoformat(),
            confirmed=confirmed,
        )
        return task

    def _check_interval(self, cron: str, zone: ZoneInfo, now: datetime) -> None:
        least = timedelta(minutes=self._rules.min_agent_interval_minutes)
        gap = shortest_cron_gap(cron, zone, now)
        if gap is not None and gap < least:
            raise ScheduleError(
                f"cron '{cron}' would run a briefing every {describe_gap(gap)}; an agent-mode "
                f"task may run at most every {describe_gap(least)} "
                "(scheduler.min_agent_interval_minutes). Choose a sparser schedule, or use "
                "execution_mode 'message' for a plain reminder."
            )

    async def _check_room(self, session_id: int) -> None:
        most = self._rules.max_active_tasks_per_chat
        if await self._stores.tasks.count_open(session_id) >= most:
            raise ScheduleError(
                f"this chat already has {most} active tasks, the most allowed "
                "(scheduler.max_active_tasks_per_chat). Cancel one with proactive_cancel first."
            )

    async def unconfirmed(self, session_id: int) -> list[TaskRecord]:
        return await self._stores.tasks.with_status(UNCONFIRMED, session_id)

    async def confirm(self, task_id: int, session_id: int) -> TaskRecord | None:
        """Activate an unconfirmed task of the session; None when there is none such."""
        task = await self._stores.tasks.get(task_id)
        if task is None or task.session_id != session_id or task.status != UNCONFIRMED:
            return None
        now = self._clock()
        due = task.next_run_at
        if task.cron:
            due = next_cron_time(task.cron, zone_of(task.timezone), now)
        await self._stores.tasks.update(task.id, status="active", next_run_at=due)
        task = await self._refreshed(task)
        if due is not None and due > now:
            await self._schedule(task, due)
        elif due is not None:
            self._fire_soon(task.id)  # it came due while it waited for the user
        log.info("task_confirmed", task_id=task.id)
        return task

    async def discard(self, task_id: int, session_id: int) -> TaskRecord | None:
        """Delete an unconfirmed task the user refused: nothing of it is left behind."""
        task = await self._stores.tasks.get(task_id)
        if task is None or task.session_id != session_id or task.status != UNCONFIRMED:
            return None
        await self._stores.tasks.delete(task.id)
        log.info("task_refused", task_id=task.id)
        return task

    async def list_active(self, session_id: int) -> list[TaskRecord]:
        """The session's active tasks, and those waiting for the user's confirmation."""
        active = await self._stores.tasks.active(session_id)
        return active + await self.unconfirmed(session_id)

    async def cancel(self, task_id: int, session_id: int) -> TaskRecord:
        task = await self._stores.tasks.get(task_id)
        open_statuses = ("active", "paused", UNCONFIRMED)
        if task is None or task.session_id != session_id or task.status not in open_statuses:
            raise ScheduleError(
                f"there is no active task {task_id} in this conversation; "
                "call proactive_list to see the task ids"
            )
        await self._stores.tasks.update(task_id, status="cancelled", next_run_at=None)
        await self._unschedule(task_id)
        log.info("task_cancelled", task_id=task_id)
        return task

    def describe_next_run(self, task: TaskRecord) -> str:
        """The next run in the task's timezone and, when that is not the user's, in theirs."""
        if task.next_run_at is None:
            return "not scheduled"
        zone = zone_of(task.timezone)
        when = describe_time(task.next_run_at, zone)
        if zone.key != self._zone.key:
            when += f", which is {describe_time(task.next_run_at, self._zone)} for the user"
        return when

    def describe(self, task: TaskRecord) -> str:
        when = self.describe_next_run(task)
        schedule = f"cron '{task.cron}'" if task.cron else "once"
        waiting = " (waiting for the user's confirmation)" if task.status == UNCONFIRMED else ""
        return f"#{task.id} {task.title} — {task.mode} mode, {schedule}, next run {when}{waiting}"

    async def describe_session(self, session_id: int) -> str:
        tasks = await self.list_active(session_id)
        if not tasks:
            return "You have no active reminders or scheduled briefings."
        return "Your active tasks:\n" + "\n".join(f"• {self.describe(t)}" for t in tasks)

    # ---- APScheduler jobs ----------------------------------------------------------------------

    def _trigger(self, task: TaskRecord, first: datetime) -> BaseTrigger:
        zone = zone_of(task.timezone)
        if task.cron:
            return cron_trigger(task.cron, zone)
        return DateTrigger(run_date=first, timezone=zone)

    async def _schedule(self, task: TaskRecord, next_run: datetime) -> None:
        trigger = self._trigger(task, next_run)
        await asyncio.to_thread(
            self._scheduler.add_job,
            jobs.fire_task,
            trigger=trigger,
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

    async def _unschedule(self, task_id: int) -> None:
        await asyncio.to_thread(self._remove_job, job_id(task_id))

    def _remove_job(self, job: str) -> None:
        try:
            self._scheduler.remove_job(job)
        except JobLookupError:
            pass

    # ---- firing -------------------------------------------------------------------------------

    def fire_threadsafe(self, task_id: int) -> None:
        """Called by `jobs.fire_task` in APScheduler's worker thread: fire on the event loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            log.warning("task_fire_dropped", task_id=task_id, reason="event loop gone")
            return
        try:
            loop.call_soon_threadsafe(self._fire_soon, task_id)
        except RuntimeError:  # the loop closed in between
            log.warning("task_fire_dropped", task_id=task_id, reason="event loop closed")

    async def fire(self, task_id: int) -> None:
        """Fire a task now and wait until it is delivered (or skipped). The work runs in a task
        of our own, shielded, so that a cancelled caller cannot cut a delivery in half."""
        firing = self._fire_soon(task_id)
        if firing is not None:
            await asyncio.shield(firing)

    async def _fire(self, task_id: int) -> None:
        """Deliver one due firing of a task, at most once per (task, scheduled time)."""
        task = await self._stores.tasks.get(task_id)
        if task is None or task.status != "active" or task.next_run_at is None:
            log.info("task_fire_skipped", task_id=task_id, status=task.status if task else None)
            return
        if not self._can_deliver(task):
            log.info("task_fire_deferred", task_id=task_id, reason=f"channel {task.channel} off")
            return
        scheduled_for = task.next_run_at
        now = self._clock()
        late = max(0.0, (now - scheduled_for).total_seconds())
        if late > max(self._grace.total_seconds(), LATE_AFTER_SECONDS):
            await self._missed(task, now)  # e.g. the machine was suspended for days
            return
        run_id = await self._stores.tasks.start_run(task.id, scheduled_for, late)
        if run_id is None:
            log.info(
                "task_fire_duplicate", task_id=task.id, scheduled_for=scheduled_for.isoformat()
            )
            return
        await self._advance(task, after=max(now, scheduled_for))
        zone = zone_of(task.timezone)
        late_note = describe_lateness(scheduled_for, now, zone) if late > LATE_AFTER_SECONDS else ""
        log.info("task_fired", task_id=task.id, mode=task.mode, late_seconds=round(late, 3))
        if task.mode == "message":
            await self._send_reminder(task, run_id, f"⏰ {task.content}{late_note}")
        else:
            await self._submit_briefing(task, run_id, scheduled_for, late_note)

    async def _advance(self, task: TaskRecord, after: datetime) -> None:
        if task.cron:
            following = next_cron_time(task.cron, zone_of(task.timezone), after)
            await self._stores.tasks.update(task.id, next_run_at=following)
            # The job fires at the time the row says: after a catch-up fired by `reconcile`
            # (which removed the job), or after the scheduler's own firing (same time, no-op).
            if following is not None:
                await self._schedule(task, following)
            else:
                await self._unschedule(task.id)
        else:
            await self._stores.tasks.update(task.id, status="done", next_run_at=None)

    async def _send_reminder(self, task: TaskRecord, run_id: int, text: str) -> None:
        message_id = await self._stores.messages.add_outbound(task.session_id, text, "reminder")
        status = await self._outbox.deliver(
            OutboundMessage(task.channel, task.chat_id, text, message_id, "reminder")
        )
        if status == "sent":
            await self._stores.tasks.finish_run(run_id, "delivered")
            return
        error = f"delivery {status}"
        await self._stores.tasks.finish_run(run_id, "failed", error)
        if status == "failed":  # permanent: the chat is gone or blocks the bot
            await self._pause(task, "the chat refused the message (deleted, or the bot is blocked)")

    async def _pause(self, task: TaskRecord, reason: str) -> None:
        await self._stores.tasks.update(task.id, status="paused")
        await self._unschedule(task.id)
        log.warning(
            "task_paused",
            task_id=task.id,
            channel=task.channel,
            chat_id=task.chat_id,
            reason=reason,
        )

    async def _submit_briefing(
        self, task: TaskRecord, run_id: int, scheduled_for: datetime, late_note: str
    ) -> None:
        message = InboundMessage(
            task.channel,
            task.chat_id,
            task.content,
            user_id="scheduler",
            user_name="scheduler",
            platform_message_id=f"task:{task.id}:{scheduled_for.isoformat()}",
            kind="task",
            metadata={"title": task.title + late_note, "task_run_id": run_id},
        )
        submission = await self._inbox.submit(message)
        if not submission.accepted:
            await self._stores.tasks.finish_run(
                run_id, "failed", f"inbox refused: {submission.reason}"
            )

    async def briefing_finished(self, run_id: int, delivered: bool, error: str | None) -> None:
        """Called by the turn runner when an agent-mode task's turn is over."""
        await self._stores.tasks.finish_run(run_id, "delivered" if delivered else "failed", error)

    # ---- start-up reconciliation ------------------------------------------------------------

    async def reconcile(self) -> None:
        now = self._clock()
        tasks = await self._stores.tasks.active()
        wanted = {job_id(task.id) for task in tasks}
        # Loading the jobs also drops rows that cannot be unpickled (logged by APScheduler).
        for job in await asyncio.to_thread(self._scheduler.get_jobs):
            if job.id not in wanted:
                log.info("orphan_job_removed", job_id=job.id)
                await asyncio.to_thread(self._remove_job, job.id)
        for task in tasks:
            due = task.next_run_at
            if due is None or (due <= now and not self._can_deliver(task)):
                continue  # due for a channel this process lacks: the daemon will deliver it
            if due > now:
                await self._schedule(task, due)
            elif now - due <= self._grace:
                await self._unschedule(task.id)  # fired below, once, not also by APScheduler
                self._fire_soon(task.id)
            else:
                await self._missed(task, now)

    def _can_deliver(self, task: TaskRecord) -> bool:
        return self._channels is None or task.channel in self._channels

    def _fire_soon(self, task_id: int) -> asyncio.Task[None] | None:
        if self._stopping:
            log.info("task_fire_deferred", task_id=task_id, reason="stopping")
            return None
        firing = asyncio.create_task(self._fire(task_id), name=f"fire-task-{task_id}")
        self._firing.add(firing)
        firing.add_done_callback(self._firing.discard)
        return firing

    async def _missed(self, task: TaskRecord, now: datetime) -> None:
        """A firing older than the grace period: recorded as missed, the user told once."""
        assert task.next_run_at is not None
        scheduled_for = task.next_run_at
        run_id = await self._stores.tasks.start_run(
            task.id, scheduled_for, (now - scheduled_for).total_seconds()
        )
        if run_id is not None:
            await self._stores.tasks.finish_run(run_id, "missed", "Bruce was not running")
        zone = zone_of(task.timezone)
        when = f"{scheduled_for.astimezone(zone):%Y-%m-%d %H:%M}"
        if task.cron:
            following = next_cron_time(task.cron, zone, now)
            await self._stores.tasks.update(task.id, next_run_at=following)
            if following is not None:
                await self._schedule(await self._refreshed(task), following)
            log.warning("task_run_missed", task_id=task.id, scheduled_for=scheduled_for.isoformat())
            return
        await self._stores.tasks.update(task.id, status="missed", next_run_at=None)
        await self._unschedule(task.id)  # else the scheduler, on its own clock, might still fire it
        if run_id is not None:  # tell the user once
            text = (
                f'⏰ I missed a reminder while I was offline: "{task.title}" was due at {when} '
                f"({task.timezone}). {task.content}"
            )
            message_id = await self._stores.messages.add_outbound(task.session_id, text, "reminder")
            await self._outbox.deliver(
                OutboundMessage(task.channel, task.chat_id, text, message_id, "reminder")
            )
        log.warning("task_missed", task_id=task.id, scheduled_for=scheduled_for.isoformat())

    async def _refreshed(self, task: TaskRecord) -> TaskRecord:
        return await self._stores.tasks.get(task.id) or task
