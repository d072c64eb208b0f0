"""The task service: create, list and cancel proactive tasks, and fire them when due.

`proactive_tasks` rows are the source of truth; APScheduler (a `SQLAlchemyJobStore` on the same
database) only decides when `jobs.fire_task(task_id)` runs. The job store is synchronous, so the
scheduler runs in its own thread and every call to it from the event loop goes through a worker
thread: a blocking SQLite write on the event loop would wait for the write lock that one of
Bruce's own async transactions holds while it waits for the event loop — a deadlock that ends,
after SQLite's timeout, in "database is locked" and a scheduler that no longer wakes up.
Firing claims a row in the `task_runs` ledger, advances the task and stores the firing's message
in one commit, so a firing is delivered at most once and a crash cannot lose it half-way. Message
mode stores the reminder and delivers it through the outbox (no LLM); agent mode stores the
instruction as a task message and queues it in the session's inbox, so it never overlaps a live
turn. A run stays open until its message's fate closes it: `delivered` once the reminder (or the
briefing's answer) is sent, `failed` when that failed for good; an `undelivered` one closes when
the outbox's redelivery gets it out (checked every minute). At start-up `reconcile` finishes the
runs a crash left open, recreates missing jobs, removes orphans, delivers what came due while
Bruce was down (late, within `scheduler.misfire_grace_seconds`) and tells the user once about
what is older than that; a firing that comes that late while Bruce runs (a machine suspended for
days) is treated the same.
On PostgreSQL, several processes may share the job store: only the elected leader
(`leader.SchedulerLeadership`) reconciles and runs its scheduler; the others keep theirs paused,
which still lets them add and remove jobs, and tell the leader when they added one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import structlog
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger
from sqlalchemy.exc import SQLAlchemyError

from bruce_bot.config import SchedulerConfig
from bruce_bot.domain import OutboundMessage, SessionKey, utcnow
from bruce_bot.inbox import Inbox, QueuedMessage
from bruce_bot.outbox import REDELIVERY_INTERVAL_SECONDS, Outbox
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
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.stores import Stores
from bruce_bot.storage.tasks import OPEN_RUN_STATUSES, RUN_KEY, OpenRun, TaskRecord

log = structlog.get_logger(__name__)

JOB_TABLE_ATTEMPTS = 5  # tries to start the scheduler while another process creates its table
LATE_AFTER_SECONDS = 60.0  # a firing later than this says so ("late: was due at 09:00")
# How often runs left `undelivered` are checked against their messages (after redelivery).
SETTLE_INTERVAL_SECONDS = REDELIVERY_INTERVAL_SECONDS
JOBSTORE_TABLE = "apscheduler_jobs"
MODES = ("message", "agent")
REFUSED = "the chat refused the message (deleted, or the bot is blocked)"
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
        self._settling: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._recovered = False  # whether the runs a crash left open were looked at

    # ---- life cycle ------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this process runs the scheduler (always, without a leader election)."""
        return self._leadership is None or self._leadership.is_leader

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        jobs.bind(self)
        await start_paused(self._scheduler)
        self._settling = asyncio.create_task(self._settle_periodically(), name="task-runs-settle")
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
        if self._settling is not None:
            self._settling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._settling
            self._settling = None
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
        origin: str | None = None,
    ) -> TaskRecord:
        """A new task; an unconfirmed one is stored but does not fire until `confirm`.

        With `origin` (the tool call that asks), the same call made again — a turn resumed after
        a crash — returns the task it created the first time instead of a second one.
        """
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
            if origin and (made := await self._stores.tasks.by_origin(session_id, origin)):
                log.info("task_create_repeated", task_id=made.id, origin=origin)
                return made
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
                origin=origin,
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

    async def _fire(self, task_id: int, scheduled_for: datetime | None = None) -> None:
        """Deliver one due firing of a task, at most once per (task, scheduled time).

        Without `scheduled_for`: the firing the task waits for (its next run). With it: a firing
        that a crash cut before its message was stored, fired once more from `reconcile`. A
        failure is logged with the task id and ends this firing only.
        """
        try:
            await self._fire_due(task_id, scheduled_for)
        except Exception as exc:
            log.exception("task_fire_failed", task_id=task_id, error=repr(exc))

    async def _fire_due(self, task_id: int, scheduled_for: datetime | None) -> None:
        task = await self._stores.tasks.get(task_id)
        # A one-shot cut by a crash is `done` already; it still owes its firing.
        firable = ("active", "done") if scheduled_for is not None else ("active",)
        due = scheduled_for or (task.next_run_at if task is not None else None)
        if task is None or task.status not in firable or due is None:
            log.info("task_fire_skipped", task_id=task_id, status=task.status if task else None)
            return
        if task.mode not in MODES or (task.mode == "agent" and not task.content.strip()):
            await self._set_aside(task, f"mode {task.mode!r} with this content cannot fire")
            return
        if not self._can_deliver(task):
            log.info("task_fire_deferred", task_id=task_id, reason=f"channel {task.channel} off")
            return
        advance = task.status == "active" and task.next_run_at == due
        now = self._clock()
        late = max(0.0, (now - due).total_seconds())
        if late > max(self._grace.total_seconds(), LATE_AFTER_SECONDS):
            await self._missed(task, due, now, advance)  # e.g. the machine was suspended for days
            return
        zone = zone_of(task.timezone)
        following = next_cron_time(task.cron, zone, max(now, due)) if task.cron else None
        late_note = describe_lateness(due, now, zone) if late > LATE_AFTER_SECONDS else ""
        session: SessionRecord | None = None
        if task.mode == "message":
            text = f"⏰ {task.content}{late_note}"
            message = _outbound_row(task.session_id, text)
        else:
            text = task.content
            session = await self._stores.sessions.get_or_create(
                SessionKey(task.channel, task.chat_id)
            )
            metadata = {"title": task.title + late_note}
            message = _task_message_row(session.id, task, due, metadata)
        # Claim, advance and message in one commit: a crash leaves all of them or none.
        firing = await self._stores.tasks.fire(
            task.id,
            due,
            late,
            message=message,
            task_values=_advanced(task, following) if advance else None,
        )
        if advance:
            await self._follow(task, following)
        if firing is None:
            log.info("task_fire_duplicate", task_id=task.id, scheduled_for=due.isoformat())
            return
        assert firing.message_id is not None
        log.info(
            "task_fired",
            task_id=task.id,
            run_id=firing.run_id,
            mode=task.mode,
            late_seconds=round(late, 3),
            attempts=firing.attempts,
        )
        if session is None:
            await self._outbox.deliver(
                OutboundMessage(task.channel, task.chat_id, text, firing.message_id, "reminder")
            )
            await self._settle([firing.run_id])
            return
        queued = QueuedMessage(
            firing.message_id, "task", {**metadata, RUN_KEY: firing.run_id}, text
        )
        if not self._inbox.enqueue_stored(session, queued):  # stopping: stored, run next start
            log.info("briefing_left_for_next_start", task_id=task.id, run_id=firing.run_id)

    async def _follow(self, task: TaskRecord, following: datetime | None) -> None:
        """The job store follows the task row: the next cron time, or no job for a one-shot.
        A crash before this is repaired by `reconcile`, which rebuilds jobs from the rows."""
        if task.cron and following is not None:
            # The job fires at the time the row says: after a catch-up fired by `reconcile`
            # (which removed the job), or after the scheduler's own firing (same time, no-op).
            await self._schedule(task, following)
        else:
            await self._unschedule(task.id)

    async def _settle(
        self, run_ids: Sequence[int] | None = None, statuses: Sequence[str] = OPEN_RUN_STATUSES
    ) -> None:
        """Close runs from what became of their messages; a reminder the chat refused for good
        pauses its task."""
        for outcome in await self._stores.tasks.settle_runs(run_ids, statuses):
            log.info(
                "task_run_settled",
                run_id=outcome.run_id,
                task_id=outcome.task_id,
                status=outcome.status,
            )
            if outcome.status != "failed":
                continue
            task = await self._stores.tasks.get(outcome.task_id)
            if task is not None and task.mode == "message" and task.status in ("active", "done"):
                await self._pause(task, REFUSED)

    async def _settle_periodically(self) -> None:
        """Runs left `undelivered` close when the outbox's redelivery gets their message out."""
        while True:
            await asyncio.sleep(SETTLE_INTERVAL_SECONDS)
            try:
                await self._settle(statuses=("undelivered",))
            except Exception as exc:  # tried again next round; never kills the service
                log.warning("task_runs_settle_failed", error=repr(exc))

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

    async def _set_aside(self, task: TaskRecord, reason: str) -> None:
        """A task Bruce cannot fire (a broken schedule or row): paused, with a log line, so
        that it never stops the others or the start-up."""
        log.error("task_set_aside", task_id=task.id, reason=reason)
        await self._stores.tasks.update(task.id, status="paused")
        try:
            await self._unschedule(task.id)
        except Exception as exc:
            log.warning("task_job_not_removed", task_id=task.id, error=repr(exc))

    async def briefing_finished(self, run_id: int, delivered: bool, error: str | None) -> None:
        """Called by the turn runner when an agent-mode task's turn is over. An answer the
        outbox could not deliver yet leaves the run `undelivered`: it closes when the
        redelivery gets it out."""
        if delivered:
            await self._stores.tasks.finish_run(run_id, "delivered")
            return
        if not await self._stores.tasks.settle_runs([run_id], error=error):
            await self._stores.tasks.finish_run(run_id, "failed", error, only_open=True)

    # ---- start-up reconciliation ------------------------------------------------------------

    async def reconcile(self) -> None:
        """Make the job store follow the task rows, finish what a crash left open, fire what
        came due while Bruce was down. A broken row is set aside with a log line naming it."""
        now = self._clock()
        if not self._recovered:
            self._recovered = True  # what a crash left open is looked at once per process
            await self._recover_runs(now)
        tasks = await self._stores.tasks.active()
        wanted = {job_id(task.id) for task in tasks}
        # Loading the jobs also drops rows that cannot be unpickled (logged by APScheduler).
        for job in await asyncio.to_thread(self._scheduler.get_jobs):
            if job.id not in wanted:
                log.info("orphan_job_removed", job_id=job.id)
                await asyncio.to_thread(self._remove_job, job.id)
        for task in tasks:
            try:
                await self._reconcile_task(task, now)
            except Exception as exc:  # a bad cron or timezone in the row
                await self._set_aside(task, f"cannot schedule it: {exc!r}")
        await self._settle()

    async def _reconcile_task(self, task: TaskRecord, now: datetime) -> None:
        due = task.next_run_at
        if due is None or (due <= now and not self._can_deliver(task)):
            return  # due for a channel this process lacks: the daemon will deliver it
        if due > now:
            await self._schedule(task, due)
        elif now - due <= self._grace:
            await self._unschedule(task.id)  # fired below, once, not also by APScheduler
            self._fire_soon(task.id)
        else:
            await self._missed(task, due, now, advance=True)

    async def _recover_runs(self, now: datetime) -> None:
        """Runs a crash left open. Their messages' fates close most of them (`_settle`); a
        briefing whose turn was cut is run again by the inbox's recovery, which its run counts;
        a run without a message (cut before this version stored it with the run) is fired once
        more, or missed when it is too old."""
        for run in await self._stores.tasks.open_runs():
            try:
                await self._recover_run(run, now)
            except Exception as exc:
                log.exception("task_run_recovery_failed", run_id=run.id, error=repr(exc))

    async def _recover_run(self, run: OpenRun, now: datetime) -> None:
        runs = self._stores.tasks
        if not run.task_found:
            log.warning("task_run_orphaned", run_id=run.id, task_id=run.task_id)
            await runs.finish_run(run.id, "failed", "its task no longer exists")
            return
        if run.status not in OPEN_RUN_STATUSES:
            log.warning("task_run_status_unknown", run_id=run.id, status=run.status)
            note = f"status {run.status!r} unknown, repaired at start-up"
            # With a message, its fate closes the run (below); without one, nothing can.
            await runs.finish_run(run.id, "running" if run.message_id else "failed", note)
            if run.message_id is None:
                return
        task = await runs.get(run.task_id)
        assert task is not None
        if run.message_id is None:
            found = await self._unlinked_message(run, task)
            if found is None:
                await self._refire(run, task, now)
                return
            await runs.link_message(run.id, found)
            log.info("task_run_linked", run_id=run.id, message_id=found)
            [run] = await runs.open_runs([run.id])
        if run.message_role == "user" and run.message_status in ("pending", "processing"):
            # The inbox's recovery has queued the cut briefing again.
            await runs.reopen_run(run.id, "run again after a restart")
            log.info("briefing_run_again", run_id=run.id, attempts=run.attempts + 1)
        elif run.message_status == "pending":
            log.info("task_run_left_to_redelivery", run_id=run.id, message_id=run.message_id)

    async def _unlinked_message(self, run: OpenRun, task: TaskRecord) -> int | None:
        """The message a run's firing stored before runs kept their message's id."""
        if task.mode == "agent":
            session = await self._stores.sessions.get_or_create(
                SessionKey(task.channel, task.chat_id)
            )
            return await self._stores.tasks.find_unlinked_message(
                session_id=session.id,
                after=run.created_at,
                platform_message_id=_task_message_key(task, run.scheduled_for),
            )
        return await self._stores.tasks.find_unlinked_message(
            session_id=task.session_id, after=run.created_at, content_prefix=f"⏰ {task.content}"
        )

    async def _refire(self, run: OpenRun, task: TaskRecord, now: datetime) -> None:
        if task.status == "active" and task.next_run_at == run.scheduled_for:
            return  # still due: fired with the due tasks, taking this run over
        if task.status not in ("active", "done"):
            await self._stores.tasks.finish_run(
                run.id, "failed", f"cut by a crash; the task is {task.status} now"
            )
            return
        if task.cron and task.next_run_at is not None and task.next_run_at <= now:
            # A recurring task catches up once: with its due firing, not this older one too.
            await self._stores.tasks.finish_run(run.id, "missed", "cut by a crash; caught up")
            return
        log.warning(
            "task_run_fired_again", run_id=run.id, scheduled_for=run.scheduled_for.isoformat()
        )
        self._fire_soon(task.id, run.scheduled_for)

    def _can_deliver(self, task: TaskRecord) -> bool:
        return self._channels is None or task.channel in self._channels

    def _fire_soon(
        self, task_id: int, scheduled_for: datetime | None = None
    ) -> asyncio.Task[None] | None:
        if self._stopping:
            log.info("task_fire_deferred", task_id=task_id, reason="stopping")
            return None
        firing = asyncio.create_task(
            self._fire(task_id, scheduled_for), name=f"fire-task-{task_id}"
        )
        self._firing.add(firing)
        firing.add_done_callback(self._firing.discard)
        return firing

    async def _missed(
        self, task: TaskRecord, scheduled_for: datetime, now: datetime, advance: bool
    ) -> None:
        """A firing older than the grace period: recorded as missed and, for a one-shot, the
        user told once — the notice is stored in the commit that records the run."""
        zone = zone_of(task.timezone)
        when = f"{scheduled_for.astimezone(zone):%Y-%m-%d %H:%M}"
        following = next_cron_time(task.cron, zone, now) if task.cron else None
        values: dict[str, Any] | None = None
        if advance:
            values = {"next_run_at": following}
            if not task.cron:
                values["status"] = "missed"
        text = (
            f'⏰ I missed a reminder while I was offline: "{task.title}" was due at {when} '
            f"({task.timezone}). {task.content}"
        )
        notice = None if task.cron else _outbound_row(task.session_id, text)
        firing = await self._stores.tasks.fire(
            task.id,
            scheduled_for,
            (now - scheduled_for).total_seconds(),
            message=notice,
            task_values=values,
            status="missed",
            error="Bruce was not running",
        )
        if advance:
            # Else the scheduler, on its own clock, might still fire a missed one-shot.
            await self._follow(task, following)
        if task.cron:
            log.warning("task_run_missed", task_id=task.id, scheduled_for=scheduled_for.isoformat())
            return
        if firing is not None and firing.message_id is not None:  # tell the user once
            await self._outbox.deliver(
                OutboundMessage(task.channel, task.chat_id, text, firing.message_id, "reminder")
            )
        log.warning("task_missed", task_id=task.id, scheduled_for=scheduled_for.isoformat())

    async def _refreshed(self, task: TaskRecord) -> TaskRecord:
        return await self._stores.tasks.get(task.id) or task


