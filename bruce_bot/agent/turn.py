"""One turn of a session: from the waiting messages to a delivered reply.

The inbox hands a session's batch of waiting messages to `TurnRunner.run`. It assembles the
history and the four-layer system prompt, runs the agent loop (recording each tool execution as
it happens), stores the reply together with the batch's final status and the token usage in one
commit, delivers it through the outbox, tells its listeners how the turn ended (the analytical
brain, the scheduler for a briefing's run), and folds the history into the summary when it grew
past its budget. A chat turn and a scheduled briefing's turn differ only by a `TurnKind` value.
The session's active skills, workflow and goals, which the brain keeps, go into the prompt, and
so do the memories of the person speaking (a briefing: of the person who set it up) that bear on
what they said. Whatever fails, the user gets a short plain reply and nothing they sent is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo

import structlog

from bruce_bot.agent.brain.library import Document, Library
from bruce_bot.agent.context import (
    TOO_LONG,
    build_system_prompt,
    in_conversation_order,
    memories_layer,
    to_chat_messages,
)
from bruce_bot.agent.context_budget import ContextBudget, newest_within, shrink_to
from bruce_bot.agent.failures import OutageMemory, notice_for
from bruce_bot.agent.guard import ClaimKind, correction_request, find_unbacked_claim
from bruce_bot.agent.loop import AgentRun, ApprovalPort, run_agent_loop
from bruce_bot.agent.recorder import AuditRecorder
from bruce_bot.agent.resume import ResumedRounds, resumed_rounds
from bruce_bot.agent.summarizer import Summarizer, over_budget
from bruce_bot.channels.live import LiveReply
from bruce_bot.config import AgentConfig, LLMConfig, MemoryConfig
from bruce_bot.domain import (
    ChatMessage,
    DeliveryStatus,
    MessageKind,
    MessageStatus,
    OutboundFile,
    SystemPrompt,
    utcnow,
)
from bruce_bot.llm.base import LLMContextOverflowError, LLMService
from bruce_bot.llm.context_windows import context_window
from bruce_bot.media.preparation import MediaStep, PreparedMedia
from bruce_bot.messaging.inbox import QueuedMessage
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.messaging.turn_end import Ending, TurnEnd
from bruce_bot.settings.editable import max_turns, system_prompt, timezone
from bruce_bot.settings.sources import FixHints
from bruce_bot.storage.goals import Goal
from bruce_bot.storage.memories import owner_key
from bruce_bot.storage.messages import StoredMessage
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.stores import Stores
from bruce_bot.storage.summaries import Summary
from bruce_bot.storage.tasks import PERSON_KEY, RUN_KEY
from bruce_bot.tools.artifacts import ARTIFACT_TOOL, saved_artifact
from bruce_bot.tools.proactive import SCHEDULING_TOOLS
from bruce_bot.tools.registry import ToolContext, ToolRegistry

log = structlog.get_logger(__name__)

TYPING_REFRESH_SECONDS = 4.0
NO_ANSWER = "I don't have an answer to that; could you rephrase it?"
# Appended when the model keeps claiming an action no tool performed: the user must not be misled.
UNCONFIRMED_NOTE: dict[ClaimKind, str] = {
    "artifact": "\n\n(Note: I could not confirm that any file was actually saved.)",
    "schedule": "\n\n(Note: I could not confirm that anything was actually scheduled.)",
    "memory": "\n\n(Note: I could not confirm that this was saved to my memory.)",
}


@dataclass(frozen=True, slots=True)
class TurnKind:
    """What differs between answering the user and running a scheduled briefing."""

    reply_kind: MessageKind
    withheld_tools: frozenset[str]  # a briefing must not schedule more work: no feedback loops
    always_tell_failure: bool  # a chat hears of an outage once; every failed briefing says so

    @property
    def task_run(self) -> bool:
        """A scheduled task's run: only the tools allowed in unattended runs are offered."""
        return self.reply_kind == "briefing"

    def titled(self, title: str, reply: str) -> str:
        return f"📋 {title}\n\n{reply}" if self.reply_kind == "briefing" and title else reply

    def failure(self, title: str, notice: str) -> str:
        return f"⚠️ Couldn't run {title}: {notice}" if self.always_tell_failure and title else notice


