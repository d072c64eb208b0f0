"""What the Logs page shows: `/api/tool-executions` (the audit log of tool calls) and
`/api/deliveries` (replies that did not reach their chat), both newest first, paged with `before`.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.api.params import BLANK_IS_NONE, Flag, OptionalId, limit
from bruce_bot.web.api.sessions import Whereabouts, whereabouts
from bruce_bot.web.wire import Time

LOG_TEXT_CHARS = 4000  # tool inputs and outputs in listings are clipped to this
NotDelivered = Literal["failed", "undelivered"]
NOT_DELIVERED: tuple[NotDelivered, ...] = ("failed", "undelivered")
OLDER = "older rows: ask again with before=<this>"


def clip(text: str | None) -> str | None:
    if text is None or len(text) <= LOG_TEXT_CHARS:
        return text
    return text[:LOG_TEXT_CHARS] + f"… [{len(text) - LOG_TEXT_CHARS} more characters]"


class ToolExecutionAnswer(Whereabouts):
    id: int
    session_id: int | None
    turn: int
    tool: str
    input: str | None
    output: str | None
    error: str | None
    is_error: bool
    duration_ms: float
    created_at: Time


class ToolExecutionList(BaseModel):
    tool_executions: list[ToolExecutionAnswer]
    next_before: int | None = Field(description=OLDER)


class ToolExecutionsQuery(BaseModel):
    session_id: OptionalId = Field(None, description="only the calls of this session")
    tool: Annotated[str | None, BLANK_IS_NONE] = Field(
        None, max_length=64, description="only the calls of this tool"
    )
    errors_only: Flag = Field(False, description="only the calls that failed")
    before: OptionalId = Field(None, description="only the calls with a smaller id")
    limit: int = limit(50, "calls")


async def tool_executions(call: Call[ToolExecutionsQuery, None]) -> ToolExecutionList:
    params = call.params
    rows = await call.context.stores.audit.tool_executions(
        session_id=params.session_id,
        tool_name=params.tool,
        errors_only=params.errors_only,
        before_id=params.before,
        limit=params.limit,
    )
    where = await whereabouts(call.context, (r.session_id for r in rows))
    answers = [
        {
            **dataclasses.asdict(r),
            **where.get(r.session_id, {}),
            "tool": r.tool_name,
            "input": clip(r.input),
            "output": clip(r.output),
            "error": clip(r.error),
            "is_error": r.error is not None,
            "duration_ms": round(r.duration_ms, 1),
        }
        for r in rows
    ]
    full = len(rows) == params.limit
    return ToolExecutionList.model_validate(
        {"tool_executions": answers, "next_before": rows[-1].id if full else None}
    )


class DeliveryAnswer(BaseModel):
    message_id: int
    session_id: int
    channel: str
    chat_id: str
    kind: str
    content: str | None
    status: str
    attempts: int
    error: str | None
    created_at: Time
    last_attempt_at: Time | None


class DeliveryList(BaseModel):
    deliveries: list[DeliveryAnswer]
    next_before: int | None = Field(description=OLDER)


class DeliveriesQuery(BaseModel):
    status: Annotated[NotDelivered | None, BLANK_IS_NONE] = Field(
        None, description="only these (both when absent)"
    )
    before: OptionalId = Field(None, description="only the messages with a smaller id")
    limit: int = limit(50, "messages")


async def deliveries(call: Call[DeliveriesQuery, None]) -> DeliveryList:
    params = call.params
    statuses = (params.status,) if params.status else NOT_DELIVERED
    rows = await call.context.stores.deliveries.not_delivered(statuses, params.before, params.limit)
    answers = [{**dataclasses.asdict(d), "content": clip(d.content)} for d in rows]
    full = len(rows) == params.limit
    return DeliveryList.model_validate(
        {"deliveries": answers, "next_before": rows[-1].message_id if full else None}
    )


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/tool-executions",
        tool_executions,
        ToolExecutionList,
        "The audit log of tool calls, newest first",
        params=ToolExecutionsQuery,
    ),
    Endpoint(
        "GET",
        "/api/deliveries",
        deliveries,
        DeliveryList,
        "Replies that did not reach their chat, newest first",
        params=DeliveriesQuery,
    ),
)
