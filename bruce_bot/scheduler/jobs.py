"""Job entry points stored in APScheduler's job store. KEEP THESE NAMES STABLE.

APScheduler pickles a reference to the function by its import path; a job whose function can no
longer be imported is deleted from the store when loaded. So the entry point is one module-level
function that takes only the task id, and it finds the running task service through `bind`.
"""

from __future__ import annotations

from typing import Protocol

import structlog

log = structlog.get_logger(__name__)


class TaskFirer(Protocol):
    async def fire(self, task_id: int) -> None: ...


_service: TaskFirer | None = None


def bind(service: TaskFirer | None) -> None:
    global _service
    _service = service


async def fire_task(task_id: int) -> None:
    """APScheduler calls this when a task is due."""
    if _service is None:
        log.error("task_fired_without_service", task_id=task_id)
        return
    await _service.fire(task_id)
