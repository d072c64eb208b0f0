"""`/api/approvals`: the runs waiting for the user's approval (run_code's questions, asked in
their chat with Run / Deny buttons: agent/asking.py), and answering one from the dashboard.

The list holds the questions still open (asked, not answered, not expired), each with the whole
request as the chat shows it, why it was asked and when it expires. `POST /api/approvals/{id}`
with `{"decision": "run"}` or `{"decision": "deny"}` answers it as the chat's buttons would,
recorded as answered by "dashboard"; a question no longer open is a 409.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bruce_bot.approval_desk import DASHBOARD, ApprovalDesk
from bruce_bot.web.api.endpoint import FROM_RECORD, Call, Endpoint, NoParams
from bruce_bot.web.api.params import Id
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError


class ApprovalAnswer(BaseModel):
    model_config = FROM_RECORD

    id: int
    session_id: int
    channel: str
    chat_id: str
    tool: str
    shown: str = Field(description="what the user is asked to approve, whole (the code)")
    reason: str = Field(description="why Bruce asks")
    asked_at: datetime
    expires_at: datetime = Field(description="no answer by then is a denial")


class ApprovalsAnswer(BaseModel):
    approvals: list[ApprovalAnswer]


class ApprovalId(BaseModel):
    approval_id: Id = Field(description="an 'id' from GET /api/approvals")


class Decision(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"decision": "run"}]})

    decision: Literal["run", "deny"]


class DecisionAnswer(BaseModel):
    id: int
    decision: Literal["run", "deny"]
    reply: str = Field(description="what Bruce says of it")


def _approver(context: WebContext) -> ApprovalDesk:
    approver = context.approver
    if approver is None:
        raise ApiError("approvals are not available in this process", 503)
    return approver


async def list_approvals(call: Call[NoParams, None]) -> ApprovalsAnswer:
    approver = call.context.approver
    pending = await approver.pending() if approver is not None else []
    return ApprovalsAnswer(approvals=[ApprovalAnswer.model_validate(p) for p in pending])


async def decide(call: Call[ApprovalId, Decision]) -> DecisionAnswer:
    approver = _approver(call.context)
    question_id = call.params.approval_id
    if question_id not in {p.id for p in await approver.pending()}:
        if await call.context.stores.approvals.get(question_id) is None:
            raise ApiError(f"there is no approval {question_id}", 404)
        raise ApiError(f"approval {question_id} is no longer waiting for an answer", 409)
    run = call.body.decision == "run"
    decided = await approver.decide(question_id, run, DASHBOARD)
    if not decided.taken:
        raise ApiError(decided.reply, 409)  # answered or expired at the same moment
    return DecisionAnswer(id=question_id, decision=call.body.decision, reply=decided.reply)


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/approvals",
        list_approvals,
        ApprovalsAnswer,
        "The runs waiting for the user's approval",
    ),
    Endpoint(
        "POST",
        "/api/approvals/{approval_id:int}",
        decide,
        DecisionAnswer,
        "Answer a waiting approval: run it once, or deny it",
        params=ApprovalId,
        body=Decision,
        errors=(404, 409, 503),
    ),
)