def _advanced(task: TaskRecord, following: datetime | None) -> dict[str, Any]:
    """The task row once this firing is claimed: its next cron time, or a one-shot done."""
    if task.cron:
        return {"next_run_at": following}
    return {"status": "done", "next_run_at": None}


def _outbound_row(session_id: int, text: str) -> dict[str, Any]:
    """A reminder (or missed notice) as the outbox stores it: pending until delivered."""
    return {
        "session_id": session_id,
        "role": "assistant",
        "kind": "reminder",
        "content": text,
        "status": "pending",
        "created_at": utcnow(),
    }


def _task_message_key(task: TaskRecord, scheduled_for: datetime) -> str:
    return f"task:{task.id}:{scheduled_for.isoformat()}"


def _task_message_row(
    session_id: int, task: TaskRecord, scheduled_for: datetime, metadata: dict[str, Any]
) -> dict[str, Any]:
    """A briefing's instruction as the inbox stores a message: pending until a turn takes it;
    its platform id makes a firing's task message unique in the session."""
    return {
        "session_id": session_id,
        "role": "user",
        "kind": "task",
        "content": task.content,
        "user_id": "scheduler",
        "author": "scheduler",
        "platform_message_id": _task_message_key(task, scheduled_for),
        "status": "pending",
        "extra": metadata,
        "created_at": utcnow(),
    }
