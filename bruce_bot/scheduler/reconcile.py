"""Reconciliation, when this process starts leading the scheduler: the rows are the truth.

`proactive_tasks` rows are the source of truth; the job store only says when a task fires.
`reconcile` finishes the runs a crash left open, recreates missing jobs, removes orphans,
delivers what came due while Bruce was down (late, within `scheduler.misfire_grace_seconds`)
and tells the user once about what is older than that. A broken row is set aside with a log
line naming it; it never stops the others or the start-up.
"""

from __future__ import annotations

from datetime import datetime

import structlog

from bruce_bot.domain import SessionKey
from bruce_bot.scheduler.context import SchedulerContext
from bruce_bot.scheduler.firing import REMINDER_MARK, TaskFiring, task_message_key
from bruce_bot.storage.tasks import OPEN_RUN_STATUSES, OpenRun, TaskRecord

log = structlog.get_logger(__name__)


class Reconciler:
    def __init__(self, context: SchedulerContext, firing: TaskFiring) -> None:
        self._context = context
        self._tasks = context.stores.tasks
        self._firing = firing
        self._recovered = False  # whether the runs a crash left open were looked at

    async def reconcile(self) -> None:
        """Make the job store follow the task rows, finish what a crash left open, fire what
        came due while Bruce was down. A broken row is set aside with a log line naming it."""
        now = self._context.clock()
        if not self._recovered:
            self._recovered = True  # what a crash left open is looked at once per process
            await self._recover_runs(now)
        tasks = await self._tasks.active()
        await self._context.jobs.remove_others({task.id for task in tasks})
        for task in tasks:
            try:
                await self._reconcile_task(task, now)
            except Exception as exc:  # a bad cron or timezone in the row
                await self._context.runs.set_aside(task, f"cannot schedule it: {exc!r}")
        await self._context.runs.settle()

    async def _reconcile_task(self, task: TaskRecord, now: datetime) -> None:
        due = task.next_run_at
        if due is None or (due <= now and not self._firing.can_deliver(task)):
            return  # due for a channel this process lacks: the daemon will deliver it
        jobs = self._context.jobs
        if due > now:
            await jobs.schedule(task, due)
        elif now - due <= self._context.grace or task.mode == "watch":
            # A watch due while Bruce was down checks once now, however many checks it missed.
            await jobs.unschedule(task.id)  # fired below, once, not also by APScheduler
            self._firing.fire_soon(task.id)
        else:
            await self._firing.missed(task, due, now, advance=True)

    async def _recover_runs(self, now: datetime) -> None:
        """Runs a crash left open. Their messages' fates close most of them (`settle`); a
        briefing whose turn was cut is run again by the inbox's recovery, which its run counts;
        a run without a message (cut before this version stored it with the run) is fired once
        more, or missed when it is too old."""
        for run in await self._tasks.open_runs():
            try:
                await self._recover_run(run, now)
            except Exception as exc:
                log.exception("task_run_recovery_failed", run_id=run.id, error=repr(exc))

    async def _recover_run(self, run: OpenRun, now: datetime) -> None:
        runs = self._tasks
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
            session = await self._context.stores.sessions.get_or_create(
                SessionKey(task.channel, task.chat_id)
            )
            return await self._tasks.find_unlinked_message(
                session_id=session.id,
                after=run.created_at,
                platform_message_id=task_message_key(task, run.scheduled_for),
            )
        return await self._tasks.find_unlinked_message(
            session_id=task.session_id,
            after=run.created_at,
            content_prefix=f"{REMINDER_MARK}{task.content}",
        )

    async def _refire(self, run: OpenRun, task: TaskRecord, now: datetime) -> None:
        if task.status == "active" and task.next_run_at == run.scheduled_for:
            return  # still due: fired with the due tasks, taking this run over
        if task.status not in ("active", "done"):
            await self._tasks.finish_run(
                run.id, "failed", f"cut by a crash; the task is {task.status} now"
            )
            return
        if task.cron and task.next_run_at is not None and task.next_run_at <= now:
            # A recurring task catches up once: with its due firing, not this older one too.
            await self._tasks.finish_run(run.id, "missed", "cut by a crash; caught up")
            return
        log.warning(
            "task_run_fired_again", run_id=run.id, scheduled_for=run.scheduled_for.isoformat()
        )
        self._firing.fire_soon(task.id, run.scheduled_for)
