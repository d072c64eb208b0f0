"""The analytical brain: a phantom agent loop that looks after a session between exchanges.

After each chat exchange the turn tells `AnalyticalBrain.exchange_finished`; when the triggers
(`triggers.py`: an unnamed session, every N exchanges, a topic shift) say a run can change
something, `BrainRunner` runs for that session in the background, after a short coalescing
window: the reply is never delayed, runs of one session never overlap, and the exchanges that
finish while a run waits or is busy are read by one run (the next). A sub-agent that answered
asks for a run directly (`observe`).

One run (seed 004, Anima's AnalyticalBrain::Runner) builds a single user message from the
session's state and the conversation since the previous run (plus a little of what that run
read, as context), picks the responsibilities for the session's kind, and runs the agent loop
with the background model, the responsibilities' tools and a prompt made of their sections. It
is a phantom: its text and reasoning are never stored, only the effects of its tools (title,
nickname, skills, workflow, goals, the memories of the people speaking) and its token usage
(`llm_calls`, purpose `brain`). It ends when the model calls `everything_is_ready`, answers
without tools, or runs out of rounds. Whatever goes wrong is logged and never reaches the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

import structlog

from bruce_bot.agent.brain.library import Library
from bruce_bot.agent.brain.responsibilities import (
    FINISH_TOOL,
    BrainState,
    Speaker,
    registry_for,
    render_state,
    responsibilities_for,
    system_prompt_for,
)
from bruce_bot.agent.brain.tools import BrainDeps
from bruce_bot.agent.brain.triggers import BrainTriggers, TriggerRules
from bruce_bot.agent.context import in_conversation_order
from bruce_bot.agent.loop import AgentRun, run_agent_loop
from bruce_bot.agent.recorder import AuditRecorder
from bruce_bot.config import BrainConfig
from bruce_bot.domain import (
    ChatMessage,
    LLMResponse,
    SystemPrompt,
)
from bruce_bot.llm.base import LLMError, LLMRequest, LLMService
from bruce_bot.storage.memories import MemoryStore, owner_key
from bruce_bot.storage.messages import UNTRUSTED, StoredMessage
from bruce_bot.storage.sessions import SessionKind, SessionRecord
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.registry import ToolContext, ToolRegistry

log = structlog.get_logger(__name__)

PURPOSE = "brain"
MAX_TOKENS = 1024
# What of each message a run reads: the user says what the session is about; Bruce's replies
# only need their gist (what was done shows at the start or the end); the earlier messages are
# context the previous run already handled.
USER_CHARS = 1_000
BRUCE_CHARS = 600
EARLIER_CHARS = 300
MEMORIES_SHOWN = 40  # of each person, the newest: what a run can merge or update
INSTRUCTION = (
    "Bring the session state up to date for the new conversation with your tools (the earlier "
    "conversation, if shown, was handled before and is context only), then call "
    "everything_is_ready."
)


class BackgroundModel:
    """The shared LLM service, always asked for the background model (and a short answer)."""

    def __init__(self, llm: LLMService, model: str, max_tokens: int = MAX_TOKENS) -> None:
        self._llm = llm
        self._model = model
        self._max_tokens = max_tokens

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await self._llm.complete(
            replace(request, model=self._model, max_tokens=request.max_tokens or self._max_tokens)
        )

    async def aclose(self) -> None:
        return None  # the shared service is closed by its owner


def _cut(text: str, limit: int) -> str:
    """`text` on one line, its middle left out beyond `limit` characters."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]} […] {text[len(text) - (limit - head) :]}"


def condensed_conversation(
    messages: Sequence[StoredMessage],
    earlier: bool = False,
    speakers: Mapping[str, str] | None = None,
) -> str:
    """The conversation as compact `Speaker: text` lines, long messages cut short (the
    `earlier` ones, context only, shorter still); `speakers` names users by their id."""
    lines = []
    for message in messages:
        if message.role == "assistant":
            speaker, limit = "Bruce", BRUCE_CHARS
        elif message.kind == "task":
            speaker, limit = "Scheduled task", USER_CHARS
        else:
            speaker = (speakers or {}).get(message.user_id or "", "User")
            limit = USER_CHARS
        lines.append(f"{speaker}: {_cut(message.content, EARLIER_CHARS if earlier else limit)}")
    return "\n".join(lines)


def split_at(
    conversation: Sequence[StoredMessage], read_until: int, lookback: int
) -> tuple[list[StoredMessage], list[StoredMessage]]:
    """(earlier, new): the messages after `read_until`, and up to `lookback` before them."""
    new = [m for m in conversation if m.id > read_until]
    earlier = [m for m in conversation if m.id <= read_until]
    return (earlier[-lookback:] if lookback and new else []), new