CHAT_TURN = TurnKind("chat", frozenset(), always_tell_failure=False)
BRIEFING_TURN = TurnKind("briefing", SCHEDULING_TOOLS, always_tell_failure=True)


def kind_of(batch: Sequence[QueuedMessage]) -> TurnKind:
    return BRIEFING_TURN if any(item.kind == "task" for item in batch) else CHAT_TURN


def person_of(session: SessionRecord, batch: Sequence[QueuedMessage]) -> str:
    """Whose memories the turn uses: a briefing's, the person who set it up (as the firing
    recorded); a chat's, the person who wrote the newest of its messages ("" when none did,
    so that nobody's memories are shown)."""
    for item in reversed(batch):
        if item.kind == "task":
            return str(item.metadata.get(PERSON_KEY) or "")
        if item.user_id:
            return owner_key(session.channel, item.user_id)
    return ""


@dataclass(frozen=True, slots=True)
class TurnSettings:
    """What turns are run with, besides their collaborators."""

    agent: AgentConfig
    llm: LLMConfig
    zone: ZoneInfo
    clock: Callable[[], datetime] = utcnow
    library: Library | None = None  # None: the brain is off, its layers are not shown
    memory: MemoryConfig | None = None  # None: memory is off, no memories are shown

    @property
    def budget(self) -> ContextBudget:
        return ContextBudget(context_window(self.llm), self.llm.max_tokens)


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """How a turn ended, for its listeners."""

    session_id: int
    batch: Sequence[QueuedMessage]
    answered: bool  # the batch got a real answer (else a failure notice, or nothing)
    error: str | None  # what the chat was told instead of an answer
    delivery: DeliveryStatus  # the reply's; "sent" when there was none to send
    answer: str | None = None  # the reply, when answered (the brain reads its topic)
    # The turn read outside content: what it set up may wait for the user's answer.
    untrusted: bool = False

    @property
    def run_ids(self) -> list[int]:
        """The scheduled task runs this turn answered (a briefing)."""
        return [run for item in self.batch if (run := item.metadata.get(RUN_KEY))]


class TurnListener(Protocol):
    async def turn_finished(self, turn: TurnFinished) -> None: ...


@dataclass(slots=True)
class _Turn:
    """One turn in progress: what it answers and with what."""

    session: SessionRecord
    batch: Sequence[QueuedMessage]
    kind: TurnKind
    stored: Sequence[StoredMessage]
    summary: Summary | None
    tools: ToolRegistry
    recorder: AuditRecorder
    resumed: ResumedRounds
    context: ToolContext
    files: tuple[OutboundFile, ...] = ()  # artifacts saved by the answer, sent with the reply
    media: PreparedMedia | None = None  # the batch's files, read (bruce_bot/media/)
    memories: str = ""  # the person's memories layer, read once per turn
    live: LiveReply | None = None  # the reply shown as it is written (channels/live.py)
    untrusted: bool = False  # the turn read outside content (the brain curates no memory of it)

    @property
    def ids(self) -> list[int]:
        return [item.id for item in self.batch]

    @property
    def title(self) -> str:
        return next((str(i.metadata["title"]) for i in self.batch if i.metadata.get("title")), "")


def saved_files(run: AgentRun) -> tuple[OutboundFile, ...]:
    """The artifacts the run saved, in order, each once: the outbox sends them with the reply
    where the channel takes files (`tools.artifacts.send_file_max_bytes`)."""
    files: dict[str, OutboundFile] = {}
    for execution in run.executions:
        for made in execution.result.files:  # run_code's out/ files, saved as artifacts
            files.setdefault(made.artifact, made)
        if execution.call.name != ARTIFACT_TOOL or execution.result.is_error:
            continue
        saved = saved_artifact(execution.result.content)
        if saved is not None:
            files.setdefault(saved.artifact, saved)
    return tuple(files.values())


