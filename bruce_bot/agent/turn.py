"""One turn of a session: from the waiting messages to a delivered reply.

The inbox hands a session's batch of waiting messages to `TurnRunner.run`. It assembles the
history and the four-layer system prompt, runs the agent loop (recording each tool execution as
it happens), stores the reply together with the batch's final status and the token usage in one
commit, delivers it through the outbox, tells the analytical brain that an exchange happened
(it runs in the background), and folds the history into the summary when it grew past its budget.
The session's active skills, workflow and goals, which the brain keeps, go into the prompt.
Whatever fails, the user gets a short plain reply and nothing they sent is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime

import structlog

from bruce_bot.agent.brain.library import Document, Library
from bruce_bot.agent.budget import ContextBudget, newest_within, shrink_to
from bruce_bot.agent.context import (
    TOO_LONG,
    build_system_prompt,
    in_conversation_order,
    to_chat_messages,
)
from bruce_bot.agent.failures import OutageMemory, notice_for
from bruce_bot.agent.guard import correction_request, find_unbacked_claim
from bruce_bot.agent.loop import AgentRun, run_agent_loop
from bruce_bot.agent.resume import ResumedRounds, resumed_rounds
from bruce_bot.agent.summarizer import Summarizer, over_budget
from bruce_bot.config import Config
from bruce_bot.domain import (
    ChatMessage,
    LLMCallRecord,
    MessageKind,
    OutboundMessage,
    SystemPrompt,
    ToolExecution,
    utcnow,
)
from bruce_bot.inbox import QueuedMessage
from bruce_bot.llm.base import LLMContextOverflowError, LLMService
from bruce_bot.outbox import Outbox
from bruce_bot.storage.goals import Goal
from bruce_bot.storage.messages import StoredMessage
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.stores import Stores
from bruce_bot.storage.summaries import Summary
from bruce_bot.tools.proactive import SCHEDULING_TOOLS
from bruce_bot.tools.registry import ToolContext, ToolRegistry, arguments_json

log = structlog.get_logger(__name__)

TYPING_REFRESH_SECONDS = 4.0
# Told when a scheduled briefing's turn is over: (task run id, delivered?, error).
BriefingHook = Callable[[int, bool, str | None], Awaitable[None]]
# Told the session id after an exchange with a real reply; must return at once (the brain).
ExchangeHook = Callable[[int], None]
# Appended when the model keeps claiming an action no tool performed: the user must not be misled.
UNCONFIRMED_NOTE = {
    "artifact": "\n\n(Note: I could not confirm that any file was actually saved.)",
    "schedule": "\n\n(Note: I could not confirm that anything was actually scheduled.)",
}


class _TurnRecorder:
    """Loop observer: writes each tool execution at once (with the message it answers, so a
    turn cut by a crash can resume), keeps LLM usage for the final commit, and holds the rounds
    such a cut turn had already run."""

    def __init__(
        self,
        stores: Stores,
        session_id: int,
        batch_ids: Sequence[int],
        resumed: ResumedRounds,
    ) -> None:
        self._stores = stores
        self._session_id = session_id
        self._answers_message_id = batch_ids[-1]
        self.batch_ids = batch_ids
        self.resumed = resumed
        self.llm_calls: list[LLMCallRecord] = []

    async def on_llm_call(self, record: LLMCallRecord) -> None:
        self.llm_calls.append(record)

    async def on_tool_executed(self, execution: ToolExecution) -> None:
        result = execution.result
        await self._stores.audit.record_tool_execution(
            session_id=self._session_id,
            turn=execution.turn,
            tool_name=execution.call.name,
            tool_input=arguments_json(execution.call.arguments, execution.call.raw_arguments),
            output=None if result.is_error else result.content,
            error=result.content if result.is_error else None,
            duration_ms=execution.duration_ms,
            call_id=execution.call.id,
            answers_message_id=self._answers_message_id,
        )


class TurnRunner:
    def __init__(
        self,
        config: Config,
        stores: Stores,
        llm: LLMService,
        tools: ToolRegistry,
        outbox: Outbox,
        summarizer: Summarizer,
        clock: Callable[[], datetime] = utcnow,
        briefing_finished: BriefingHook | None = None,
        library: Library | None = None,
        exchange_finished: ExchangeHook | None = None,
    ) -> None:
        self._briefing_finished = briefing_finished
        self._library = library  # None: the brain is off, its layers are not shown
        self._exchange_finished = exchange_finished
        self._config = config
        self._stores = stores
        self._llm = llm
        self._tools = tools
        self._outbox = outbox
        self._summarizer = summarizer
        self._clock = clock
        self._outages = OutageMemory()
        self._typing_tasks: set[asyncio.Task[None]] = set()  # finishing their last request

    async def run(self, session: SessionRecord, batch: Sequence[QueuedMessage]) -> None:
        agent = self._config.agent
        summary = await self._current_summary(session)
        after = max(
            session.context_start_message_id, summary.covers_until_message_id if summary else 0
        )
        stored = await self._stores.messages.start_turn(
            # However long the batch, all of it is read: each message it marks answered is one
            # the model has seen.
            session.id,
            [item.id for item in batch],
            after,
            max(agent.history_max_messages, len(batch)),
        )
        is_task = any(item.kind == "task" for item in batch)
        title = next((i.metadata.get("title") for i in batch if i.metadata.get("title")), "")
        # A scheduled briefing must not schedule more work: no feedback loops.
        tools = self._tools.without(SCHEDULING_TOOLS) if is_task else self._tools
        recorder = _TurnRecorder(
            self._stores, session.id, [i.id for i in batch], await self._resumed(session, batch)
        )
        context = ToolContext(
            session_id=session.id,
            channel=session.channel,
            chat_id=session.chat_id,
            turn_key=f"m{batch[-1].id}",
        )
        reply_kind: MessageKind = "briefing" if is_task else "chat"
        inbound_status = "done"
        reply: str | None
        shortened = False
        try:
            async with self._typing(session):
                run, shortened = await self._answer(
                    session, stored, summary, tools, context, recorder
                )
            reply = run.text.strip() or "I don't have an answer to that; could you rephrase it?"
            if is_task and title:
                reply = f"📋 {title}\n\n{reply}"
            self._outages.recovered(session.id)
        except Exception as exc:
            notice = notice_for(exc, session.id)
            reply_kind, inbound_status = "notice", "failed"
            if isinstance(exc, LLMContextOverflowError):
                # Marked so that later turns show the model a stub in its place: a message that
                # never fits must not keep the chat from being answered.
                shortened, inbound_status = True, TOO_LONG
            if is_task:
                reply = f"⚠️ Couldn't run {title}: {notice.text}" if title else notice.text
            else:
                reply = notice.text if self._outages.should_tell(session.id, notice) else None
        message_id, at = await self._stores.messages.finish_turn(
            session.id,
            [item.id for item in batch],
            inbound_status,
            reply,
            reply_kind,
            recorder.llm_calls,
        )
        self._stores.sessions.touch(session.id, at)
        delivery = "sent"
        if reply is not None and message_id is not None:
            delivery = await self._outbox.deliver(
                OutboundMessage(
                    session.channel,
                    session.chat_id,
                    reply,
                    message_id,
                    reply_kind,
                    batch[-1].metadata,
                )
            )
        if inbound_status == "done" and self._exchange_finished is not None:
            self._exchange_finished(session.id)
        if self._briefing_finished is not None:
            for item in batch:
                if run_id := item.metadata.get("task_run_id"):
                    error = reply if inbound_status != "done" else None
                    if delivery != "sent":
                        error = f"{error or ''} (delivery {delivery})".strip()
                    await self._briefing_finished(run_id, error is None, error)
        if shortened or (inbound_status == "done" and over_budget(stored, agent)):
            await self._summarizer.fold(session.id, session.context_start_message_id)

    async def _resumed(
        self, session: SessionRecord, batch: Sequence[QueuedMessage]
    ) -> ResumedRounds:
        """The rounds a crash cut short, for a batch answered before (see agent/resume.py)."""
        records = await self._stores.audit.executions_answering([item.id for item in batch])
        resumed = resumed_rounds(records)
        if resumed:
            log.info("turn_resumed", session_id=session.id, tool_executions=len(records))
        return resumed

    async def _current_summary(self, session: SessionRecord) -> Summary | None:
        summary = await self._stores.summaries.latest(session.id)
        if (
            summary is not None
            and summary.covers_until_message_id <= session.context_start_message_id
        ):
            return None  # set aside by `/new` together with the messages it covers
        return summary

    async def _answer(
        self,
        session: SessionRecord,
        stored: Sequence[StoredMessage],
        summary: Summary | None,
        tools: ToolRegistry,
        context: ToolContext,
        recorder: _TurnRecorder,
    ) -> tuple[AgentRun, bool]:
        """The turn's run, and whether the history had to be shortened to fit the model.

        When the server still finds the prompt too long, the older messages are folded into
        the summary and the turn is tried once more with half the room for the history.
        """
        try:
            return await self._attempt(session, stored, summary, tools, context, recorder, 1.0)
        except LLMContextOverflowError:
            log.warning("context_overflow_folding", session_id=session.id)
        await self._summarizer.fold(session.id, session.context_start_message_id)
        summary = await self._current_summary(session)
        covered = summary.covers_until_message_id if summary else 0
        newer = [m for m in stored if m.id > covered]
        run, _ = await self._attempt(session, newer, summary, tools, context, recorder, 0.5)
        return run, True

    async def _attempt(
        self,
        session: SessionRecord,
        stored: Sequence[StoredMessage],
        summary: Summary | None,
        tools: ToolRegistry,
        context: ToolContext,
        recorder: _TurnRecorder,
        room_share: float,
    ) -> tuple[AgentRun, bool]:
        agent = self._config.agent
        system_prompt = await self._system_prompt(session, summary, tools)
        budget = self._budget()
        room = min(agent.history_max_chars, budget.history_chars(system_prompt, tools.specs()))
        room = int(room * room_share)
        # The messages being answered are never dropped (only cut, below): each one the turn
        # marks answered is one the model has read. Earlier ones go, oldest first, to make room.
        answering = set(recorder.batch_ids)
        now_asked = [m for m in stored if m.id in answering]
        earlier = [m for m in stored if m.id not in answering]
        room_left = room - sum(len(m.content) for m in now_asked)
        kept = [*newest_within(earlier, room_left), *now_asked] if room_left > 0 else now_asked
        history = to_chat_messages(in_conversation_order(sorted(kept, key=lambda m: m.id)))
        fitted = shrink_to(history, room)
        shortened = len(kept) < len(stored) or fitted != history
        run = await run_agent_loop(
            self._llm,
            tools,
            system_prompt,
            [*fitted, *recorder.resumed.messages],
            agent.max_turns,
            context=context,
            observer=recorder,
            max_tokens=budget.reply_reserve(),
        )
        run.executions[:0] = recorder.resumed.executions  # what ran before a crash counts too
        run = await self._check_claims(run, tools, system_prompt, context, recorder)
        return run, shortened or run.shrunk

    def _budget(self) -> ContextBudget:
        llm = self._config.llm
        return ContextBudget(llm.effective_context_window, llm.max_tokens)

    async def _system_prompt(
        self, session: SessionRecord, summary: Summary | None, tools: ToolRegistry
    ) -> SystemPrompt:
        agent = self._config.agent
        base_prompt = await self._stores.settings.system_prompt(agent.system_prompt)
        skills, workflow, goals = await self._kept_by_brain(session)
        return build_system_prompt(
            base_prompt=base_prompt,
            summary=summary.content if summary else None,
            tool_names=tools.names(),
            now=self._clock(),
            zone=self._config.app.zone,
            last_message_at=session.last_message_at,
            skills=skills,
            workflow=workflow,
            goals=goals,
        )

    async def _kept_by_brain(
        self, session: SessionRecord
    ) -> tuple[list[Document], Document | None, Sequence[Goal]]:
        """The session's active skills, active workflow and open goals (none if the brain is off).

        A skill or workflow that was removed from the library since it was activated is left out.
        """
        library = self._library
        if library is None:
            return [], None, ()
        skills = [library.skills[name] for name in session.active_skills if name in library.skills]
        workflow = library.workflows.get(session.active_workflow or "")
        return skills, workflow, await self._stores.goals.open_tree(session.id)

    async def _check_claims(
        self,
        run: AgentRun,
        tools: ToolRegistry,
        system_prompt: SystemPrompt,
        context: ToolContext,
        recorder: _TurnRecorder,
    ) -> AgentRun:
        """Ask the model once to back or correct a claim no tool supports (seed §5)."""
        claim = find_unbacked_claim(run.text, run.executions)
        if claim is None:
            return run
        log.warning(
            "unbacked_claim",
            session_id=context.session_id,
            kind=claim.kind,
            evidence=claim.evidence[:200],
        )
        transcript = [
            *run.transcript,
            ChatMessage("user", correction_request(claim, tools.names())),
        ]
        retry = await run_agent_loop(
            self._llm,
            tools,
            system_prompt,
            transcript,
            self._config.agent.max_turns,
            context=context,
            observer=recorder,
            max_tokens=self._budget().reply_reserve(),
        )
        retry.executions[:0] = run.executions
        still = find_unbacked_claim(retry.text, retry.executions)
        if still is not None:
            log.warning(
                "unbacked_claim_persists",
                session_id=context.session_id,
                kind=still.kind,
                evidence=still.evidence[:200],
            )
            retry.text += UNCONFIRMED_NOTE[still.kind]
        return retry

    @contextlib.asynccontextmanager
    async def _typing(self, session: SessionRecord) -> AsyncIterator[None]:
        """Keep the typing indicator on while the turn runs.

        The indicator's request is never cancelled mid-flight: httpcore does not give a pool
        slot back when a request is cancelled (encode/httpcore#1093), so cancelling one per turn
        leaked a Telegram connection every ~70 messages until no reply could be sent (found by
        the soak benchmark). The loop is told to stop instead and ends after its current request.
        """
        done = asyncio.Event()

        async def refresh() -> None:
            while not done.is_set():
                await self._outbox.show_typing(session.channel, session.chat_id)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), TYPING_REFRESH_SECONDS)

        task = asyncio.create_task(refresh())
        self._typing_tasks.add(task)
        task.add_done_callback(self._typing_tasks.discard)
        try:
            yield
        finally:
            done.set()
