"""`/api/tasks`: reminders, briefings and watches (proactive tasks), their firings, and
cancelling one (creating, editing, pausing, running and deleting one: `task_writes.py`). A watch
carries what it checks and its last result (`watch`); each of its runs, the verdict and reason."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from bruce_bot.scheduler.cron_words import describe_schedule
from bruce_bot.scheduler.timing import ScheduleError, describe_interval
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.storage.watches import WatchRecord
from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.api.params import BLANK_IS_NONE, Id, limit
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError, Time, iso

TaskStatus = Literal["active", "paused", "unconfirmed", "done", "cancelled", "missed"]
CANCELLABLE = ("active", "paused")
UNCONFIRMED = "unconfirmed"  # scheduler/planner.py: waits for the user's yes in the chat


class RunAnswer(BaseModel):
    """One firing of a task."""

    id: int
    scheduled_for: Time
    status: str
    late_seconds: float
    delivered_at: Time | None
    error: str | None
    verdict: str | None = Field(None, description="a watch's check: MATCH, NO_MATCH or UNSURE")
    reason: str | None = Field(None, description="a watch's check: the model's one-line reason")


class WatchAnswer(BaseModel):
    """What a watch checks, how often, and what its last check found."""

    target: str = Field(description="the URL it reads, or 'search: <query>'")
    url: str | None
    query: str | None
    condition: str
    interval_seconds: float
    interval_words: str = Field(description='e.g. "every 15 minutes"')
    checked_at: Time | None
    verdict: str | None = Field(description="the last check's: MATCH, NO_MATCH or UNSURE")
    reason: str | None
    failures: int = Field(description="checks failed in a row (0: the last one worked)")


def watch_answer(watch: WatchRecord) -> WatchAnswer:
    return WatchAnswer(
        target=watch.target,
        url=watch.url,
        query=watch.query,
        condition=watch.condition,
        interval_seconds=watch.interval_seconds,
        interval_words=describe_interval(watch.interval_seconds),
        checked_at=watch.checked_at,
        verdict=watch.verdict,
        reason=watch.reason,
        failures=watch.failures,
    )


class TaskAnswer(BaseModel):
    id: int
    session_id: int
    channel: str
    chat_id: str
    title: str
    mode: str
    content: str
    schedule: str = Field(description='"once" or "cron <expression>"')
    schedule_words: str = Field(
        description='the schedule in words, e.g. "every weekday at 08:00 America/Sao_Paulo"'
    )
    awaiting_confirmation: bool = Field(
        description="set up after Bruce read web content: it runs once the user says yes"
    )
    cron: str | None
    run_at: Time | None
    timezone: str
    status: str
    next_run_at: Time | None
    next_run: str | None = Field(description="the next run in words, in the task's timezone")
    created_at: Time
    last_run: RunAnswer | None
    watch: WatchAnswer | None = Field(None, description="mode 'watch': what it checks")


class TaskList(BaseModel):
    timezone: str = Field(description="app.timezone: the dashboard shows times in it")
    tasks: list[TaskAnswer]


class TaskRuns(BaseModel):
    task_id: int
    runs: list[RunAnswer]


class CancelledTask(BaseModel):
    task: TaskAnswer


class TasksQuery(BaseModel):
    status: Annotated[TaskStatus | None, BLANK_IS_NONE] = Field(
        None, description="only the tasks with this status"
    )
    limit: int = limit(200, "tasks")


class TaskId(BaseModel):
    task_id: Id = Field(description="an 'id' from GET /api/tasks")


class RunsQuery(TaskId):
    limit: int = limit(50, "runs")


async def task_answer(
    context: WebContext,
    task: TaskRecord,
    last_run: dict[str, Any] | None,
    watch: WatchRecord | None = None,
) -> TaskAnswer:
    planner = context.tasks.planner if context.tasks is not None else None
    words = describe_schedule(task.cron, task.run_at, task.timezone)
    if watch is not None:
        words = f"checks {describe_interval(watch.interval_seconds)}"
    fields = {
        **dataclasses.asdict(task),
        "schedule": f"cron {task.cron}" if task.cron else ("watch" if watch else "once"),
        "schedule_words": words,
        "awaiting_confirmation": task.status == UNCONFIRMED,
        "next_run": await planner.describe_next_run(task) if planner else iso(task.next_run_at),
        "last_run": last_run,
        "watch": watch_answer(watch) if watch is not None else None,
    }
    return TaskAnswer.model_validate(fields)


async def list_tasks(call: Call[TasksQuery, None]) -> TaskList:
    store = call.context.stores.tasks
    tasks = await store.listing(call.params.status, call.params.limit)
    last_runs = await store.last_runs([task.id for task in tasks])
    watches = await call.context.stores.watches.of_tasks(
        [task.id for task in tasks if task.mode == "watch"]
    )
    return TaskList(
        timezone=await call.context.display_timezone(),
        tasks=[
            await task_answer(call.context, task, last_runs.get(task.id), watches.get(task.id))
            for task in tasks
        ],
    )


async def existing_task(context: WebContext, task_id: int) -> TaskRecord:
    task = await context.stores.tasks.get(task_id)
    if task is None:
        raise ApiError(f"there is no task {task_id}; GET /api/tasks lists them", 404)
    return task


async def task_runs(call: Call[RunsQuery, None]) -> TaskRuns:
    task_id = call.params.task_id
    await existing_task(call.context, task_id)
    runs = await call.context.stores.tasks.recent_runs(task_id, call.params.limit)
    return TaskRuns(task_id=task_id, runs=[RunAnswer.model_validate(run) for run in runs])


async def cancel_task(call: Call[TaskId, None]) -> CancelledTask:
    context, task_id = call.context, call.params.task_id
    if context.tasks is None:
        raise ApiError("the scheduler is not running; start Bruce with `bruce run`", 503)
    task = await existing_task(context, task_id)
    if task.status not in CANCELLABLE:
        raise ApiError(
            f"task {task_id} is {task.status}; only active or paused tasks can be cancelled", 409
        )
    try:
        await context.tasks.planner.cancel(task_id, task.session_id)
    except ScheduleError:  # it finished (or was cancelled) in the meantime
        raise ApiError(f"task {task_id} is no longer active; reload the list", 409) from None
    cancelled = await existing_task(context, task_id)
    last_runs = await context.stores.tasks.last_runs([task_id])
    watch = await context.stores.watches.get(task_id)
    return CancelledTask(task=await task_answer(context, cancelled, last_runs.get(task_id), watch))


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/tasks",
        list_tasks,
        TaskList,
        "Proactive tasks: active and paused first, soonest next run first",
        params=TasksQuery,
    ),
    Endpoint(
        "GET",
        "/api/tasks/{task_id}/runs",
        task_runs,
        TaskRuns,
        "A task's firings, newest first",
        params=RunsQuery,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        "/api/tasks/{task_id}/cancel",
        cancel_task,
        CancelledTask,
        "Cancel an active or paused task and remove its scheduler job",
        params=TaskId,
        errors=(404, 409, 503),
    ),
)
