"""The dashboard's JSON API (DESIGN §6): sessions and their messages, scheduled tasks, artifacts,
the tool log, failed deliveries, editable settings and token usage.

Every route sits behind the app's auth middleware. Query parameters are validated before any
query runs: a bad one is a 400 whose message names the parameter and its allowed values, and
every listing has a bounded `limit`. Times are ISO-8601 in UTC; the pages show them in
`app.timezone`, which the answers that need it carry as `timezone`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bruce_bot.scheduler.timing import ScheduleError
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.settings import SYSTEM_PROMPT_SETTING
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.web.context import WebContext

MAX_BODY_BYTES = 1_000_000
MAX_ID = 2**63 - 1  # SQL's 64-bit integers: a larger id would overflow the query
MAX_LIMIT = 500
MAX_USAGE_DAYS = 366
LOG_TEXT_CHARS = 4000  # tool inputs and outputs in listings are clipped to this
TASK_STATUSES = ("active", "paused", "done", "cancelled", "missed")
CANCELLABLE = ("active", "paused")
NOT_DELIVERED = ("failed", "undelivered")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


class ApiError(Exception):
    """A request the client must fix: answered with `status` and `{"error": message}`."""

    status = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class BadRequest(ApiError):
    status = 400


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def json_body(request: Request, example: str) -> dict[str, Any]:
    """The request's JSON object, read with a size cap (a chunked body is counted as it comes);
    `example` shows a valid body in the error messages."""
    declared = request.headers.get("content-length")
    too_large = f"request body too large; the limit is {MAX_BODY_BYTES} bytes"
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(too_large, 413)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise ApiError(too_large, 413)
    try:
        data = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest(f"body must be JSON, e.g. {example}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"body must be a JSON object, e.g. {example}")
    return data


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


# ---- parameters ------------------------------------------------------------------------------


def _shown(text: str) -> str:
    """A parameter's value as quoted back in an error message (cut short)."""
    return repr(text if len(text) <= 40 else text[:40] + "…")


