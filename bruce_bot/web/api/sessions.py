"""`/api/sessions`: the conversations, most recent activity first, and a session's messages, each
reply with the tool calls of the turn that wrote it (`tool_executions.answers_message_id` names
the last user message a turn answered; the reply lists those it answers in `extra["answers"]`).
A turn that wrote no reply (cut short, or still running) shows its tool calls under the user
message it was answering."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from bruce_bot.storage.messages import ANSWERS, StoredMessage
from bruce_bot.web.api.endpoint import FROM_RECORD, Call, Endpoint
from bruce_bot.web.api.params import MAX_ID, Id, limit
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError, Time


class SessionAnswer(BaseModel):
    model_config = FROM_RECORD

    id: int
    channel: str
    chat_id: str
    title: str | None
    kind: str
    last_message_at: Time | None


class SessionList(BaseModel):
    sessions: list[SessionAnswer]


class ToolCallAnswer(BaseModel):
    """One tool the model called in the turn, with what it was given and what came back."""

    model_config = FROM_RECORD

    id: int
    tool_name: str
    input: str = Field(description="the arguments, as JSON text")
    output: str | None
    error: str | None
    duration_ms: float
    created_at: Time


class MessageAnswer(BaseModel):
    model_config = FROM_RECORD

    id: int
    role: str
    kind: str
    author: str | None
    content: str
    status: str
    created_at: Time
    tool_calls: list[ToolCallAnswer] = Field(
        default_factory=list, description="the tools called by the turn that wrote this reply"
    )


class SessionMessages(BaseModel):
    session: SessionAnswer
    messages: list[MessageAnswer]
    next_after: int | None = Field(description="more may follow: ask again with after=<this>")


class Whereabouts(BaseModel):
    """The channel and chat of a row that belongs to a session (all None when it has none)."""

    channel: str | None = None
    chat_id: str | None = None
    session_title: str | None = None


async def whereabouts(
    context: WebContext, session_ids: Iterable[int | None]
) -> dict[int | None, dict[str, str | None]]:
    """The `Whereabouts` fields of each of these sessions, by id, for rows listed together."""
    sessions = await context.stores.sessions.get_many({i for i in session_ids if i is not None})
    return {
        key: {"channel": s.channel, "chat_id": s.chat_id, "session_title": s.title}
        for key, s in sessions.items()
    }


class SessionsQuery(BaseModel):
    limit: int = limit(100, "sessions")


class MessagesQuery(BaseModel):
    session_id: Id = Field(description="an 'id' from GET /api/sessions")
    after: int = Field(0, ge=0, le=MAX_ID, description="only messages with a larger id")
    limit: int = limit(200, "messages")


async def list_sessions(call: Call[SessionsQuery, None]) -> SessionList:
    sessions = await call.context.stores.sessions.list_recent(call.params.limit)
    return SessionList(sessions=[SessionAnswer.model_validate(s) for s in sessions])


async def session_messages(call: Call[MessagesQuery, None]) -> SessionMessages:
    stores, params = call.context.stores, call.params
    session = await stores.sessions.get(params.session_id)
    if session is None:
        raise ApiError(
            f"there is no session {params.session_id}; GET /api/sessions lists them", 404
        )
    rows = await stores.messages.recent(params.session_id, params.after, params.limit)
    return SessionMessages(
        session=SessionAnswer.model_validate(session),
        messages=await with_tool_calls(call.context, rows),
        next_after=rows[-1].id if len(rows) == params.limit else None,
    )


async def with_tool_calls(context: WebContext, rows: list[StoredMessage]) -> list[MessageAnswer]:
    """The messages, each reply carrying the tool calls of its turn (see the module)."""
    user_ids = [m.id for m in rows if m.role == "user"]
    executions = await context.stores.audit.executions_answering(user_ids) if user_ids else []
    by_answered: dict[int, list[ToolCallAnswer]] = {}
    for execution in executions:
        if execution.answers_message_id is not None:
            call = ToolCallAnswer.model_validate(execution)
            by_answered.setdefault(execution.answers_message_id, []).append(call)
    answers = [MessageAnswer.model_validate(m) for m in rows]
    for row, message in zip(rows, answers, strict=True):
        answered = (row.extra or {}).get(ANSWERS) if row.role == "assistant" else None
        if isinstance(answered, list) and answered:
            for message_id in answered:
                message.tool_calls += by_answered.pop(message_id, [])
    for row, message in zip(rows, answers, strict=True):  # turns that wrote no reply (yet)
        if row.role == "user":
            message.tool_calls += by_answered.pop(row.id, [])
    return answers


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/sessions",
        list_sessions,
        SessionList,
        "Sessions, most recent activity first",
        params=SessionsQuery,
    ),
    Endpoint(
        "GET",
        "/api/sessions/{session_id}/messages",
        session_messages,
        SessionMessages,
        "A session's messages of every kind, oldest first",
        params=MessagesQuery,
        errors=(404,),
    ),
)
