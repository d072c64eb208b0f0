"""The scheduling tools' side of the task service: create, confirm, list, cancel, describe.

A new task is checked (exactly one of `run_at` and `cron`, a future time, a briefing no more
often than `scheduler.min_agent_interval_minutes`, at most `scheduler.max_active_tasks_per_chat`
per chat), stored in `proactive_tasks` and given its job. A task set up after the turn read
untrusted content is stored unconfirmed: it has no job until the user confirms it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

import structlog

from bruce_bot.scheduler.context import SchedulerContext
from bruce_bot.scheduler.firing import TaskFiring
from bruce_bot.scheduler.new_task import NewTask, NewWatch
from bruce_bot.scheduler.timing import (
    ScheduleError,
    describe_gap,
    describe_time,
    next_cron_time,
    parse_interval,
    parse_run_at,
    shortest_cron_gap,
    zone_of,
)
from bruce_bot.scheduler.watching import WatchReader
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.storage.watches import WATCH_MODE, WatchRecord

log = structlog.get_logger(__name__)

# A task set up after the turn read untrusted content: stored, but it fires only once the user
# confirms it.
UNCONFIRMED: Final = "unconfirmed"


def definition_columns(new: NewTask, zone: ZoneInfo, first: datetime) -> dict[str, Any]:
    """The columns a task's definition sets, the same when it is created and when it is edited
    (`first`: its first run, in `zone`)."""
    return {
        "session_id": new.session_id,
        "channel": new.channel,
        "chat_id": new.chat_id,
        "title": new.title.strip()[:200],
        "mode": new.mode,
        "content": new.content,
        "run_at": first if new.run_at else None,
        "cron": new.cron,
        "timezone": zone.key,
        "next_run_at": first,
    }


class TaskPlanner:
    def __init__(
        self, context: SchedulerContext, firing: TaskFiring, reader: WatchReader | None = None
    ) -> None:
        self._context = context
        self._tasks = context.stores.tasks
        self._firing = firing
        self._reader = reader  # what watches read: a page it never reads is refused up front
        self._creating = asyncio.Lock()

    async def create(self, new: NewTask) -> TaskRecord:
        """A new task; an unconfirmed one is stored but does not fire until `confirm`.

        With an `origin` (the tool call that asks), the same call made again — a turn resumed
        after a crash — returns the task it created the first time instead of a second one.
        """
        if bool(new.run_at) == bool(new.cron):
            raise ScheduleError(
                "give exactly one of run_at (a one-shot time) or cron (a recurring schedule)"
            )
        zone = zone_of(new.timezone) if new.timezone else await self._context.user_zone()
        first = self.first_run(new, zone)
        async with self._creating:  # the count and the insert as one step: calls run at once
            if made := await self._made_by(new):
                return made
            await self.check_room(new.session_id)
            task = await self._tasks.create(
                **definition_columns(new, zone, first),
                status="active" if new.confirmed else UNCONFIRMED,
                origin=new.origin,
                created_by=new.created_by or None,
            )
        if new.confirmed:
            await self._context.jobs.schedule(task, first)
        log.info(
            "task_created",
            task_id=task.id,
            mode=new.mode,
            next_run_at=first.isoformat(),
            confirmed=new.confirmed,
        )
        return task

    async def create_watch(self, new: NewWatch) -> TaskRecord:
        """A new watch: its first check runs right away (once confirmed, for an unconfirmed one).
        The same tool call made again returns the watch it created the first time."""
        url, query = (new.url or "").strip(), (new.query or "").strip()
        if url and self._reader is not None and (refused := await self._reader.refusal(url)):
            raise ScheduleError(f"{refused}; a watch can only read pages web_fetch may read")
        if bool(url) == bool(query):
            raise ScheduleError("give exactly one of url (a page to read) or query (a web search)")
        if url and not url.lower().startswith(("http://", "https://")):
            raise ScheduleError(f"url '{url}' must start with http:// or https://")
        if not new.condition.strip():
            raise ScheduleError("condition is empty; say what the watch looks for")
        interval = parse_interval(new.interval)
        least = timedelta(minutes=self._context.rules.min_watch_interval_minutes)
        if interval < least:
            raise ScheduleError(
                f"a watch checks at most every {describe_gap(least)} "
                f"(scheduler.min_watch_interval_minutes); '{new.interval}' is more often. "
                "Choose a longer interval."
            )
        now = self._context.clock()
        async with self._creating:
            if made := await self._made_by(new):
                return made
            await self.check_room(new.session_id)
            task_id = await self._context.stores.watches.create(
                {
                    "session_id": new.session_id,
                    "channel": new.channel,
                    "chat_id": new.chat_id,
                    "title": new.title.strip()[:200],
                    "mode": WATCH_MODE,
                    "content": new.condition.strip(),
                    "run_at": None,
                    "cron": None,
                    "timezone": (await self._context.user_zone()).key,
                    "next_run_at": now,
                    "status": "active" if new.confirmed else UNCONFIRMED,
                    "origin": new.origin,
                    "created_by": new.created_by or None,
                },
                {
                    "url": url or None,
                    "query": query or None,
                    "condition": new.condition.strip(),
                    "interval_seconds": interval.total_seconds(),
                },
            )
        task = await self._tasks.get(task_id)
        assert task is not None
        if new.confirmed and self._context.jobs.is_leader:
            self._firing.fire_soon(task.id)  # the first check, now
        elif new.confirmed:
            await self._context.jobs.schedule(task, now)  # the leader checks it (only it does)
        log.info("watch_created", task_id=task.id, confirmed=new.confirmed)
        return task

    async def watches(self, session_id: int) -> list[tuple[TaskRecord, WatchRecord]]:
        """The session's open watches (active, paused or waiting for confirmation)."""
        tasks = [task for task in await self.list_active(session_id) if task.mode == WATCH_MODE]
        found = await self._context.stores.watches.of_tasks([task.id for task in tasks])
        return [(task, found[task.id]) for task in tasks if task.id in found]

    async def _made_by(self, new: NewTask | NewWatch) -> TaskRecord | None:
        """The task this same tool call created before, if any."""
        if not new.origin:
            return None
        made = await self._tasks.by_origin(new.session_id, new.origin)
        if made is not None:
            log.info("task_create_repeated", task_id=made.id, origin=new.origin)
        return made

    def first_run(self, new: NewTask, zone: ZoneInfo) -> datetime:
        """When `new` would first fire; ScheduleError when it never would, or too often."""
        now = self._context.clock()
        if new.run_at:
            return parse_run_at(new.run_at, zone, now)
        assert new.cron is not None
        first = next_cron_time(new.cron, zone, now)
        if first is None:
            raise ScheduleError(f"cron '{new.cron}' never fires")
        if new.mode == "agent":
            self._check_interval(new.cron, zone, now)
        return first

    def _check_interval(self, cron: str, zone: ZoneInfo, now: datetime) -> None:
        least = timedelta(minutes=self._context.rules.min_agent_interval_minutes)
        gap = shortest_cron_gap(cron, zone, now)
        if gap is not None and gap < least:
            raise ScheduleError(
                f"cron '{cron}' would run a briefing every {describe_gap(gap)}; an agent-mode "
                f"task may run at most every {describe_gap(least)} "
                "(scheduler.min_agent_interval_minutes). Choose a sparser schedule, or use "
                "execution_mode 'message' for a plain reminder."
            )

    async def check_room(self, session_id: int) -> None:
        most = self._context.rules.max_active_tasks_per_chat
        if await self._tasks.count_open(session_id) >= most:
            raise ScheduleError(
                f"this chat already has {most} active tasks, the most allowed "
                "(scheduler.max_active_tasks_per_chat). Cancel one with proactive_cancel first."
            )

    async def unconfirmed(self, session_id: int) -> list[TaskRecord]:
        return await self._tasks.with_status(UNCONFIRMED, session_id)

    async def _waiting(self, task_id: int, session_id: int) -> TaskRecord | None:
        """The session's task `task_id`, if it waits for the user's confirmation."""
        task = await self._tasks.get(task_id)
        if task is None or task.session_id != session_id or task.status != UNCONFIRMED:
            return None
        return task

    async def confirm(self, task_id: int, session_id: int) -> TaskRecord | None:
        """Activate an unconfirmed task of the session; None when there is none such."""
        task = await self._waiting(task_id, session_id)
        if task is None:
            return None
        now = self._context.clock()
        due = task.next_run_at
        if task.cron:
            due = next_cron_time(task.cron, zone_of(task.timezone), now)
        await self._tasks.update(task.id, status="active", next_run_at=due)
        task = await self._tasks.get(task.id) or task
        if due is not None and due > now:
            await self._context.jobs.schedule(task, due)
        elif due is not None:
            self._firing.fire_soon(task.id)  # it came due while it waited for the user
        log.info("task_confirmed", task_id=task.id)
        return task

    async def discard(self, task_id: int, session_id: int) -> TaskRecord | None:
        """Delete an unconfirmed task the user refused: nothing of it is left behind."""
        task = await self._waiting(task_id, session_id)
        if task is None:
            return None
        await self._tasks.delete(task.id)
        log.info("task_refused", task_id=task.id)
        return task

    async def list_active(self, session_id: int) -> list[TaskRecord]:
        """The session's active tasks, and those waiting for the user's confirmation."""
        active = await self._tasks.active(session_id)
        return active + await self.unconfirmed(session_id)

    async def cancel(self, task_id: int, session_id: int) -> TaskRecord:
        task = await self._tasks.get(task_id)
        open_statuses = ("active", "paused", UNCONFIRMED)
        if task is None or task.session_id != session_id or task.status not in open_statuses:
            raise ScheduleError(
                f"there is no active task {task_id} in this conversation; "
                "call proactive_list to see the task ids"
            )
        await self._tasks.update(task_id, status="cancelled", next_run_at=None)
        await self._context.jobs.unschedule(task_id)
        log.info("task_cancelled", task_id=task_id)
        return task

    async def describe_next_run(self, task: TaskRecord) -> str:
        """The next run in the task's timezone and, when that is not the user's, in theirs."""
        if task.next_run_at is None:
            return "not scheduled"
        zone, users = zone_of(task.timezone), await self._context.user_zone()
        when = describe_time(task.next_run_at, zone)
        if zone.key != users.key:
            when += f", which is {describe_time(task.next_run_at, users)} for the user"
        return when

    async def describe(self, task: TaskRecord) -> str:
        when = await self.describe_next_run(task)
        schedule = f"cron '{task.cron}'" if task.cron else "once"
        if task.mode == WATCH_MODE:
            schedule = "see watch_list"
        waiting = " (waiting for the user's confirmation)" if task.status == UNCONFIRMED else ""
        return f"#{task.id} {task.title} — {task.mode} mode, {schedule}, next run {when}{waiting}"

    async def describe_session(self, session_id: int) -> str:
        tasks = await self.list_active(session_id)
        if not tasks:
            return "You have no active reminders or scheduled briefings."
        return "Your active tasks:\n" + "\n".join([f"• {await self.describe(t)}" for t in tasks])
