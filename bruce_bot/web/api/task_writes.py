"""`/api/tasks` writes from the dashboard: create and edit a task, run it now, pause, resume and
delete it, all through the task service (so the scheduler's job always follows the row).

A task is given as the Schedules form fills it: the chat to deliver to (a session), title, mode,
content, and either `run_at` (once: a local time in `timezone`, like 2026-12-01T09:00, or a
relative one like +2h) or `cron` (five fields), and the timezone (empty: `app.timezone`). Each
refusal names the field that must change: a cron that does not parse or never fires, an unknown
timezone, a time in the past, a chat that does not exist, a briefing more frequent than
`scheduler.min_agent_interval_minutes`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from bruce_bot.scheduler.editing import TaskStateError
from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.scheduler.timing import ScheduleError, next_cron_time, parse_run_at, zone_of
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams
from bruce_bot.web.api.params import Id
from bruce_bot.web.api.tasks import TaskAnswer, TaskId, existing_task, task_answer
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError

if TYPE_CHECKING:
    from bruce_bot.scheduler.service import TaskService

NOT_RUNNING = "the scheduler is not running; start Bruce with `bruce run`"


class TaskInput(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "session_id": 1,
                    "title": "Morning briefing",
                    "mode": "agent",
                    "content": "Summarise today's calendar and the weather",
                    "cron": "0 8 * * 1-5",
                    "timezone": "America/Sao_Paulo",
                }
            ]
        }
    )

    session_id: Id = Field(description="the chat to deliver to: an 'id' from GET /api/sessions")
    title: str = Field(min_length=1, max_length=200)
    mode: Literal["message", "agent"] = Field(
        description="message: send the text as it is; agent: Bruce does what it says and answers"
    )
    content: str = Field(min_length=1, max_length=4000)
    run_at: str | None = Field(
        None,
        max_length=64,
        description="once: a local time like 2026-12-01T09:00 (in timezone), or +2h",
    )
    cron: str | None = Field(None, max_length=120, description="recurring: five cron fields")
    timezone: str | None = Field(None, max_length=64, description="IANA name; empty: app's")


class TaskWritten(BaseModel):
    task: TaskAnswer


class DeletedTask(BaseModel):
    task_id: int


def _service(context: WebContext) -> TaskService:
    if context.tasks is None:
        raise ApiError(NOT_RUNNING, 503)
    return context.tasks


async def _checked(context: WebContext, body: TaskInput) -> NewTask:
    """The task asked for, each field checked on its own so a refusal can name it."""
    run_at = (body.run_at or "").strip() or None
    cron = " ".join((body.cron or "").split()) or None
    if bool(run_at) == bool(cron):
        raise ApiError(
            "give either field 'run_at' (a one-off time) or field 'cron' (a recurring "
            "schedule), not both and not neither"
        )
    timezone = (body.timezone or "").strip() or await context.display_timezone()
    try:
        zone = zone_of(timezone)
    except ScheduleError as exc:
        raise ApiError(f"field 'timezone': {exc}") from None
    now = context.clock()
    try:
        if run_at:
            parse_run_at(run_at, zone, now)
        elif cron and next_cron_time(cron, zone, now) is None:
            raise ScheduleError(f"cron '{cron}' never fires")
    except ScheduleError as exc:
        raise ApiError(f"field '{'run_at' if run_at else 'cron'}': {exc}") from None
    session = await context.stores.sessions.get(body.session_id)
    if session is None:
        raise ApiError(
            f"field 'session_id': there is no session {body.session_id}; GET /api/sessions "
            "lists the chats"
        )
    return NewTask(
        session_id=session.id,
        channel=session.channel,
        chat_id=session.chat_id,
        title=body.title.strip(),
        mode=body.mode,
        content=body.content,
        run_at=run_at,
        cron=cron,
        timezone=zone.key,
    )


async def _answer(context: WebContext, task: TaskRecord) -> TaskWritten:
    last_runs = await context.stores.tasks.last_runs([task.id])
    watch = await context.stores.watches.get(task.id)
    return TaskWritten(task=await task_answer(context, task, last_runs.get(task.id), watch))


def _refused(exc: ScheduleError, new: NewTask) -> ApiError:
    """What the planner refused that the field checks could not see (a briefing too often, too
    many tasks in the chat)."""
    field = "cron" if new.cron else "run_at"
    if "active tasks" in str(exc):
        return ApiError(f"field 'session_id': {exc}", 409)
    return ApiError(f"field '{field}': {exc}")


async def create_task(call: Call[NoParams, TaskInput]) -> TaskWritten:
    context = call.context
    service = _service(context)
    new = await _checked(context, call.body)
    try:
        task = await service.planner.create(new)
    except ScheduleError as exc:
        raise _refused(exc, new) from None
    return await _answer(context, task)


async def _act(call: Call[TaskId, None] | Call[TaskId, TaskInput], action: str) -> TaskWritten:
    context, task_id = call.context, call.params.task_id
    service = _service(context)
    await existing_task(context, task_id)
    try:
        if action == "edit":
            assert isinstance(call.body, TaskInput)
            new = await _checked(context, call.body)
            try:
                task = await service.editor.edit(task_id, new)
            except ScheduleError as exc:
                raise _refused(exc, new) from None
        elif action == "pause":
            task = await service.editor.pause(task_id)
        elif action == "resume":
            task = await service.editor.resume(task_id)
        else:
            task = await service.editor.run_now(task_id)
    except TaskStateError as exc:
        raise ApiError(str(exc), 409) from None
    return await _answer(context, task)


async def edit_task(call: Call[TaskId, TaskInput]) -> TaskWritten:
    return await _act(call, "edit")


async def pause_task(call: Call[TaskId, None]) -> TaskWritten:
    return await _act(call, "pause")


async def resume_task(call: Call[TaskId, None]) -> TaskWritten:
    return await _act(call, "resume")


async def run_task_now(call: Call[TaskId, None]) -> TaskWritten:
    return await _act(call, "run")


async def delete_task(call: Call[TaskId, None]) -> DeletedTask:
    context, task_id = call.context, call.params.task_id
    service = _service(context)
    task = await existing_task(context, task_id)
    if task.status in ("active", "paused", "unconfirmed"):
        try:
            await service.planner.cancel(task_id, task.session_id)  # its job goes first
        except ScheduleError:
            pass  # it finished meanwhile: no job left
    await context.stores.tasks.delete(task_id)
    return DeletedTask(task_id=task_id)


ENDPOINTS = (
    Endpoint(
        "POST",
        "/api/tasks",
        create_task,
        TaskWritten,
        "Create a task: a reminder (message) or a briefing (agent), once or on a cron",
        body=TaskInput,
        status=201,
        errors=(409, 503),
    ),
    Endpoint(
        "PUT",
        "/api/tasks/{task_id}",
        edit_task,
        TaskWritten,
        "Edit an open task (its id and runs stay; its job follows the new schedule)",
        params=TaskId,
        body=TaskInput,
        errors=(404, 409, 503),
    ),
    Endpoint(
        "POST",
        "/api/tasks/{task_id}/run",
        run_task_now,
        TaskWritten,
        "Run an active task once now (the schedule stays as it is)",
        params=TaskId,
        errors=(404, 409, 503),
    ),
    Endpoint(
        "POST",
        "/api/tasks/{task_id}/pause",
        pause_task,
        TaskWritten,
        "Pause an active task: it does not fire until resumed",
        params=TaskId,
        errors=(404, 409, 503),
    ),
    Endpoint(
        "POST",
        "/api/tasks/{task_id}/resume",
        resume_task,
        TaskWritten,
        "Resume a paused task from its next run after now",
        params=TaskId,
        errors=(404, 409, 503),
    ),
    Endpoint(
        "DELETE",
        "/api/tasks/{task_id}",
        delete_task,
        DeletedTask,
        "Delete a task and its runs (an open one is cancelled first)",
        params=TaskId,
        errors=(404, 503),
    ),
)
