"""Scheduling tools: `proactive_create`, `proactive_list`, `proactive_cancel` (docs/design.md).

They are thin: validation of times lives in scheduler/timing.py and the work in the task service.
A schedule the model got wrong (a time in the past, a bad cron, both or neither of run_at and
cron, an unknown timezone) comes back as an error result that says how to fix it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar, Protocol

from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.scheduler.timing import ScheduleError
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.tools.registry import Tool, ToolContext, ToolError

CREATE_TOOL = "proactive_create"
LIST_TOOL = "proactive_list"
CANCEL_TOOL = "proactive_cancel"
# The tools that set up, show and cancel scheduled tasks: a scheduled run itself, and a
# sub-agent, get none of them.
# The watch tools (watches.py) count as scheduling tools too.
SCHEDULING_TOOLS = frozenset(
    {CREATE_TOOL, LIST_TOOL, CANCEL_TOOL, "watch_create", "watch_list", "watch_cancel"}
)


class TaskPort(Protocol):
    async def create(self, new: NewTask) -> TaskRecord: ...
    async def list_active(self, session_id: int) -> list[TaskRecord]: ...
    async def cancel(self, task_id: int, session_id: int) -> TaskRecord: ...
    async def describe(self, task: TaskRecord) -> str: ...
    async def describe_next_run(self, task: TaskRecord) -> str: ...


def call_origin(context: ToolContext, tool: str, arguments: dict[str, Any]) -> str | None:
    """The same tool, with the same arguments, in the same turn: one origin (None outside turns)."""
    if not context.turn_key:
        return None
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(f"{tool}\n{canonical}".encode()).hexdigest()[:24]
    return f"{context.turn_key}:{digest}"


def _session(context: ToolContext) -> int:
    if context.session_id is None:
        raise ToolError("scheduling needs a conversation; this call has none")
    return context.session_id


class ProactiveCreate(Tool):
    name = CREATE_TOOL
    effect = "own_state"
    confirms_itself = True  # after outside content: stored unconfirmed, Bruce asks
    description = (
        "Schedule something for later in this chat. execution_mode 'message' sends `content` as "
        "written when due (a plain reminder, no AI). execution_mode 'agent' runs `content` as an "
        "instruction for you when due (e.g. 'search today's tech news and summarise the top 3') "
        "and sends your answer. Give exactly one of run_at (once: ISO-8601 like "
        "2026-12-01T09:00, read in the user's timezone, or relative like +90s, +2m, +1h30m) or "
        "cron (recurring, 5 fields, e.g. '0 8 * * mon-fri')."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "execution_mode": {"type": "string", "enum": ["message", "agent"]},
            "content": {"type": "string", "minLength": 1, "maxLength": 8000},
            "run_at": {"type": "string", "minLength": 1},
            "cron": {"type": "string", "minLength": 1},
            "timezone": {"type": "string", "description": "IANA name; default: the user's"},
        },
        "required": ["title", "execution_mode", "content"],
        "additionalProperties": False,
    }

    def __init__(self, tasks: TaskPort) -> None:
        self._tasks = tasks

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        try:
            task = await self._tasks.create(
                NewTask(
                    session_id=_session(context),
                    channel=context.channel,
                    chat_id=context.chat_id,
                    title=arguments["title"],
                    mode=arguments["execution_mode"],
                    content=arguments["content"],
                    run_at=arguments.get("run_at"),
                    cron=arguments.get("cron"),
                    timezone=arguments.get("timezone"),
                    confirmed=not context.untrusted_input,
                    origin=call_origin(context, self.name, arguments),
                    created_by=context.person or None,
                )
            )
        except ScheduleError as exc:
            raise ToolError(str(exc)) from None
        when = await self._tasks.describe_next_run(task)
        repeat = f", then on cron '{task.cron}'" if task.cron else ""
        if task.status == "unconfirmed":
            return (
                f"Task {task.id} was stored but is NOT scheduled yet: this turn read content from "
                "outside (web pages or search results), so the user must confirm it first. "
                "Bruce asks the user, with the details, in the chat after your answer. Tell the "
                "user it waits "
                f"for their yes; do not say it is scheduled. Would run ({task.mode} mode): "
                f"{when}{repeat}."
            )
        return f"Task {task.id} scheduled ({task.mode} mode): next run {when}{repeat}."


class ProactiveList(Tool):
    name = LIST_TOOL
    effect = "reads"
    description = "List this chat's active reminders and scheduled briefings with their next run."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }

    def __init__(self, tasks: TaskPort) -> None:
        self._tasks = tasks

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        tasks = await self._tasks.list_active(_session(context))
        if not tasks:
            return "No active tasks in this chat."
        return "\n".join([await self._tasks.describe(task) for task in tasks])


class ProactiveCancel(Tool):
    name = CANCEL_TOOL
    effect = "own_state"
    description = "Cancel an active task of this chat by its id (see proactive_list)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"task_id": {"type": "integer", "minimum": 1}},
        "required": ["task_id"],
        "additionalProperties": False,
    }

    def __init__(self, tasks: TaskPort) -> None:
        self._tasks = tasks

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        try:
            task = await self._tasks.cancel(arguments["task_id"], _session(context))
        except ScheduleError as exc:
            raise ToolError(str(exc)) from None
        return f"Task {task.id} ('{task.title}') cancelled."


def proactive_tools(tasks: TaskPort) -> list[Tool]:
    return [ProactiveCreate(tasks), ProactiveList(tasks), ProactiveCancel(tasks)]
