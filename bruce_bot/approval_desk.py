"""What the dashboard sees of the runs waiting for the user's approval (agent/asking.py keeps
them): the open questions, and answering one. The web app knows only this port."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

DASHBOARD = "dashboard"  # who answered, for a decision taken in the dashboard


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A question waiting for its answer."""

    id: int
    session_id: int
    channel: str
    chat_id: str
    tool: str
    shown: str
    reason: str
    asked_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Decided:
    """The outcome of an answer: `taken` when it decided the question; `reply` says what
    came of it ("Approved: it runs now.", "This request expired ...")."""

    taken: bool
    reply: str


class ApprovalDesk(Protocol):
    async def pending(self) -> list[PendingApproval]: ...

    async def decide(self, question_id: int, run: bool, by: str) -> Decided: ...
