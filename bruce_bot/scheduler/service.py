"""The task service: the scheduler's life cycle, and its parts, which callers use directly.

Each part is a module of its own: `job_store` (APScheduler and one job per task), `planner` (the
scheduling tools' side: create, confirm, list, cancel, describe), `editing` (the dashboard's:
edit, pause, resume, run now), `firing` (a due firing delivered at most once), `runs` (closing
runs from their messages' fates), `reconcile` (start-up and election: the rows are the truth).
The composition root (bruce_bot/parts.py) builds the job store, the runs, the context they share
and the firing; the service adds the planner, the editor and the reconciler over them, and
starts and stops the whole. `proactive_tasks` rows are the source of truth; APScheduler only
decides when `jobs.fire_task(task_id)` runs.
On PostgreSQL, several processes may share the job store: only the elected leader
(`leader.SchedulerLeadership`) reconciles and runs its scheduler; the others keep theirs paused,
which still lets them add and remove jobs, and tell the leader when they added one.
"""

from __future__ import annotations

import structlog

from bruce_bot.scheduler import jobs
from bruce_bot.scheduler.context import SchedulerContext
from bruce_bot.scheduler.editing import TaskEditor
from bruce_bot.scheduler.firing import TaskFiring
from bruce_bot.scheduler.job_store import (
    JOBSTORE_TABLE,
    create_scheduler,
    job_id,
    start_paused,
)
from bruce_bot.scheduler.leader import SchedulerLeadership
from bruce_bot.scheduler.planner import UNCONFIRMED, TaskPlanner
from bruce_bot.scheduler.reconcile import Reconciler
from bruce_bot.scheduler.watching import WatchReader

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
    """Starts and stops the scheduler (with its leader election, on PostgreSQL). The work is
    its parts': `planner` (the scheduling tools, the confirmations, the dashboard's lists),
    `editor` (the dashboard's edits), `firing` (APScheduler's entry point; tests fire through
    it) and `runs` (a briefing's turn closes its run there)."""

    def __init__(
        self,
        context: SchedulerContext,
        firing: TaskFiring,
        leadership: SchedulerLeadership | None = None,
        reader: WatchReader | None = None,
    ) -> None:
        """`leadership` None: this process is the only scheduler (SQLite: the instance lock
        sees to that). `reader`: what watches read (None: a watch's URL is not vetted)."""
        self._jobs = context.jobs
        self._leadership = leadership
        self.runs = context.runs
        self.firing = firing
        self.planner = TaskPlanner(context, firing, reader)
        self.editor = TaskEditor(context, firing, self.planner)
        self._reconciler = Reconciler(context, firing)

    @property
    def is_leader(self) -> bool:
        """Whether this process runs the scheduler (always, without a leader election)."""
        return self._jobs.is_leader

    async def start(self) -> None:
        self.firing.open()
        jobs.bind(self.firing)
        await self._jobs.start()
        self.runs.start()
        if self._leadership is None:
            await self._lead()
        else:
            await self._leadership.start(self._lead, self._step_down, self._jobs.wakeup)

    async def _lead(self) -> None:
        await self._reconciler.reconcile()
        if not self.firing.stopping:
            self._jobs.resume()

    def _step_down(self) -> None:
        self._jobs.pause()
        log.info("scheduler_paused", reason="not the leader any more")

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop firing; deliveries already under way get `grace_seconds` to finish. A firing
        handed over after this point is left for the next start (the task is still due)."""
        self.firing.stopping = True  # before the pause: nothing fires from here on
        self._jobs.pause()
        await self.firing.drain(grace_seconds)
        await self.runs.stop()
        await self._jobs.shutdown()
        if self._leadership is not None:
            await self._leadership.stop()  # only now: the next leader must not overlap with us
        jobs.unbind(self.firing)
