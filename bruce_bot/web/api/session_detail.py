"""`/api/sessions/{id}`: everything about one conversation on one page, and deleting it.

The detail gathers what the session page shows besides the messages (which page through
`/messages`): the running summary, the goals as a checklist (done ones too), the skills and the
workflow the analytical brain switched on, the sub-agents' sessions, the scheduled tasks and the
artifacts. Deleting takes the session and its sub-agents' sessions for good: their scheduled
tasks are cancelled first (so no scheduler job is left to fire), the rows go in one transaction
(storage/session_removal.py), then their files: the artifacts', the stored pictures under
`<app.data_dir>/media/<session id>/` and run_code's workspaces (`<app.data_dir>/workspaces/`).
The detail lists the session's code runs too (run_code's audit rows). A session whose
messages a turn is still answering is not deleted (409): the turn would write its reply into a
session that is gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from pathlib import Path
from urllib.parse import quote

import structlog
from pydantic import BaseModel, Field

from bruce_bot.media.preparation import MEDIA_DIR
from bruce_bot.sandbox.workspace import remove_workspaces
from bruce_bot.scheduler.timing import ScheduleError
from bruce_bot.storage.session_removal import family_of, remove_session
from bruce_bot.storage.tasks import TaskStatus
from bruce_bot.tools.artifacts import artifact_file
from bruce_bot.tools.run_code import RUN_CODE_TOOL
from bruce_bot.web.api.artifacts import ArtifactAnswer
from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.api.params import Id
from bruce_bot.web.api.sessions import SessionAnswer
from bruce_bot.web.api.tasks import TaskAnswer, task_answer
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError, Time

log = structlog.get_logger(__name__)

OPEN_TASK_STATUSES: tuple[TaskStatus, ...] = ("active", "paused", "unconfirmed")


class SummaryAnswer(BaseModel):
    content: str
    covers_until_message_id: int = Field(description="the newest message the summary covers")


class GoalAnswer(BaseModel):
    id: int
    description: str
    status: str = Field(description="active or completed")
    parent_goal_id: int | None
    created_at: Time
    completed_at: Time | None


class CodeRunAnswer(BaseModel):
    """One run_code call, from the audit log (`tool_executions.details`)."""

    id: int
    created_at: Time
    language: str
    code: str = Field(description="the code, cut to 4,000 characters")
    exit_code: int | None = Field(description="None: killed, refused or not started")
    outcome: str = Field(description="ok, failed, killed (why), refused or not started")
    duration_ms: float
    output_bytes: int | None
    network: bool
    files: list[str] = Field(description="files the run created or changed in its workspace")
    sent: list[str] = Field(description="the out/ files sent to the chat (artifacts)")
    approval: dict[str, object] = Field(
        description="asked (bool), reason, approved, by (who answered), at (when), why"
    )


class SessionDetail(BaseModel):
    session: SessionAnswer
    parent_id: int | None = Field(description="the session a sub-agent's session works for")
    nickname: str | None
    active_skills: list[str]
    active_workflow: str | None
    summary: SummaryAnswer | None
    goals: list[GoalAnswer]
    children: list[SessionAnswer] = Field(description="the sessions of its sub-agents")
    tasks: list[TaskAnswer]
    artifacts: list[ArtifactAnswer]
    code_runs: list[CodeRunAnswer] = Field(description="the newest run_code calls, newest first")
    timezone: str = Field(description="app.timezone: the dashboard shows times in it")


class DeletedSession(BaseModel):
    session_ids: list[int] = Field(description="the session and its sub-agents' sessions")
    messages: int
    tasks_cancelled: int
    artifacts: int
    files_removed: int


class SessionId(BaseModel):
    session_id: Id = Field(description="an 'id' from GET /api/sessions")


async def _existing(context: WebContext, session_id: int) -> SessionAnswer:
    session = await context.stores.sessions.get(session_id)
    if session is None:
        raise ApiError(f"there is no session {session_id}; GET /api/sessions lists them", 404)
    return SessionAnswer.model_validate(session)


async def session_detail(call: Call[SessionId, None]) -> SessionDetail:
    context, session_id = call.context, call.params.session_id
    answer = await _existing(context, session_id)
    stores = context.stores
    record = await stores.sessions.get(session_id)
    assert record is not None
    summary = await stores.summaries.latest(session_id)
    tasks = await stores.tasks.listing(limit=500, session_id=session_id)
    last_runs = await stores.tasks.last_runs([task.id for task in tasks])
    artifacts = await stores.artifacts.list_recent(500, session_id)
    where = {"channel": record.channel, "chat_id": record.chat_id, "session_title": record.title}
    return SessionDetail(
        session=answer,
        parent_id=record.parent_id,
        nickname=record.nickname,
        active_skills=list(record.active_skills),
        active_workflow=record.active_workflow,
        summary=SummaryAnswer(**dataclasses.asdict(summary)) if summary else None,
        goals=[
            GoalAnswer.model_validate(dataclasses.asdict(goal))
            for goal in await stores.goals.of_session(session_id)
        ],
        children=[
            SessionAnswer.model_validate(child)
            for child in await stores.sessions.children(session_id)
        ],
        tasks=[await task_answer(context, task, last_runs.get(task.id)) for task in tasks],
        artifacts=[
            ArtifactAnswer.model_validate(
                {
                    **dataclasses.asdict(a),
                    **where,
                    "url": f"/artifacts/{a.uuid}/{quote(a.filename)}",
                }
            )
            for a in artifacts
        ],
        code_runs=await _code_runs(context, session_id),
        timezone=await context.display_timezone(),
    )


MAX_CODE_RUNS = 50
MAX_CODE_SHOWN = 4000


async def _code_runs(context: WebContext, session_id: int) -> list[CodeRunAnswer]:
    rows = await context.stores.audit.tool_executions(
        session_id=session_id, tool_name=RUN_CODE_TOOL, limit=MAX_CODE_RUNS
    )
    runs = []
    for row in rows:
        try:
            arguments = json.loads(row.input)
            details = json.loads(row.details or "{}")
        except ValueError:
            continue
        if not isinstance(arguments, dict) or not isinstance(details, dict):
            continue
        approval = details.get("approval")
        runs.append(
            CodeRunAnswer(
                id=row.id,
                created_at=row.created_at,
                language=str(arguments.get("language", "")),
                code=str(arguments.get("code", ""))[:MAX_CODE_SHOWN],
                exit_code=details.get("exit_code"),
                outcome=_outcome(details, row.error is not None),
                duration_ms=row.duration_ms,
                output_bytes=details.get("output_bytes"),
                network=bool(details.get("network")),
                files=[str(f) for f in details.get("files", [])],
                sent=[str(f) for f in details.get("sent", [])],
                approval=approval if isinstance(approval, dict) else {},
            )
        )
    return runs


def _outcome(details: dict[str, object], is_error: bool) -> str:
    if details.get("failure"):
        return "not started"
    if details.get("killed_for"):
        return f"killed ({details['killed_for']})"
    if is_error:
        return "refused"
    return "ok" if details.get("exit_code") == 0 else "failed"


async def delete_session(call: Call[SessionId, None]) -> DeletedSession:
    context, session_id = call.context, call.params.session_id
    await _existing(context, session_id)
    stores = context.stores
    family = await family_of(stores, session_id)
    for member in family:
        if await stores.messages.has_unanswered(member):
            raise ApiError(
                f"Bruce is still answering in session {member}; try again when the reply is "
                "out (nothing was deleted)",
                409,
            )
    cancelled = 0
    for member in family:
        for status in OPEN_TASK_STATUSES:
            for task in await stores.tasks.with_status(status, member):
                if context.tasks is None:
                    continue  # no scheduler here: its start-up drops the jobs of missing tasks
                try:
                    await context.tasks.planner.cancel(task.id, member)
                    cancelled += 1
                except ScheduleError:  # it finished meanwhile: nothing left to fire
                    pass
    removed = await remove_session(stores, family)
    files = await asyncio.to_thread(
        _remove_files, context.app.data_dir, removed.session_ids, removed.artifacts
    )
    log.info(
        "session_deleted",
        session_ids=removed.session_ids,
        messages=removed.messages,
        tasks_cancelled=cancelled,
        files_removed=files,
    )
    return DeletedSession(
        session_ids=removed.session_ids,
        messages=removed.messages,
        tasks_cancelled=cancelled,
        artifacts=len(removed.artifacts),
        files_removed=files,
    )


def _remove_files(data_dir: Path, session_ids: list[int], artifacts: list[tuple[str, str]]) -> int:
    """Delete the artifacts' files and the sessions' stored media; returns how many files."""
    removed = 0
    root = data_dir / "artifacts"
    for artifact_uuid, filename in artifacts:
        path = artifact_file(root, artifact_uuid, filename)
        if path is None:
            continue
        try:
            path.unlink()
            removed += 1
            path.parent.rmdir()  # the artifact's own folder, empty now
        except FileNotFoundError:
            pass
        except OSError as exc:  # a folder with something else in it is left alone
            log.warning("artifact_file_kept", path=str(path.parent), error=str(exc))
    for session_id in session_ids:
        media = data_dir / MEDIA_DIR / str(session_id)
        if media.is_dir():
            removed += sum(1 for path in media.rglob("*") if path.is_file())
            shutil.rmtree(media, ignore_errors=True)
    removed += remove_workspaces(data_dir, session_ids)  # run_code's workspaces
    return removed


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/sessions/{session_id}",
        session_detail,
        SessionDetail,
        "A session: summary, goals, skills and workflow, sub-agents, tasks, artifacts",
        params=SessionId,
        errors=(404,),
    ),
    Endpoint(
        "DELETE",
        "/api/sessions/{session_id}",
        delete_session,
        DeletedSession,
        "Delete a session, its sub-agents' sessions, their tasks, artifacts and files",
        params=SessionId,
        errors=(404, 409),
    ),
)