@dataclass(frozen=True, slots=True)
class TurnSupport:
    """What turns are run with besides their core collaborators, each optional."""

    # Told how each turn ended (the brain, a briefing's run, the confirmations).
    listeners: Sequence[TurnListener] = ()
    media: MediaStep | None = None  # None: attachments are not read
    # Where the settings a failure's fix names come from (None: the fix names no source).
    hints: Callable[[], Awaitable[FixHints]] | None = None
    # After outside content, what is not a plain read is held for the user's yes (None: it is
    # refused, with nobody to ask).
    approvals: ApprovalPort | None = None


class TurnRunner:
    def __init__(
        self,
        settings: TurnSettings,
        stores: Stores,
        llm: LLMService,
        tools: ToolRegistry,
        outbox: Outbox,
        support: TurnSupport = TurnSupport(),
    ) -> None:
        self._settings = settings
        self._hints = support.hints
        self._media = support.media
        self._stores = stores
        self._llm = llm
        self._tools = tools
        self._outbox = outbox
        self._end = TurnEnd(stores, outbox)
        self._listeners = tuple(support.listeners)
        self._summarizer = Summarizer(
            llm, settings.llm, settings.agent, stores.messages, stores.summaries, stores.audit
        )
        self._outages = OutageMemory()
        self._approvals = support.approvals
        self._typing_tasks: set[asyncio.Task[None]] = set()  # finishing their last request

    async def run(self, session: SessionRecord, batch: Sequence[QueuedMessage]) -> None:
        turn = await self._begin(session, batch)
        turn.live = self._outbox.live(session.channel, session.chat_id, batch[-1].metadata)
        reply, status, shortened = await self._reply(turn)
        reply_kind: MessageKind = turn.kind.reply_kind if status == "done" else "notice"
        ending = Ending(
            status,
            reply,
            reply_kind,
            turn.recorder.llm_calls,
            files=turn.files,
            untrusted=turn.untrusted,
        )
        delivery = await self._end.end(session, batch, ending, turn.live)
        answered = status == "done"
        finished = TurnFinished(
            session.id,
            batch,
            answered,
            None if answered else reply,
            delivery,
            reply if answered else None,
            untrusted=turn.untrusted,
        )
        for listener in self._listeners:
            await listener.turn_finished(finished)
        if shortened or (answered and over_budget(turn.stored, self._settings.agent)):
            await self._summarizer.fold(session.id, session.context_start_message_id)

    async def _begin(self, session: SessionRecord, batch: Sequence[QueuedMessage]) -> _Turn:
        summary = await self._current_summary(session)
        after = max(
            session.context_start_message_id, summary.covers_until_message_id if summary else 0
        )
        ids = [item.id for item in batch]
        # However long the batch, all of it is read: each message it marks answered is one the
        # model has seen.
        limit = max(self._settings.agent.history_max_messages, len(batch))
        stored = await self._stores.messages.start_turn(session.id, ids, after, limit)
        kind = kind_of(batch)
        context = ToolContext(
            session_id=session.id,
            channel=session.channel,
            chat_id=session.chat_id,
            # The batch's first message: a turn cut by a crash is taken up again from it, with
            # what arrived since appended, so its tools' idempotency keys stay the same.
            turn_key=f"m{batch[0].id}",
            person=person_of(session, batch),
            task_run=kind.task_run,
        )
        recorder = AuditRecorder(
            self._stores.audit, session.id, answers_message_id=ids[-1], hold_usage=True
        )
        tools = (
            self._tools.without(kind.withheld_tools, task_run=kind.task_run)
            if kind.withheld_tools or kind.task_run
            else self._tools
        )
        resumed = await self._resumed(session, ids)
        memories = await self._memories(context.person, batch)
        return _Turn(
            session,
            batch,
            kind,
            stored,
            summary,
            tools,
            recorder,
            resumed,
            context,
            memories=memories,
        )

    async def _memories(self, person: str, batch: Sequence[QueuedMessage]) -> str:
        """The memories layer: the person's memories matching what the batch says, then their
        newest, within the configured budget."""
        memory = self._settings.memory
        if memory is None or not person:
            return ""
        said = "\n".join(item.text for item in batch)
        found = await self._stores.memories.relevant(
            person, said, memory.max_in_prompt, memory.recent_in_prompt
        )
        return memories_layer(found, memory.prompt_chars)

    async def _reply(self, turn: _Turn) -> tuple[str | None, MessageStatus, bool]:
        """The reply (None: nothing to tell), the batch's status, and whether the history was
        shortened to fit the model. Whatever fails, the chat gets a plain reply or nothing."""
        session = turn.session
        try:
            async with self._typing(session):
                media = await self._read_media(turn)
                if media is not None and not media.answerable:
                    # Only files that could not be read: what went wrong is the whole answer.
                    return media.notice, "done", False
                run, shortened = await self._answer(turn)
            turn.untrusted = run.untrusted or turn.context.untrusted_input
            self._outages.recovered(session.id)
            turn.files = saved_files(run)
            reply = turn.kind.titled(turn.title, run.text.strip() or NO_ANSWER)
            return (media.with_preface(reply) if media else reply), "done", shortened
        except Exception as exc:
            notice = notice_for(exc, session.id, await self._fix_hints())
            status: MessageStatus = "failed"
            shortened = False
            if isinstance(exc, LLMContextOverflowError):
                # Marked so that later turns show the model a stub in its place: a message that
                # never fits must not keep the chat from being answered.
                status, shortened = TOO_LONG, True
            tell = turn.kind.always_tell_failure or self._outages.should_tell(session.id, notice)
            return (turn.kind.failure(turn.title, notice.text) if tell else None), status, shortened

    async def _fix_hints(self) -> FixHints:
        if self._hints is None:
            return FixHints()
        try:
            return await self._hints()
        except Exception:  # the database away: the reply names config.yml, still a fix
            log.warning("fix_hints_unavailable", exc_info=True)
            return FixHints()

    async def _read_media(self, turn: _Turn) -> PreparedMedia | None:
        """The batch's pictures, voice notes and documents read (once: what was read is kept),
        and the history as the model sees it (bruce_bot/media/)."""
        if self._media is None:
            return None
        try:
            media = await self._media.prepare(turn.session.channel, turn.stored, turn.ids)
        except Exception:  # a bug, or the database away: answer the words, files unread
            log.exception("media_step_failed", session_id=turn.session.id)
            return None
        turn.media, turn.stored = media, media.stored
        if media.untrusted and not turn.context.untrusted_input:
            source = ", ".join(media.sources) or "a file"
            turn.context = dataclasses.replace(
                turn.context, untrusted_input=True, untrusted_source=source
            )
        return media

    async def _resumed(self, session: SessionRecord, ids: Sequence[int]) -> ResumedRounds:
        """The rounds a crash cut short, for a batch answered before (see agent/resume.py)."""
        records = await self._stores.audit.executions_answering(ids)
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

    async def _answer(self, turn: _Turn) -> tuple[AgentRun, bool]:
        """The turn's run, and whether the history had to be shortened to fit the model.

        When the server still finds the prompt too long, the older messages are folded into
        the summary and the turn is tried once more with half the room for the history.
        """
        session = turn.session
        try:
            return await self._attempt(turn, turn.stored, turn.summary, 1.0)
        except LLMContextOverflowError:
            log.warning("context_overflow_folding", session_id=session.id)
        await self._summarizer.fold(session.id, session.context_start_message_id)
        summary = await self._current_summary(session)
        covered = summary.covers_until_message_id if summary else 0
        newer = [m for m in turn.stored if m.id > covered]
        run, _ = await self._attempt(turn, newer, summary, 0.5)
        return run, True

    async def _attempt(
        self,
        turn: _Turn,
        stored: Sequence[StoredMessage],
        summary: Summary | None,
        room_share: float,
    ) -> tuple[AgentRun, bool]:
        agent, tools = self._settings.agent, turn.tools
        system_prompt = await self._system_prompt(turn.session, summary, tools, turn.memories)
        budget = self._settings.budget
        room = min(agent.history_max_chars, budget.history_chars(system_prompt, tools.specs()))
        room = int(room * room_share)
        # The messages being answered are never dropped (only cut, below): each one the turn
        # marks answered is one the model has read. Earlier ones go, oldest first, to make room.
        answering = set(turn.ids)
        now_asked = [m for m in stored if m.id in answering]
        earlier = [m for m in stored if m.id not in answering]
        room_left = room - sum(len(m.content) for m in now_asked)
        kept = [*newest_within(earlier, room_left), *now_asked] if room_left > 0 else now_asked
        images = turn.media.images if turn.media else None
        history = to_chat_messages(in_conversation_order(sorted(kept, key=lambda m: m.id)), images)
        fitted = shrink_to(history, room)
        shortened = len(kept) < len(stored) or fitted != history
        run = await self._loop(turn, system_prompt, [*fitted, *turn.resumed.messages])
        run.executions[:0] = turn.resumed.executions  # what ran before a crash counts too
        run = await self._check_claims(turn, run, system_prompt)
        return run, shortened or run.shrunk

    async def _loop(
        self, turn: _Turn, system_prompt: SystemPrompt, messages: list[ChatMessage]
    ) -> AgentRun:
        return await run_agent_loop(
            self._llm,
            turn.tools,
            system_prompt,
            messages,
            await max_turns(self._settings.agent.max_turns).value(self._stores.settings),
            context=turn.context,
            observer=turn.recorder,
            max_tokens=self._settings.budget.reply_reserve(),
            live=turn.live,
            approvals=self._approvals,
            # The Usage page tells a scheduled briefing's calls from chat turns.
            purpose="briefing" if turn.kind is BRIEFING_TURN else "agent",
        )

    async def _system_prompt(
        self, session: SessionRecord, summary: Summary | None, tools: ToolRegistry, memories: str
    ) -> SystemPrompt:
        configured = self._settings.agent.system_prompt
        base_prompt = await system_prompt(configured).value(self._stores.settings)
        skills, workflow, goals = await self._kept_by_brain(session)
        return build_system_prompt(
            base_prompt=base_prompt,
            summary=summary.content if summary else None,
            tool_names=tools.names(),
            now=self._settings.clock(),
            zone=await timezone(self._settings.zone).value(self._stores.settings),
            last_message_at=session.last_message_at,
            skills=skills,
            workflow=workflow,
            goals=goals,
            memories=memories,
        )

    async def _kept_by_brain(
        self, session: SessionRecord
    ) -> tuple[list[Document], Document | None, Sequence[Goal]]:
        """The session's active skills, active workflow and open goals (none if the brain is off).

        A skill or workflow that was removed from the library since it was activated is left out.
        """
        library = self._settings.library
        if library is None:
            return [], None, ()
        skills = [library.skills[name] for name in session.active_skills if name in library.skills]
        workflow = library.workflows.get(session.active_workflow or "")
        return skills, workflow, await self._stores.goals.open_tree(session.id)

    async def _check_claims(
        self, turn: _Turn, run: AgentRun, system_prompt: SystemPrompt
    ) -> AgentRun:
        """Ask the model once to back or correct a claim no tool supports (seed §5)."""
        claim = find_unbacked_claim(run.text, run.executions)
        if claim is None:
            return run
        session_id = turn.session.id
        log.warning(
            "unbacked_claim", session_id=session_id, kind=claim.kind, evidence=claim.evidence[:200]
        )
        request = ChatMessage("user", correction_request(claim, turn.tools.names()))
        retry = await self._loop(turn, system_prompt, [*run.transcript, request])
        retry.executions[:0] = run.executions
        still = find_unbacked_claim(retry.text, retry.executions)
        if still is not None:
            log.warning(
                "unbacked_claim_persists",
                session_id=session_id,
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
