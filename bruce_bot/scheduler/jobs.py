"""Job entry points stored in APScheduler's job store. KEEP THESE NAMES STABLE.

APScheduler pickles a reference to the function by its import path; a job whose function can no
longer be imported is deleted from the store when loaded. So the entry point is one module-level
function that takes only the task id, and it finds the running task service through `bind`:
the one that leads (the only one in a daemon; tests run several Bruces in one process). It runs
in one of APScheduler's worker threads and only hands the task id over to the service, which
fires the task on Bruce's event loop.
"""

from __future__ import annotations

from typing import Protocol

import structlog

log = structlog.get_logger(__name__)


class TaskFirer(Protocol):
    @property
    def is_leader(self) -> bool: ...

    def fire_threadsafe(self, task_id: int) -> None: ...


_services: list[TaskFirer] = []


def bind(service: TaskFirer) -> None:
    if service not in _services:
        _services.append(service)


def unbind(service: TaskFirer) -> None:
    if service in _services:
        _services.remove(service)


def fire_task(task_id: int) -> None:
    """APScheduler calls this (in a worker thread) when a task is due."""
    leaders = [service for service in list(_services) if service.is_leader]
    if not leaders:
        log.error("task_fired_without_service", task_id=task_id)
        return
    leaders[-1].fire_threadsafe(task_id)
