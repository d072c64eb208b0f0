"""The port through which a tool asks the user before it acts (issue 24: run_code's approvals).

A tool that confirms itself (`Tool.confirms_itself`) builds an `ApprovalRequest` (what the user
is shown, why it asks, and `origin`: a stable key, the turn's key and the call's id, so that a
turn resumed after a crash finds the same request instead of asking twice) and awaits the
`Approver`'s `Verdict`. The approver (agent/asking.py) shows the request with Run / Deny buttons
and answers with a denial when nobody answers in time; tools never import the agent, so the
types live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bruce_bot.tools.registry import ToolContext


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What the user is shown."""

    tool: str
    shown: str  # the whole action (run_code: the language, network and the code)
    reason: str  # why the user is asked ("the turn read a web page", "it asks for the network")
    origin: str  # stable key (turn_key + call id): a resumed turn finds the same request


@dataclass(frozen=True, slots=True)
class Verdict:
    approved: bool
    by: str  # who answered ("telegram:1001"), or "" when nobody did
    at: datetime | None  # when
    why: str  # "approved by <who>", "denied by <who>", "no answer within 300 s"


class Approver(Protocol):
    async def ask(self, context: ToolContext, request: ApprovalRequest) -> Verdict: ...
