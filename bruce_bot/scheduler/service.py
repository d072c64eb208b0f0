"""The task service: proactive tasks made, listed, edited and cancelled, and fired when due.

A thin facade over the scheduler's parts, each in a module of its own: `job_store` (APScheduler
and one job per task), `planner` (the scheduling tools' side), `editing` (the dashboard's:
edit, pause, resume, run now), `firing` (a due firing delivered
at most once), `runs` (closing runs from their messages' fates), `reconcile` (start-up and
election: the rows are the truth). `proactive_tasks` rows are the source of truth; APScheduler
only decides when `jobs.fire_task(task_id)` runs.
On PostgreSQL, several processes may share the job store: only the elected leader
(`leader.SchedulerLeadership`) reconciles and runs its scheduler; the others keep theirs paused,
which still lets them add and remove jobs, and tell the leader when they added one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

import structlog
from apscheduler.schedulers.background import BackgroundScheduler

from bruce_bot.config import SchedulerConfig
from bruce_bot.domain import utcnow
from bruce_bot.llm.base import LLMService
from bruce_bot.messaging.inbox import Inbox
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.scheduler import jobs
from bruce_bot.scheduler.context import SchedulerContext
from bruce_bot.scheduler.editing import TaskEditor
from bruce_bot.scheduler.firing import TaskFiring
from bruce_bot.scheduler.job_store import (
    JOBSTORE_TABLE,
    TaskJobs,
    create_scheduler,
    job_id,
    start_paused,
)
from bruce_bot.scheduler.leader import SchedulerLeadership
from bruce_bot.scheduler.new_task import NewTask, NewWatch
from bruce_bot.scheduler.planner import UNCONFIRMED, TaskPlanner
from bruce_bot.scheduler.reconcile import Reconciler
from bruce_bot.scheduler.runs import TaskRuns
from bruce_bot.scheduler.timing import ScheduleError
from bruce_bot.scheduler.watching import WatchChecker, WatchReader
from bruce_bot.storage.stores import Stores
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.storage.watches import WatchRecord

# Where they were before the service was split: the composition root and `bruce doctor`.
__all__ = [
    "JOBSTORE_TABLE",
    "UNCONFIRMED",
    "TaskService",
    "create_scheduler",
    "job_id",
    "start_paused",
]

log = structlog.get_logger(__name__)


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
        # None: this process is the only scheduler (SQLite: the instance lock sees to that).
        self._leadership = leadership
        self._jobs = job_store = TaskJobs(scheduler, leadership)
        self._runs = runs = TaskRuns(stores, job_store)
        self._context = context = SchedulerContext(stores, job_store, runs, rules, app_zone, clock)
        self._outbox = outbox
        self._firing = firing = TaskFiring(context, inbox, outbox, channels)
        self._reconciler = Reconciler(context, firing)
        self.planner = TaskPlanner(context, firing)
        self.editor = TaskEditor(context, firing, self.planner)
        self._watch_reader: WatchReader | None = None

    def use_watches(self, reader: WatchReader, llm: LLMService, model: str) -> None:
        """Let watches be checked: `reader` reads their pages and searches, `model` (the
        background one, on `llm`) judges them. Without this, a due watch waits unchecked."""
        self._firing.watches = WatchChecker(self._context, self._outbox, reader, llm, model)
        self._watch_reader = reader

    # ---- life cycle ------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this process runs the scheduler (always, without a leader election)."""
        return self._jobs.is_leader

    async def start(self) -> None:
        self._firing.open()
        jobs.bind(self)
        await self._jobs.start()
        self._runs.start()
        if self._leadership is None:
            await self._lead()
        else:
            await self._leadership.start(self._lead, self._step_down, self._jobs.wakeup)

    async def _lead(self) -> None:
        await self.reconcile()
        if not self._firing.stopping:
            self._jobs.resume()

    def _step_down(self) -> None:
        self._jobs.pause()
        log.info("scheduler_paused", reason="not the leader any more")

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop firing; deliveries already under way get `grace_seconds` to finish. A firing
        handed over after this point is left for the next start (the task is still due)."""
        self._firing.stopping = True  # before the pause: nothing fires from here on
        self._jobs.pause()
        await self._firing.drain(grace_seconds)
        await self._runs.stop()
        await self._jobs.shutdown()
        if self._leadership is not None:
            await self._leadership.stop()  # only now: the next leader must not overlap with us
        jobs.unbind(self)

    async def reconcile(self) -> None:
        await self._reconciler.reconcile()

    # ---- firing (APScheduler's entry point, the turn runner, tests) ------------------------

    def fire_threadsafe(self, task_id: int) -> None:
        self._firing.fire_threadsafe(task_id)

    async def fire(self, task_id: int) -> None:
        await self._firing.fire(task_id)

    async def briefing_finished(self, run_id: int, delivered: bool, error: str | None) -> None:
        """Called by the turn runner when an agent-mode task's turn is over."""
        await self._runs.briefing_finished(run_id, delivered, error)

    # ---- the tools' side, done by `planner` ------------------------------------------------

    async def create(
        self,
        *,
        session_id: int,
        channel: str,
        chat_id: str,
        title: str,
        mode: Literal["message", "agent"],
        content: str,
        run_at: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        confirmed: bool = True,
        origin: str | None = None,
        created_by: str | None = None,
    ) -> TaskRecord:
        """A new task from its fields by name (set-ups, scripts): `TaskPlanner.create`."""
        new = NewTask(
            session_id=session_id,
            channel=channel,
            chat_id=chat_id,
            title=title,
            mode=mode,
            content=content,
            run_at=run_at,
            cron=cron,
            timezone=timezone,
            confirmed=confirmed,
            origin=origin,
            created_by=created_by,
        )
        return await self.planner.create(new)

    async def create_watch(self, new: NewWatch) -> TaskRecord:
        url = (new.url or "").strip()
        if url and self._watch_reader is not None:
            refused = await self._watch_reader.refusal(url)
            if refused:
                raise ScheduleError(f"{refused}; a watch can only read pages web_fetch may read")
        return await self.planner.create_watch(new)

    async def watches(self, session_id: int) -> list[tuple[TaskRecord, WatchRecord]]:
        return await self.planner.watches(session_id)

    async def unconfirmed(self, session_id: int) -> list[TaskRecord]:
        return await self.planner.unconfirmed(session_id)

    async def confirm(self, task_id: int, session_id: int) -> TaskRecord | None:
        return await self.planner.confirm(task_id, session_id)

    async def discard(self, task_id: int, session_id: int) -> TaskRecord | None:
        return await self.planner.discard(task_id, session_id)

    async def list_active(self, session_id: int) -> list[TaskRecord]:
        return await self.planner.list_active(session_id)

    async def cancel(self, task_id: int, session_id: int) -> TaskRecord:
        return await self.planner.cancel(task_id, session_id)

    # ---- the dashboard's side, done by `editor` -------------------------------------------

    async def edit(self, task_id: int, new: NewTask) -> TaskRecord:
        return await self.editor.edit(task_id, new)

    async def pause(self, task_id: int) -> TaskRecord:
        return await self.editor.pause(task_id)

    async def resume(self, task_id: int) -> TaskRecord:
        return await self.editor.resume(task_id)

    async def run_now(self, task_id: int) -> TaskRecord:
        return await self.editor.run_now(task_id)

    async def describe_next_run(self, task: TaskRecord) -> str:
        return await self.planner.describe_next_run(task)

    async def describe(self, task: TaskRecord) -> str:
        return await self.planner.describe(task)

    async def describe_session(self, session_id: int) -> str:
        return await self.planner.describe_session(session_id)
