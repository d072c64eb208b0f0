"""The port through which a tool asks the user before it runs something (run_code).

The tool decides when to ask and what to show; the `Approver` (agent/asking.py) asks in the
chat the turn belongs to, waits for the user's Run or Deny (or the dashboard's), and answers
with a `Verdict`. No answer within the timeout is a denial: the port fails closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from bruce_bot.tools.registry import ToolContext


@dataclass(frozen=True, slots=True)
class ApprovalRequest:  # what the user is shown
    tool: str
    shown: str
    reason: str
    # A stable key (turn_key + call) so a turn resumed after a crash finds the same request.
    origin: str


@dataclass(frozen=True, slots=True)
class Verdict:
    approved: bool
    by: str
    at: datetime | None
    why: str  # "denied by telegram:42", "no answer within 300 s"


class Approver(Protocol):
    async def ask(self, context: ToolContext, request: ApprovalRequest) -> Verdict: ...