def speaking(new: Sequence[StoredMessage]) -> dict[str, str]:
    """The people who wrote the new messages, by user id, in the order they first spoke, with
    their name (as the message gave it, else their id)."""
    people: dict[str, str] = {}
    for message in new:
        if message.role == "user" and message.kind == "chat" and message.user_id:
            people.setdefault(message.user_id, message.author or message.user_id)
    return people


def speaker_labels(people: Mapping[str, str]) -> dict[str, str]:
    """How the conversation names the people: "User" when one speaks, else by number and name
    (the numbers the memory tools take)."""
    if len(people) < 2:
        return {user_id: "User" for user_id in people}
    return {user: f"Person {n} ({name})" for n, (user, name) in enumerate(people.items(), 1)}


def briefing(
    state: str,
    earlier: Sequence[StoredMessage],
    new: Sequence[StoredMessage],
    speakers: Mapping[str, str] | None = None,
) -> str:
    """The one user message of a run."""
    parts = [f"<session_state>\n{state}\n</session_state>"]
    if earlier:
        parts.append(
            f"<earlier_conversation>\n{condensed_conversation(earlier, True, speakers)}\n"
            "</earlier_conversation>"
        )
    conversation = condensed_conversation(new, speakers=speakers)
    parts.append(f"<new_conversation>\n{conversation}\n</new_conversation>")
    return "\n\n".join([*parts, INSTRUCTION])


def _log_finished(session_id: int, run: AgentRun, started: float) -> None:
    """What a run did: its rounds, the tools that acted, the errors, whether it finished."""
    log.info(
        "brain_finished",
        session_id=session_id,
        rounds=run.turns,
        actions=[e.call.name for e in run.executions if not e.result.is_error],
        errors=sum(1 for e in run.executions if e.result.is_error),
        finished=run.succeeded(FINISH_TOOL),
        seconds=round(time.perf_counter() - started, 3),
    )


class BrainRunner:
    """One brain run for one session."""

    def __init__(
        self,
        llm: LLMService,
        model: str,
        stores: Stores,
        library: Library,
        config: BrainConfig,
        memories: MemoryStore | None = None,
    ) -> None:
        """`memories`: the store whose memories the brain curates (None: memory is off)."""
        self._llm = BackgroundModel(llm, model)
        self._stores = stores
        self._library = library
        self.config = config
        self._memories = memories
        deps = BrainDeps(stores.sessions, stores.goals, library, memories)
        # By session kind and whether the run curates memories: a run that reads an exchange
        # in which Bruce read outside content does not (what a page says is nobody's memory).
        self._registries: dict[tuple[SessionKind, bool], ToolRegistry] = {}
        self._prompts: dict[tuple[SessionKind, bool], SystemPrompt] = {}
        kinds: tuple[SessionKind, ...] = ("parent", "child")
        for kind in kinds:
            for memory in {False, memories is not None}:
                responsibilities = responsibilities_for(kind, memory=memory)
                self._registries[kind, memory] = registry_for(responsibilities, deps)
                prompt = SystemPrompt(stable=(system_prompt_for(responsibilities),))
                self._prompts[kind, memory] = prompt

    async def session(self, session_id: int) -> SessionRecord | None:
        return await self._stores.sessions.get(session_id)  # cached: no query once known

    async def run(self, session_id: int, read_until: int = 0, reason: str = "") -> int | None:
        """Look after the session once, reading what came after message `read_until` (0: the
        recent conversation); the newest message id read, or None when there was nothing new
        to read or the run failed (the next run reads it again)."""
        session = await self._stores.sessions.get(session_id)
        if session is None:
            return None
        config = self.config
        stored = await self._stores.messages.history(
            session_id, session.context_start_message_id, config.context_messages
        )
        earlier, new = split_at(in_conversation_order(stored), read_until, config.lookback_messages)
        if not new:
            log.debug("brain_skipped", session_id=session_id, reason="nothing new")
            return None
        kind: SessionKind = "child" if session.kind == "child" else "parent"
        tainted = any((m.extra or {}).get(UNTRUSTED) for m in new)
        curates = self._memories is not None and not tainted
        if tainted and self._memories is not None:
            log.info("brain_memory_curation_skipped", session_id=session_id, reason="untrusted")
        responsibilities = responsibilities_for(kind, memory=curates)
        goals = await self._stores.goals.open_tree(session_id)
        people = await self._people(session, new) if kind == "parent" and curates else []
        state = render_state(responsibilities, BrainState(session, goals, self._library, people))
        labels = speaker_labels(speaking(new)) if people else None
        started = time.perf_counter()
        log.info(
            "brain_started",
            session_id=session_id,
            kind=kind,
            reason=reason,
            messages=len(new),
            earlier=len(earlier),
        )
        try:
            run = await self._loop(
                session, kind, curates, people, briefing(state, earlier, new, labels)
            )
        except LLMError as exc:
            log.warning(
                "brain_failed", session_id=session_id, reason=exc.reason, detail=exc.detail[:300]
            )
            return None
        _log_finished(session_id, run, started)
        return max(m.id for m in stored)

    async def _loop(
        self,
        session: SessionRecord,
        kind: SessionKind,
        curates: bool,
        people: Sequence[Speaker],
        message: str,
    ) -> AgentRun:
        """The agent loop of one run: the background model with the tools and prompt of the
        session's kind, reading the one `message`; the tools act for the `people` speaking."""
        return await run_agent_loop(
            self._llm,
            self._registries[kind, curates],
            self._prompts[kind, curates],
            [ChatMessage("user", message)],
            self.config.max_rounds,
            context=ToolContext(
                session_id=session.id,
                channel=session.channel,
                chat_id=session.chat_id,
                people=tuple(person.owner for person in people),
            ),
            observer=AuditRecorder(self._stores.audit, session.id, log_actions_only=True),
            purpose=PURPOSE,
            finish_tools=(FINISH_TOOL,),
        )

    async def _people(self, session: SessionRecord, new: Sequence[StoredMessage]) -> list[Speaker]:
        """The people speaking in the new messages, with their memories (none: memory off)."""
        if self._memories is None:
            return []
        people = []
        for user_id, name in speaking(new).items():
            owner = owner_key(session.channel, user_id)
            people.append(Speaker(name, owner, await self._memories.recent(owner, MEMORIES_SHOWN)))
        return people


