"""Job entry points stored in APScheduler's job store. KEEP THESE NAMES STABLE.

APScheduler pickles a reference to the function by its import path; a job whose function can no
longer be imported is deleted from the store when loaded. So the entry point is one module-level
function that takes only the task id, and it finds the running task service through `bind`.
It runs in one of APScheduler's worker threads and only hands the task id over to the service,
which fires the task on Bruce's event loop.
"""

from __future__ import annotations

from typing import Protocol

import structlog

log = structlog.get_logger(__name__)


class TaskFirer(Protocol):
    def fire_threadsafe(self, task_id: int) -> None: ...


_service: TaskFirer | None = None


def bind(service: TaskFirer | None) -> None:
    global _service
    _service = service


def fire_task(task_id: int) -> None:
    """APScheduler calls this (in a worker thread) when a task is due."""
    service = _service
    if service is None:
        log.error("task_fired_without_service", task_id=task_id)
        return
    service.fire_threadsafe(task_id)
