"""Firing a due task: at most once per (task, scheduled time), and never lost half-way.

`jobs.fire_task` hands the task id over from APScheduler's thread; the firing runs on Bruce's
event loop. Firing claims a row in the `task_runs` ledger, advances the task and stores the
firing's message in one commit, so a crash leaves all of them or none. Message mode stores the
reminder and delivers it through the outbox (no LLM); agent mode stores the instruction as a
task message and queues it in the session's inbox, so it never overlaps a live turn. A firing
older than `scheduler.misfire_grace_seconds` (a machine suspended for days) is recorded as
missed instead, and for a one-shot the user is told once. A watch's firing is a check, handed to
`watching.WatchChecker` however late it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from bruce_bot.domain import OutboundMessage, SessionKey, utcnow
from bruce_bot.messaging.inbox import Inbox, QueuedMessage
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.scheduler.context import SchedulerContext
from bruce_bot.scheduler.timing import describe_lateness, next_cron_time, zone_of
from bruce_bot.scheduler.watching import WatchChecker
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.tasks import PERSON_KEY, RUN_KEY, Firing, TaskRecord

log = structlog.get_logger(__name__)

LATE_AFTER_SECONDS = 60.0  # a firing later than this says so ("late: was due at 09:00")
MODES = ("message", "agent", "watch")
REMINDER_MARK = "⏰ "  # a reminder's text starts with it


@dataclass(frozen=True)
class _Composed:
    """What a firing stores and hands over: the text, its message row, and for a briefing the
    session whose inbox runs it (None: a reminder, sent through the outbox)."""

    text: str
    row: dict[str, Any]
    session: SessionRecord | None = None
    metadata: dict[str, Any] | None = None


class TaskFiring:
    def __init__(
        self,
        context: SchedulerContext,
        inbox: Inbox,
        outbox: Outbox,
        channels: Collection[str] | None = None,
        watches: WatchChecker | None = None,
    ) -> None:
        self._context = context
        self._tasks = context.stores.tasks
        self._inbox = inbox
        self._outbox = outbox
        # The channels this process can deliver to (None: all). `bruce chat` has only the
        # console: a Telegram reminder due meanwhile is left for the daemon, not failed.
        self._channels = frozenset(channels) if channels is not None else None
        self._firing: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stopping = False
        # Checks a watch's firing; None: watches wait, unchecked.
        self._watches = watches

    @property
    def is_leader(self) -> bool:
        """Whether this process runs the scheduler: a firing elsewhere is the leader's."""
        return self._context.jobs.is_leader

    def open(self) -> None:
        """Accept firings, on the running event loop."""
        self._loop = asyncio.get_running_loop()
        self.stopping = False

    async def drain(self, grace_seconds: float) -> None:
        """Stop accepting firings; those under way get `grace_seconds` to finish."""
        self.stopping = True  # a firing handed over from now on is left for the next start
        if self._firing:
            await asyncio.wait(set(self._firing), timeout=grace_seconds)

    def can_deliver(self, task: TaskRecord) -> bool:
        return self._channels is None or task.channel in self._channels

    def fire_threadsafe(self, task_id: int) -> None:
        """Called by `jobs.fire_task` in APScheduler's worker thread: fire on the event loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            log.warning("task_fire_dropped", task_id=task_id, reason="event loop gone")
            return
        try:
            loop.call_soon_threadsafe(self.fire_soon, task_id)
        except RuntimeError:  # the loop closed in between
            log.warning("task_fire_dropped", task_id=task_id, reason="event loop closed")

    async def fire(self, task_id: int) -> None:
        """Fire a task now and wait until it is delivered (or skipped). The work runs in a task
        of our own, shielded, so that a cancelled caller cannot cut a delivery in half."""
        firing = self.fire_soon(task_id)
        if firing is not None:
            await asyncio.shield(firing)

    def fire_soon(
        self, task_id: int, scheduled_for: datetime | None = None
    ) -> asyncio.Task[None] | None:
        if self.stopping:
            log.info("task_fire_deferred", task_id=task_id, reason="stopping")
            return None
        firing = asyncio.create_task(
            self._fire(task_id, scheduled_for), name=f"fire-task-{task_id}"
        )
        self._firing.add(firing)
        firing.add_done_callback(self._firing.discard)
        return firing

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
        found = await self._firable(task_id, scheduled_for)
        if found is None:
            return
        task, due = found
        if task.mode == "watch":
            # A check however late: one check catches up, not one per interval missed.
            await self._check_watch(task, due)
            return
        advance = task.status == "active" and task.next_run_at == due
        now = self._context.clock()
        late = max(0.0, (now - due).total_seconds())
        if late > max(self._context.grace.total_seconds(), LATE_AFTER_SECONDS):
            await self.missed(task, due, now, advance)  # e.g. the machine was suspended for days
            return
        zone = zone_of(task.timezone)
        following = next_cron_time(task.cron, zone, max(now, due)) if task.cron else None
        late_note = describe_lateness(due, now, zone) if late > LATE_AFTER_SECONDS else ""
        composed = await self._compose(task, due, late_note)
        # Claim, advance and message in one commit: a crash leaves all of them or none.
        firing = await self._tasks.fire(
            task.id,
            due,
            late,
            message=composed.row,
            task_values=_advanced(task, following) if advance else None,
        )
        if advance:
            await self.follow(task, following)
        if firing is None:
            log.info("task_fire_duplicate", task_id=task.id, scheduled_for=due.isoformat())
            return
        log.info(
            "task_fired",
            task_id=task.id,
            run_id=firing.run_id,
            mode=task.mode,
            late_seconds=round(late, 3),
            attempts=firing.attempts,
        )
        await self._hand_over(task, firing, composed)

    async def _check_watch(self, task: TaskRecord, due: datetime) -> None:
        if self._watches is None:
            log.info("task_fire_deferred", task_id=task.id, reason="watches are not set up here")
            return
        await self._watches.check(task, due)

    async def _firable(
        self, task_id: int, scheduled_for: datetime | None
    ) -> tuple[TaskRecord, datetime] | None:
        """The task and the time of the firing it owes, or None when it owes none here."""
        task = await self._tasks.get(task_id)
        # A one-shot cut by a crash is `done` already; it still owes its firing.
        firable = ("active", "done") if scheduled_for is not None else ("active",)
        due = scheduled_for or (task.next_run_at if task is not None else None)
        if task is None or task.status not in firable or due is None:
            log.info("task_fire_skipped", task_id=task_id, status=task.status if task else None)
            return None
        if task.mode not in MODES or (task.mode == "agent" and not task.content.strip()):
            reason = f"mode {task.mode!r} with this content cannot fire"
            await self._context.runs.set_aside(task, reason)
            return None
        if not self.can_deliver(task):
            log.info("task_fire_deferred", task_id=task_id, reason=f"channel {task.channel} off")
            return None
        return task, due

    async def _compose(self, task: TaskRecord, due: datetime, late_note: str) -> _Composed:
        if task.mode == "message":
            text = f"{REMINDER_MARK}{task.content}{late_note}"
            return _Composed(text, _outbound_row(task.session_id, text))
        sessions = self._context.stores.sessions
        session = await sessions.get_or_create(SessionKey(task.channel, task.chat_id))
        metadata: dict[str, Any] = {"title": task.title + late_note}
        if task.created_by:
            metadata[PERSON_KEY] = task.created_by  # the briefing's turn uses their memories
        row = _task_message_row(session.id, task, due, metadata)
        return _Composed(task.content, row, session, metadata)

    async def _hand_over(self, task: TaskRecord, firing: Firing, composed: _Composed) -> None:
        """A reminder to the outbox; a briefing to its session's inbox, as a task message."""
        assert firing.message_id is not None
        if composed.session is None:
            await self._remind(task, composed.text, firing.message_id)
            await self._context.runs.settle([firing.run_id])
            return
        metadata = {**(composed.metadata or {}), RUN_KEY: firing.run_id}
        queued = QueuedMessage(firing.message_id, "task", metadata, composed.text)
        if not self._inbox.enqueue_stored(composed.session, queued):
            # Stopping: the briefing is stored, and runs at the next start.
            log.info("briefing_left_for_next_start", task_id=task.id, run_id=firing.run_id)

    async def _remind(self, task: TaskRecord, text: str, message_id: int) -> None:
        await self._outbox.deliver(
            OutboundMessage(task.channel, task.chat_id, text, message_id, "reminder")
        )

    async def follow(self, task: TaskRecord, following: datetime | None) -> None:
        """The job store follows the task row: the next cron time, or no job for a one-shot.
        A crash before this is repaired by `reconcile`, which rebuilds jobs from the rows."""
        if task.cron and following is not None:
            # The job fires at the time the row says: after a catch-up fired by `reconcile`
            # (which removed the job), or after the scheduler's own firing (same time, no-op).
            await self._context.jobs.schedule(task, following)
        else:
            await self._context.jobs.unschedule(task.id)

    async def missed(
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
            f'{REMINDER_MARK}I missed a reminder while I was offline: "{task.title}" was due at '
            f"{when} ({task.timezone}). {task.content}"
        )
        notice = None if task.cron else _outbound_row(task.session_id, text)
        firing = await self._tasks.fire(
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
            await self.follow(task, following)
        if task.cron:
            log.warning("task_run_missed", task_id=task.id, scheduled_for=scheduled_for.isoformat())
            return
        if firing is not None and firing.message_id is not None:  # tell the user once
            await self._remind(task, text, firing.message_id)
        log.warning("task_missed", task_id=task.id, scheduled_for=scheduled_for.isoformat())


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


def task_message_key(task: TaskRecord, scheduled_for: datetime) -> str:
    """The platform id of a briefing firing's task message: unique in its session."""
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
        "platform_message_id": task_message_key(task, scheduled_for),
        "status": "pending",
        "extra": metadata,
        "created_at": utcnow(),
    }
