"""Closing task runs, and setting aside the tasks that cannot fire.

A run stays open until its message's fate closes it: `delivered` once the reminder (or the
briefing's answer) is sent, `failed` when that failed for good; an open one closes when the
outbox's redelivery gets its message out (checked every minute, and once more at a stop). A
reminder the chat refused for good (deleted, or the bot blocked) pauses its task, and a task
whose row Bruce cannot fire is paused with a log line naming it, so that it never stops the
others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import structlog

from bruce_bot.messaging.outbox import REDELIVERY_INTERVAL_SECONDS
from bruce_bot.scheduler.job_store import TaskJobs
from bruce_bot.storage.stores import Stores
from bruce_bot.storage.tasks import OPEN_RUN_STATUSES, RunStatus, TaskRecord

log = structlog.get_logger(__name__)

# How often runs left `undelivered` are checked against their messages (after redelivery).
SETTLE_INTERVAL_SECONDS = REDELIVERY_INTERVAL_SECONDS
REFUSED = "the chat refused the message (deleted, or the bot is blocked)"


class TaskRuns:
    def __init__(self, stores: Stores, jobs: TaskJobs) -> None:
        self._stores = stores
        self._jobs = jobs
        self._settling: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._settling = asyncio.create_task(self._settle_periodically(), name="task-runs-settle")

    async def stop(self) -> None:
        if self._settling is not None:
            self._settling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._settling
            self._settling = None
        try:  # what finished in the last minute closes now, not at the next start
            await self.settle()
        except Exception as exc:
            log.warning("task_runs_settle_failed", error=repr(exc))

    async def settle(
        self,
        run_ids: Sequence[int] | None = None,
        statuses: Sequence[RunStatus] = OPEN_RUN_STATUSES,
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
        """Runs left `undelivered` close when the outbox's redelivery gets their message out;
        a briefing's run left `running` closes once its answer is out, wherever that happened
        (a process killed between storing the answer and closing the run leaves that to the
        redelivery of another, which knows nothing of the run)."""
        while True:
            await asyncio.sleep(SETTLE_INTERVAL_SECONDS)
            try:
                await self.settle()
            except Exception as exc:  # tried again next round; never kills the service
                log.warning("task_runs_settle_failed", error=repr(exc))

    async def briefing_finished(self, run_id: int, delivered: bool, error: str | None) -> None:
        """An agent-mode task's turn is over. An answer the outbox could not deliver yet leaves
        the run `undelivered`: it closes when the redelivery gets it out."""
        if delivered:
            await self._stores.tasks.finish_run(run_id, "delivered")
            return
        if not await self._stores.tasks.settle_runs([run_id], error=error):
            await self._stores.tasks.finish_run(run_id, "failed", error, only_open=True)

    async def _pause(self, task: TaskRecord, reason: str) -> None:
        await self._stores.tasks.update(task.id, status="paused")
        await self._jobs.unschedule(task.id)
        log.warning(
            "task_paused",
            task_id=task.id,
            channel=task.channel,
            chat_id=task.chat_id,
            reason=reason,
        )

    async def set_aside(self, task: TaskRecord, reason: str) -> None:
        """A task Bruce cannot fire (a broken schedule or row): paused, with a log line, so
        that it never stops the others or the start-up."""
        log.error("task_set_aside", task_id=task.id, reason=reason)
        await self._stores.tasks.update(task.id, status="paused")
        try:
            await self._jobs.unschedule(task.id)
        except Exception as exc:
            log.warning("task_job_not_removed", task_id=task.id, error=repr(exc))
