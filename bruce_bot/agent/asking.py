"""Asking the user before a tool runs something (run_code's approvals): the real `Approver`.

`ask` puts the question to the chat the turn belongs to (a briefing's is its chat; a sub-agent
asks in the chat of the session it works for) and waits for the answer, without blocking the
event loop and without polling hot:

1. The question is a row of `pending_actions` in status `asking`, keyed by the turn and the call
   (`ApprovalRequest.origin`), so a turn resumed after a crash finds its question instead of
   running unasked: answered before, the answer holds; still open, it is waited for; its time
   run out while Bruce was down, it is asked again.
2. Bruce's question shows the whole request in a code block and why it asks, with Run / Deny
   buttons (Telegram, Discord, the web chat); it is stored as a notice and sent through the
   outbox. A question longer than one message of the channel is refused, saying so.
3. The turn shows "⏳ waiting for your approval" meanwhile (its live reply's status line) and
   waits on an `asyncio.Event` that the answer sets in this process; an answer in another process
   (PostgreSQL) comes by the change feed, and the row is read again every `RECHECK_SECONDS` in
   case a notice was lost. Button presses do not wait behind the turn: they reach `choose`
   through the gateway, not the session's queue, and messages of that chat are answered after it.
4. No answer by `approval_timeout_seconds` after asking (the injected clock) is stored
   `expired` and is a denial. A denial or an expiry reaches the model as the tool's error.

Who answered and when is in the `Verdict` (the tool records it in its execution) and in the row.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from bruce_bot.agent.subagent import CHANNEL as SUBAGENT_CHANNEL
from bruce_bot.approval_desk import Decided, PendingApproval
from bruce_bot.domain import Choice, OutboundMessage, utcnow
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.storage.approvals import ASKING, PendingAction
from bruce_bot.storage.changes import EVERYTHING, ChangeFeed
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.approval import ApprovalRequest, Verdict
from bruce_bot.tools.registry import ToolContext

log = structlog.get_logger(__name__)

TOPIC = "approvals"  # change feed: a question was answered in another process
RUN_PREFIX = "code-run:"
DENY_PREFIX = "code-deny:"
RECHECK_SECONDS = 10.0  # the row is read again this often while waiting (a lost notice)
MAX_ORIGIN_CHARS = 64
WAITING_LINE = "⏳ waiting for your approval"
APPROVED_LINE = "▶️ Approved: running it …"

QUESTION = (
    "⏳ Waiting for your approval: may I run this ({tool})? I ask because {reason}.\n\n"
    "```\n{shown}\n```\n\n"
    "Press Run to run it once, or Deny. With no answer within {timeout} it does not run."
)
APPROVED = "▶️ Approved: it runs now."
DENIED = "🚫 Denied: it will not run."
EXPIRED = "⌛ This request expired: nobody answered within {timeout}, so nothing ran."
ANSWERED = "This request was answered already: {status}."
GONE = "That request is no longer waiting for an answer."
NOBODY = "nobody can be asked from here (this run has no chat), so it did not run"
TOO_LONG = (
    "it is too long to show the user in full in one {channel} message ({chars} characters "
    "with the question, at most {most}), so it was not asked and did not run; do it in "
    "smaller steps"
)


def spoken(seconds: float) -> str:
    """300 -> "5 minutes", 90 -> "90 seconds"."""
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} minutes"
    return "1 second" if seconds == 1 else f"{seconds:g} seconds"


def question_text(request: ApprovalRequest, timeout_seconds: float) -> str:
    return QUESTION.format(
        tool=request.tool,
        reason=request.reason,
        shown=request.shown,
        timeout=spoken(timeout_seconds),
    )


def origin_key(origin: str) -> str:
    """The stored key of a request's origin (the column holds 64 characters). A request
    without one (a run outside a turn, a sub-agent's) is asked on its own: an empty origin
    must never find another run's answer."""
    if not origin:
        return "u:" + uuid.uuid4().hex
    if len(origin) <= MAX_ORIGIN_CHARS:
        return origin
    return "h:" + hashlib.sha256(origin.encode()).hexdigest()[:40]


class ChatApprover:
    """The `Approver` of tools/approval.py, answered by buttons in the chat or the dashboard."""

    def __init__(
        self,
        stores: Stores,
        outbox: Outbox,
        feed: ChangeFeed,
        timeout_seconds: float,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._stores = stores
        self._outbox = outbox
        self._feed = feed
        self.timeout_seconds = timeout_seconds
        self._clock = clock
        self._waiting: dict[int, asyncio.Event] = {}  # question id -> set by its answer
        feed.subscribe(TOPIC, self._answered_elsewhere)

    # ---- the tools' port -----------------------------------------------------------------------

    async def ask(self, context: ToolContext, request: ApprovalRequest) -> Verdict:
        session = await self._chat_of(context)
        if session is None:
            log.info("approval_nobody_to_ask", tool=request.tool, session_id=context.session_id)
            return Verdict(False, "", None, NOBODY)
        text = question_text(request, self.timeout_seconds)
        most = self._outbox.max_message_chars(session.channel)
        if most is None or len(text) > most:
            log.info("approval_too_long", tool=request.tool, chars=len(text), most=most)
            why = TOO_LONG.format(channel=session.channel, chars=len(text), most=most or 0)
            return Verdict(False, "", None, why)
        question, new = await self._stores.approvals.hold(
            session.id,
            request.tool,
            request.shown,
            reason=request.reason,
            origin=origin_key(request.origin),
            person=context.person,
            task_run=context.task_run,
            status=ASKING,
            at=self._clock(),
        )
        event = self._waiting.setdefault(question.id, asyncio.Event())
        try:
            settled = self._settled(question)
            if settled is not None:  # answered before a crash cut the turn
                return settled
            if not new and self._deadline(question) <= self._clock():
                # Its time ran out while nobody waited for it (Bruce was down): asked again.
                await self._stores.approvals.renew(question.id, self._clock())
                question = await self._reread(question)
            if question.question_message_id is None:
                await self._send(session, question, text)
            await _show(context, WAITING_LINE)
            verdict = await self._wait(question, event)
        finally:
            self._waiting.pop(question.id, None)
        log.info(
            "approval_answered",
            question_id=question.id,
            tool=request.tool,
            approved=verdict.approved,
            by=verdict.by,
            session_id=session.id,
        )
        if verdict.approved:
            await _show(context, APPROVED_LINE)
        return verdict

    async def _chat_of(self, context: ToolContext) -> SessionRecord | None:
        """The session whose chat is asked: a sub-agent's is the one it works for."""
        if context.session_id is None:
            return None
        session = await self._stores.sessions.get(context.session_id)
        while session is not None and session.channel == SUBAGENT_CHANNEL:
            if session.parent_id is None:
                return None
            session = await self._stores.sessions.get(session.parent_id)
        if session is None or not session.chat_id:
            return None
        return session

    async def _send(self, session: SessionRecord, question: PendingAction, text: str) -> None:
        choices = (
            Choice("Run", f"{RUN_PREFIX}{question.id}"),
            Choice("Deny", f"{DENY_PREFIX}{question.id}"),
        )
        extra = {"choices": [{"label": c.label, "data": c.data} for c in choices]}
        message_id = await self._stores.approvals.ask(session.id, text, extra, action=question.id)
        if message_id is None:
            return  # asked meanwhile, by another process
        await self._outbox.deliver(
            OutboundMessage(
                session.channel, session.chat_id, text, message_id, "notice", {}, choices
            )
        )
        log.info(
            "approval_asked", question_id=question.id, tool=question.tool, session_id=session.id
        )

    async def _wait(self, question: PendingAction, event: asyncio.Event) -> Verdict:
        deadline = self._deadline(question)
        while True:
            current = await self._stores.approvals.get(question.id)
            if current is None:  # its conversation was deleted meanwhile
                return Verdict(False, "", None, "the conversation was deleted meanwhile")
            settled = self._settled(current)
            if settled is not None:
                return settled
            left = (deadline - self._clock()).total_seconds()
            if left <= 0:
                now = self._clock()
                if await self._stores.approvals.decide(question.id, "expired", "", now):
                    await self._feed.publish(TOPIC, str(question.id))
                    log.info("approval_expired", question_id=question.id, tool=question.tool)
                continue  # expired, or answered at the same moment: read what it became
            event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), min(left, RECHECK_SECONDS))

    def _settled(self, question: PendingAction) -> Verdict | None:
        """The verdict of an answered question (None: still asking)."""
        at, by = question.resolved_at, question.result or ""
        if question.status == "approved":
            return Verdict(True, by, at, f"approved by {by}")
        if question.status == "denied":
            return Verdict(False, by, at, f"denied by {by}")
        if question.status == "expired":
            return Verdict(False, "", at, f"no answer within {self.timeout_seconds:g} s")
        if question.status != ASKING:
            return Verdict(False, "", at, f"the request is {question.status}")
        return None

    def _deadline(self, question: PendingAction) -> datetime:
        return question.created_at + timedelta(seconds=self.timeout_seconds)

    async def _reread(self, question: PendingAction) -> PendingAction:
        return await self._stores.approvals.get(question.id) or question

    # ---- answers -------------------------------------------------------------------------------

    async def choose(self, session_id: int, data: str, by: str) -> str | None:
        """A button press in the chat of `session_id`; the reply, None when it is not ours."""
        for prefix, run in ((RUN_PREFIX, True), (DENY_PREFIX, False)):
            rest = data[len(prefix) :]
            if data.startswith(prefix) and rest.isdigit():
                return await self.answer(int(rest), run, by, session_id=session_id)
        return None

    async def decide(self, question_id: int, run: bool, by: str) -> Decided:
        """The dashboard's answer (`by`: "dashboard")."""
        return await self._decide(question_id, run, by, None)

    async def answer(
        self, question_id: int, run: bool, by: str, *, session_id: int | None = None
    ) -> str:
        """Run (or Deny) the question `question_id`, answered by `by`; what to tell them.
        `session_id`: the chat it was answered in, which must be the one asked."""
        return (await self._decide(question_id, run, by, session_id)).reply

    async def _decide(
        self, question_id: int, run: bool, by: str, session_id: int | None
    ) -> Decided:
        question = await self._stores.approvals.get(question_id)
        if question is None or (session_id is not None and question.session_id != session_id):
            return Decided(False, GONE)
        now = self._clock()
        if question.status == ASKING and self._deadline(question) <= now:
            await self._stores.approvals.decide(question.id, "expired", "", now)
            question = await self._reread(question)
        if question.status == ASKING:
            to = "approved" if run else "denied"
            if await self._stores.approvals.decide(question.id, to, by or "someone", now):
                self._wake(str(question.id))
                await self._feed.publish(TOPIC, str(question.id))
                log.info("approval_decided", question_id=question.id, decision=to, by=by)
                return Decided(True, APPROVED if run else DENIED)
            question = await self._reread(question)
        if question.status == "expired":
            return Decided(False, EXPIRED.format(timeout=spoken(self.timeout_seconds)))
        if question.status in ("approved", "denied"):
            return Decided(False, ANSWERED.format(status=f"{question.status} by {question.result}"))
        return Decided(False, GONE)

    async def pending(self) -> list[PendingApproval]:
        """The questions waiting for an answer now, oldest first (the dashboard's list)."""
        now = self._clock()
        questions = [q for q in await self._stores.approvals.asking() if self._deadline(q) > now]
        sessions = await self._stores.sessions.get_many({q.session_id for q in questions})
        return [
            PendingApproval(
                q.id,
                q.session_id,
                sessions[q.session_id].channel if q.session_id in sessions else "",
                sessions[q.session_id].chat_id if q.session_id in sessions else "",
                q.tool,
                q.arguments,
                q.reason,
                q.created_at,
                self._deadline(q),
            )
            for q in questions
        ]

    def _wake(self, key: str) -> None:
        if key == EVERYTHING:
            for waiting in self._waiting.values():
                waiting.set()
        elif key.isdigit() and (event := self._waiting.get(int(key))) is not None:
            event.set()

    def _answered_elsewhere(self, key: str) -> None:
        self._wake(key)


async def _show(context: ToolContext, line: str) -> None:
    if context.status is None:
        return
    try:
        await context.status(line)
    except Exception as exc:  # a live reply's trouble must not cost the answer
        log.warning("approval_status_failed", error=repr(exc))
