"""What the parts of the task service share, as one value: each part then names only its own.

The task rows and run ledger (`stores`), the scheduler's jobs (`jobs`), the closing of runs
(`runs`), the `scheduler` settings, the user's timezone and the clock (tests inject one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from bruce_bot.config import SchedulerConfig
from bruce_bot.scheduler.job_store import TaskJobs
from bruce_bot.scheduler.runs import TaskRuns
from bruce_bot.storage.stores import Stores


@dataclass(frozen=True)
class SchedulerContext:
    stores: Stores
    jobs: TaskJobs
    runs: TaskRuns
    rules: SchedulerConfig
    app_zone: ZoneInfo
    clock: Callable[[], datetime]

    @property
    def grace(self) -> timedelta:
        """How late a firing may still be delivered (`scheduler.misfire_grace_seconds`)."""
        return timedelta(seconds=self.rules.misfire_grace_seconds)
