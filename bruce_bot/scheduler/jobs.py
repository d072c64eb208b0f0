"""Job entry points stored in APScheduler's job store. KEEP THESE NAMES STABLE.

APScheduler pickles a reference to the function by its import path; a job whose function can no
longer be imported is deleted from the store when loaded. So the entry point is one module-level
function that takes only the task id, and it finds the process's task firing through `bind`
(the task service binds it): one per process (a second one is refused, so that no test can hide
which process fired). It runs in one of APScheduler's worker threads and only hands the task id
over to the firing, which fires the task on Bruce's event loop — if it leads the scheduler. A
firing that reaches a process that does not lead (it was deposed a moment ago) is dropped
loudly: the task row still waits for it, and the leader's start-up reconciliation fires it.
"""

from __future__ import annotations

from typing import Protocol

import structlog

log = structlog.get_logger(__name__)


class TaskFirer(Protocol):
    @property
    def is_leader(self) -> bool: ...

    def fire_threadsafe(self, task_id: int) -> None: ...


class AlreadyBoundError(RuntimeError):
    """A second task service in one process: they would share one job entry point."""


_service: TaskFirer | None = None


def bind(service: TaskFirer) -> None:
    global _service
    if _service is not None and _service is not service:
        raise AlreadyBoundError(
            "a task service is already running in this process; run each Bruce in its own "
            "process (one scheduler per process)"
        )
    _service = service


def unbind(service: TaskFirer) -> None:
    global _service
    if _service is service:
        _service = None


def fire_task(task_id: int) -> None:
    """APScheduler calls this (in a worker thread) when a task is due."""
    service = _service
    if service is None:
        log.error("task_fired_without_service", task_id=task_id)
        return
    if not service.is_leader:
        log.error("task_fired_on_follower", task_id=task_id)
        return
    service.fire_threadsafe(task_id)