def _integer(text: str, name: str, low: int, high: int) -> int:
    try:
        value: int | None = int(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise BadRequest(f"'{name}' must be an integer from {low} to {high}, not {_shown(text)}")
    return value


def int_param(request: Request, name: str, default: int, low: int = 1, high: int = MAX_ID) -> int:
    text = request.query_params.get(name)
    return default if text is None else _integer(text, name, low, high)


def optional_int_param(request: Request, name: str) -> int | None:
    text = request.query_params.get(name)
    return None if text in (None, "") else _integer(text, name, 1, MAX_ID)


def bool_param(request: Request, name: str) -> bool:
    text = request.query_params.get(name, "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise BadRequest(f"'{name}' must be true or false, not {_shown(text)}")


def choice_param(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    text = request.query_params.get(name)
    if text in (None, ""):
        return None
    if text not in choices:
        raise BadRequest(f"'{name}' must be one of {', '.join(choices)}, not {_shown(text)}")
    return text


def path_id(request: Request, name: str) -> int:
    return _integer(request.path_params[name], name, 1, MAX_ID)


# ---- answers ---------------------------------------------------------------------------------


def _session_json(session: SessionRecord) -> dict[str, Any]:
    return {
        "id": session.id,
        "channel": session.channel,
        "chat_id": session.chat_id,
        "title": session.title,
        "kind": session.kind,
        "last_message_at": iso(session.last_message_at),
    }


def _where(sessions: dict[int, SessionRecord], session_id: int | None) -> dict[str, Any]:
    """The channel and chat of a row that belongs to a session (None when it has none)."""
    session = sessions.get(session_id) if session_id is not None else None
    return {
        "channel": session.channel if session else None,
        "chat_id": session.chat_id if session else None,
        "session_title": session.title if session else None,
    }


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= LOG_TEXT_CHARS:
        return text
    return text[:LOG_TEXT_CHARS] + f"… [{len(text) - LOG_TEXT_CHARS} more characters]"


def _run_json(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": run["id"],
        "scheduled_for": iso(run["scheduled_for"]),
        "status": run["status"],
        "late_seconds": run["late_seconds"],
        "delivered_at": iso(run["delivered_at"]),
        "error": run["error"],
    }


@dataclass(frozen=True, slots=True)
class EditableSetting:
    """A setting the dashboard may change; the database value wins over the YAML one."""

    key: str
    label: str
    description: str
    max_chars: int


EDITABLE_SETTINGS = {
    setting.key: setting
    for setting in (
        EditableSetting(
            SYSTEM_PROMPT_SETTING,
            "Base system prompt",
            "The first layer of every agent request: who Bruce is and how it behaves. "
            "Takes effect from the next message.",
            50_000,
        ),
    )
}


def usage_days(days: int, zone: ZoneInfo, now: datetime) -> list[tuple[date, datetime]]:
    """The last `days` days in `zone` (today included), oldest first, each with its start."""
    today = now.astimezone(zone).date()
    first = today - timedelta(days=days - 1)
    return [
        (day, datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC))
        for day in (first + timedelta(days=n) for n in range(days))
    ]


# ---- routes ----------------------------------------------------------------------------------


def dashboard_api_routes(context: WebContext) -> list[BaseRoute]:
    stores = context.stores
    zone = ZoneInfo(context.timezone)

    async def list_sessions(request: Request) -> Response:
        limit = int_param(request, "limit", 100, high=MAX_LIMIT)
        sessions = await stores.sessions.list_recent(limit)
        return JSONResponse({"sessions": [_session_json(s) for s in sessions]})

    async def session_messages(request: Request) -> Response:
        session_id = path_id(request, "session_id")
        after = int_param(request, "after", 0, low=0)
        limit = int_param(request, "limit", 200, high=MAX_LIMIT)
        session = await stores.sessions.get(session_id)
        if session is None:
            return error(404, f"there is no session {session_id}; GET /api/sessions lists them")
        rows = await stores.messages.recent(session_id, after, limit)
        return JSONResponse(
            {
                "session": _session_json(session),
                "messages": [
                    {
                        "id": m.id,
                        "role": m.role,
                        "kind": m.kind,
                        "author": m.author,
                        "content": m.content,
                        "status": m.status,
                        "created_at": iso(m.created_at),
                    }
                    for m in rows
                ],
                # More may follow: ask again with after=<this>.
                "next_after": rows[-1].id if len(rows) == limit else None,
            }
        )

    def task_json(task: TaskRecord, last_run: dict[str, Any] | None) -> dict[str, Any]:
        service = context.tasks
        return {
            "id": task.id,
            "session_id": task.session_id,
            "channel": task.channel,
            "chat_id": task.chat_id,
            "title": task.title,
            "mode": task.mode,
            "content": task.content,
            "schedule": f"cron {task.cron}" if task.cron else "once",
            "cron": task.cron,
            "run_at": iso(task.run_at),
            "timezone": task.timezone,
            "status": task.status,
            "next_run_at": iso(task.next_run_at),
            "next_run": service.describe_next_run(task) if service else iso(task.next_run_at),
            "created_at": iso(task.created_at),
            "last_run": _run_json(last_run) if last_run else None,
        }

    async def list_tasks(request: Request) -> Response:
        status = choice_param(request, "status", TASK_STATUSES)
        limit = int_param(request, "limit", 200, high=MAX_LIMIT)
        tasks = await stores.tasks.listing(status, limit)
        last_runs = await stores.tasks.last_runs([task.id for task in tasks])
        return JSONResponse(
            {
                "timezone": context.timezone,
                "tasks": [task_json(task, last_runs.get(task.id)) for task in tasks],
            }
        )

    async def task_runs(request: Request) -> Response:
        task_id = path_id(request, "task_id")
        limit = int_param(request, "limit", 50, high=MAX_LIMIT)
        if await stores.tasks.get(task_id) is None:
            return error(404, f"there is no task {task_id}; GET /api/tasks lists them")
        runs = await stores.tasks.recent_runs(task_id, limit)
        return JSONResponse({"task_id": task_id, "runs": [_run_json(run) for run in runs]})

    async def cancel_task(request: Request) -> Response:
        task_id = path_id(request, "task_id")
        if context.tasks is None:
            return error(503, "the scheduler is not running; start Bruce with `bruce run`")
        task = await stores.tasks.get(task_id)
        if task is None:
            return error(404, f"there is no task {task_id}; GET /api/tasks lists them")
        if task.status not in CANCELLABLE:
            return error(
                409,
                f"task {task_id} is {task.status}; only active or paused tasks can be cancelled",
            )
        try:
            await context.tasks.cancel(task_id, task.session_id)
        except ScheduleError:  # it finished (or was cancelled) in the meantime
            return error(409, f"task {task_id} is no longer active; reload the list")
        cancelled = await stores.tasks.get(task_id)
        assert cancelled is not None
        last_runs = await stores.tasks.last_runs([task_id])
        return JSONResponse({"task": task_json(cancelled, last_runs.get(task_id))})

    async def list_artifacts(request: Request) -> Response:
        session_id = optional_int_param(request, "session_id")
        limit = int_param(request, "limit", 100, high=MAX_LIMIT)
        artifacts = await stores.artifacts.list_recent(limit, session_id)
        sessions = await stores.sessions.get_many(
            {a.session_id for a in artifacts if a.session_id is not None}
        )
        return JSONResponse(
            {
                "artifacts": [
                    {
                        "uuid": a.uuid,
                        "title": a.title,
                        "filename": a.filename,
                        "content_type": a.content_type,
                        "size_bytes": a.size_bytes,
                        "session_id": a.session_id,
                        **_where(sessions, a.session_id),
                        "created_at": iso(a.created_at),
                        "url": f"/artifacts/{a.uuid}/{quote(a.filename)}",
                    }
                    for a in artifacts
                ]
            }
        )

    async def tool_executions(request: Request) -> Response:
        session_id = optional_int_param(request, "session_id")
        tool = request.query_params.get("tool") or None
        if tool is not None and len(tool) > 64:
            raise BadRequest("'tool' must be a tool name of at most 64 characters")
        errors_only = bool_param(request, "errors_only")
        before = optional_int_param(request, "before")
        limit = int_param(request, "limit", 50, high=MAX_LIMIT)
        rows = await stores.audit.tool_executions(
            session_id=session_id,
            tool_name=tool,
            errors_only=errors_only,
            before_id=before,
            limit=limit,
        )
        sessions = await stores.sessions.get_many(
            {r.session_id for r in rows if r.session_id is not None}
        )
        return JSONResponse(
            {
                "tool_executions": [
                    {
                        "id": r.id,
                        "session_id": r.session_id,
                        **_where(sessions, r.session_id),
                        "turn": r.turn,
                        "tool": r.tool_name,
                        "input": _clip(r.input),
                        "output": _clip(r.output),
                        "error": _clip(r.error),
                        "is_error": r.error is not None,
                        "duration_ms": round(r.duration_ms, 1),
                        "created_at": iso(r.created_at),
                    }
                    for r in rows
                ],
                # Older rows: ask again with before=<this>.
                "next_before": rows[-1].id if len(rows) == limit else None,
            }
        )

    async def deliveries(request: Request) -> Response:
        status = choice_param(request, "status", NOT_DELIVERED)
        before = optional_int_param(request, "before")
        limit = int_param(request, "limit", 50, high=MAX_LIMIT)
        rows = await stores.deliveries.not_delivered(
            (status,) if status else NOT_DELIVERED, before, limit
        )
        return JSONResponse(
            {
                "deliveries": [
                    {
                        "message_id": d.message_id,
                        "session_id": d.session_id,
                        "channel": d.channel,
                        "chat_id": d.chat_id,
                        "kind": d.kind,
                        "content": _clip(d.content),
                        "status": d.status,
                        "attempts": d.attempts,
                        "error": d.error,
                        "created_at": iso(d.created_at),
                        "last_attempt_at": iso(d.last_attempt_at),
                    }
                    for d in rows
                ],
                "next_before": rows[-1].message_id if len(rows) == limit else None,
            }
        )

    async def setting_json(setting: EditableSetting) -> dict[str, Any]:
        config_value = context.config_settings.get(setting.key)
        stored = await stores.settings.get(setting.key)
        return {
            "key": setting.key,
            "label": setting.label,
            "description": setting.description,
            "max_chars": setting.max_chars,
            "value": config_value if stored is None else stored,
            "config_value": config_value,
            "source": "config" if stored is None else "dashboard",
        }

    def editable(request: Request) -> EditableSetting:
        key = request.path_params["key"]
        setting = EDITABLE_SETTINGS.get(key)
        if setting is None:
            raise ApiError(
                f"'{key[:100]}' is not a setting the dashboard edits; "
                f"editable: {', '.join(EDITABLE_SETTINGS)}",
                404,
            )
        return setting

    async def list_settings(request: Request) -> Response:
        return JSONResponse(
            {"settings": [await setting_json(s) for s in EDITABLE_SETTINGS.values()]}
        )

    async def put_setting(request: Request) -> Response:
        setting = editable(request)
        data = await json_body(request, example='{"value": "..."}')
        value = data.get("value")
        if not isinstance(value, str) or not value.strip():
            raise BadRequest("field 'value' is required and must be a non-empty string")
        if len(value) > setting.max_chars:
            raise BadRequest(
                f"'value' has {len(value)} characters; {setting.key} takes at most "
                f"{setting.max_chars}"
            )
        await stores.settings.set(setting.key, value)
        return JSONResponse({"setting": await setting_json(setting)})

    async def reset_setting(request: Request) -> Response:
        setting = editable(request)
        await stores.settings.unset(setting.key)
        return JSONResponse({"setting": await setting_json(setting)})

    async def usage(request: Request) -> Response:
        days = int_param(request, "days", 30, high=MAX_USAGE_DAYS)
        rows = await stores.audit.usage_by_day(usage_days(days, zone, context.clock()))
        fields = (
            "calls",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "errors",
        )
        return JSONResponse(
            {
                "days": days,
                "timezone": context.timezone,
                "rows": [
                    {
                        "day": row.day.isoformat(),
                        "model": row.model,
                        "purpose": row.purpose,
                        **{name: getattr(row, name) for name in fields},
                    }
                    for row in rows
                ],
                "totals": {name: sum(getattr(row, name) for row in rows) for name in fields},
            }
        )

    return [
        Route("/api/sessions", list_sessions),
        Route("/api/sessions/{session_id}/messages", session_messages),
        Route("/api/tasks", list_tasks),
        Route("/api/tasks/{task_id}/runs", task_runs),
        Route("/api/tasks/{task_id}/cancel", cancel_task, methods=["POST"]),
        Route("/api/artifacts", list_artifacts),
        Route("/api/tool-executions", tool_executions),
        Route("/api/deliveries", deliveries),
        Route("/api/settings", list_settings),
        Route("/api/settings/{key:path}", put_setting, methods=["PUT"]),
        Route("/api/settings/{key:path}", reset_setting, methods=["DELETE"]),
        Route("/api/usage", usage),
    ]