class AnalyticalBrain:
    """Runs the brain in the background when an exchange calls for it (`triggers`): at most
    one run per session at a time, bursts of exchanges coalesced into one run."""

    def __init__(self, runner: BrainRunner, max_concurrent: int = 4) -> None:
        self._runner = runner
        self._triggers = BrainTriggers(TriggerRules.of(runner.config))
        self._coalesce_seconds = runner.config.coalesce_seconds
        self._slots = asyncio.Semaphore(max_concurrent)
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._again: set[int] = set()
        self._reasons: dict[int, str] = {}  # why the session's next run is due (the first ask)
        self._hurry = asyncio.Event()  # set: runs waiting for their window start at once
        self._stopping = False

    async def exchange_finished(self, session_id: int, texts: Sequence[str]) -> None:
        """An exchange with the user finished (`texts`: what they said and the reply): run the
        brain soon if that can change something, without waiting for it."""
        if self._stopping:
            return
        session = await self._runner.session(session_id)
        if session is None:
            return
        named = bool(session.nickname if session.kind == "child" else session.title)
        reason = self._triggers.exchange(session_id, texts, named)
        if reason is not None:
            self._request(session_id, reason)

    def observe(self, session_id: int) -> None:
        """Look after the session soon, whatever the triggers say (a sub-agent has answered)."""
        self._request(session_id, "requested")

    def _request(self, session_id: int, reason: str) -> None:
        """While a run for the session waits or is in progress, any number of requests lead to
        at most one more run after it, which reads everything new."""
        if self._stopping:
            return
        self._reasons.setdefault(session_id, reason)
        if session_id in self._tasks:
            self._again.add(session_id)
            return
        self._tasks[session_id] = asyncio.create_task(
            self._work(session_id), name=f"brain-{session_id}"
        )

    async def _work(self, session_id: int) -> None:
        try:
            while True:
                await self._coalescing_window()
                self._again.discard(session_id)
                async with self._slots:
                    reason = self._reasons.pop(session_id, "")
                    read_until = self._triggers.read_until(session_id)
                    self._triggers.run_started(session_id)
                    try:
                        until = await self._runner.run(session_id, read_until, reason)
                    except Exception:  # a bug here must never reach the user or kill the loop
                        log.exception("brain_crashed", session_id=session_id)
                    else:
                        if until is not None:
                            self._triggers.run_read(session_id, until)
                if self._stopping or session_id not in self._again:
                    return
        finally:
            self._tasks.pop(session_id, None)
            self._again.discard(session_id)
            self._reasons.pop(session_id, None)

    async def _coalescing_window(self) -> None:
        """Wait so that the exchanges finishing close together are read by one run."""
        if self._coalesce_seconds <= 0 or self._hurry.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._hurry.wait(), self._coalesce_seconds)

    @property
    def busy_sessions(self) -> int:
        return len(self._tasks)

    async def idle(self) -> None:
        """Return once no run is in progress or due (including the coalesced ones); runs
        waiting for their coalescing window start at once."""
        self._hurry.set()
        try:
            while self._tasks:
                await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        finally:
            if not self._stopping:
                self._hurry.clear()

    async def stop(self, grace_seconds: float) -> None:
        """Take no more work; start the runs waiting for their window, let runs finish within
        `grace_seconds`, then cancel them."""
        self._stopping = True
        self._hurry.set()
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_seconds)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if pending:
            log.info("brain_runs_cancelled", sessions=len(pending))
