"""The dashboard's side of the task service: edit a task, pause and resume it, run it now.

An edit is checked like a new task (the planner's rules: a future time or a cron that fires, a
briefing no more often than allowed, a known timezone) and keeps the task's id and its runs; an
active task's job follows the new schedule at once. Pausing removes the job and keeps the row;
resuming computes the next run from now (a one-shot whose time passed meanwhile must be given a
new time). Running now is one extra firing at the current time, through the normal firing path
(a run in `task_runs`, the reminder through the outbox or the briefing through the inbox); the
schedule stays as it was.
"""

from __future__ import annotations

import asyncio

import structlog

from bruce_bot.scheduler.context import SchedulerContext
from bruce_bot.scheduler.firing import TaskFiring
from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.scheduler.planner import UNCONFIRMED, TaskPlanner, definition_columns
from bruce_bot.scheduler.timing import next_cron_time, zone_of
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.storage.watches import WATCH_MODE

log = structlog.get_logger(__name__)

EDITABLE = ("active", "paused", UNCONFIRMED)


class TaskStateError(Exception):
    """The task is not in a state that allows this (e.g. resuming a task that is not paused)."""


class TaskEditor:
    def __init__(self, context: SchedulerContext, firing: TaskFiring, planner: TaskPlanner) -> None:
        self._context = context
        self._tasks = context.stores.tasks
        self._firing = firing
        self._planner = planner

    async def _task(self, task_id: int, allowed: tuple[str, ...], doing: str) -> TaskRecord:
        task = await self._tasks.get(task_id)
        if task is None:
            raise TaskStateError(f"there is no task {task_id}")
        if task.status not in allowed:
            raise TaskStateError(
                f"task {task_id} is {task.status}; only a task that is "
                f"{' or '.join(allowed)} can be {doing}"
            )
        return task

    async def edit(self, task_id: int, new: NewTask) -> TaskRecord:
        """Give the task `new`'s fields (its id, status and runs stay); ScheduleError when the
        new schedule is refused, TaskStateError when the task is over."""
        task = await self._task(task_id, EDITABLE, "edited")
        if task.mode == WATCH_MODE:
            raise TaskStateError(
                f"task {task_id} is a watch; it cannot be edited here: cancel it and ask Bruce "
                "for a new one (watch_create)"
            )
        zone = zone_of(new.timezone) if new.timezone else await self._context.user_zone()
        first = self._planner.first_run(new, zone)
        if new.session_id != task.session_id:
            await self._planner.check_room(new.session_id)
        await self._tasks.update(task_id, **definition_columns(new, zone, first))
        edited = await self._tasks.get(task_id)
        assert edited is not None
        if edited.status == "active":
            await self._context.jobs.schedule(edited, first)
        log.info("task_edited", task_id=task_id, next_run_at=first.isoformat())
        return edited

    async def pause(self, task_id: int) -> TaskRecord:
        await self._task(task_id, ("active",), "paused")
        await self._tasks.update(task_id, status="paused")
        await self._context.jobs.unschedule(task_id)
        log.info("task_paused", task_id=task_id)
        return await self._reread(task_id)

    async def resume(self, task_id: int) -> TaskRecord:
        task = await self._task(task_id, ("paused",), "resumed")
        now = self._context.clock()
        if task.cron:
            due = next_cron_time(task.cron, zone_of(task.timezone), now)
        elif task.mode == WATCH_MODE:
            due = now  # a resumed watch checks right away, then every interval
        else:
            due = task.next_run_at
            if due is None or due <= now:
                raise TaskStateError(
                    f"task {task_id} was due once, at a time that has passed; edit it to give "
                    "it a new time (or run it now)"
                )
        await self._tasks.update(task_id, status="active", next_run_at=due)
        resumed = await self._reread(task_id)
        if due is not None:
            await self._context.jobs.schedule(resumed, due)
        log.info("task_resumed", task_id=task_id)
        return resumed

    async def run_now(self, task_id: int) -> TaskRecord:
        """Fire the task once now and wait for the hand-over (a reminder: its delivery)."""
        await self._task(task_id, ("active",), "run now")
        firing = self._firing.fire_soon(task_id, self._context.clock())
        if firing is None:
            raise TaskStateError("Bruce is stopping; run the task after the next start")
        await asyncio.shield(firing)  # a closed browser tab must not cut a delivery in half
        log.info("task_run_now", task_id=task_id)
        return await self._reread(task_id)

    async def _reread(self, task_id: int) -> TaskRecord:
        task = await self._tasks.get(task_id)
        if task is None:
            raise TaskStateError(f"there is no task {task_id}")
        return task
