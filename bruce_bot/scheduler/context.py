"""What the parts of the task service share, as one value: each part then names only its own.

The task rows and run ledger (`stores`), the scheduler's jobs (`jobs`), the closing of runs
(`runs`), the `scheduler` settings, the user's timezone and the clock (tests inject one).

The user's timezone is read for each use (`user_zone`): the one saved in the dashboard's Settings
wins over `app.timezone`, so a change there applies to the next task without a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from bruce_bot.config import SchedulerConfig
from bruce_bot.scheduler.job_store import TaskJobs
from bruce_bot.scheduler.runs import TaskRuns
from bruce_bot.settings.editable import timezone
from bruce_bot.storage.stores import Stores


@dataclass(frozen=True)
class SchedulerContext:
    stores: Stores
    jobs: TaskJobs
    runs: TaskRuns
    rules: SchedulerConfig
    app_zone: ZoneInfo  # app.timezone in config.yml; the dashboard's setting wins over it
    clock: Callable[[], datetime]

    async def user_zone(self) -> ZoneInfo:
        """The user's timezone now: a task without one gets it, next runs are told in it."""
        return await timezone(self.app_zone).value(self.stores.settings)

    @property
    def grace(self) -> timedelta:
        """How late a firing may still be delivered (`scheduler.misfire_grace_seconds`)."""
        return timedelta(seconds=self.rules.misfire_grace_seconds)
