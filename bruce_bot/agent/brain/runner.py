"""The analytical brain: a phantom agent loop that looks after a session between exchanges.

After each exchange the turn tells `AnalyticalBrain.observe`, which runs `BrainRunner` for that
session in the background: the reply is never delayed, runs of one session never overlap, and the
exchanges that happen while a run is busy are folded into one more run afterwards (coalescing).

One run (seed 004, Anima's AnalyticalBrain::Runner) builds a single user message from the
session's state and its recent conversation, picks the responsibilities for the session's kind,
and runs the agent loop with the background model, the responsibilities' tools and a prompt made
of their sections. It is a phantom: its text and reasoning are never stored, only the effects of
its tools (title, nickname, skills, workflow, goals) and its token usage (`llm_calls`, purpose
`brain`). It ends when the model calls `everything_is_ready`, answers without tools, or runs out
of rounds. Whatever goes wrong is logged and never reaches the user.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import structlog

from bruce_bot.agent.brain.library import Library
from bruce_bot.agent.brain.responsibilities import (
    FINISH_TOOL,
    BrainState,
    registry_for,
    render_state,
    responsibilities_for,
    system_prompt_for,
)
from bruce_bot.agent.brain.tools import BrainDeps
from bruce_bot.agent.context import in_conversation_order
from bruce_bot.agent.loop import run_agent_loop
from bruce_bot.agent.recorder import AuditRecorder
from bruce_bot.config import BrainConfig
from bruce_bot.domain import (
    ChatMessage,
    LLMResponse,
    SystemPrompt,
    ToolSpec,
)
from bruce_bot.llm.base import LLMError, LLMService
from bruce_bot.storage.messages import StoredMessage
from bruce_bot.storage.sessions import SessionKind
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.registry import ToolContext, ToolRegistry

log = structlog.get_logger(__name__)

PURPOSE = "brain"
MAX_TOKENS = 1024
MAX_CHARS_PER_MESSAGE = 1_500
INSTRUCTION = (
    "Bring the session state up to date for this conversation with your tools, then call "
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

    async def complete(
        self,
        system: SystemPrompt,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        force_text: bool = False,
    ) -> LLMResponse:
        return await self._llm.complete(
            system,
            messages,
            tools,
            model=self._model,
            max_tokens=max_tokens or self._max_tokens,
            force_text=force_text,
        )

    async def aclose(self) -> None:
        return None  # the shared service is closed by its owner


def condensed_conversation(messages: Sequence[StoredMessage]) -> str:
    """The conversation as compact `Speaker: text` lines, long messages cut short."""
    lines = []
    for message in messages:
        if message.role == "assistant":
            speaker = "Bruce"
        elif message.kind == "task":
            speaker = "Scheduled task"
        else:
            speaker = "User"
        text = " ".join(message.content.split())
        if len(text) > MAX_CHARS_PER_MESSAGE:
            text = text[:MAX_CHARS_PER_MESSAGE] + " […]"
        lines.append(f"{speaker}: {text}")
    return "\n".join(lines)


class BrainRunner:
    """One brain run for one session."""

    def __init__(
        self,
        llm: LLMService,
        model: str,
        stores: Stores,
        library: Library,
        config: BrainConfig,
    ) -> None:
        self._llm = BackgroundModel(llm, model)
        self._stores = stores
        self._library = library
        self._config = config
        deps = BrainDeps(stores.sessions, stores.goals, library)
        self._registries: dict[SessionKind, ToolRegistry] = {}
        self._prompts: dict[SessionKind, SystemPrompt] = {}
        kinds: tuple[SessionKind, ...] = ("parent", "child")
        for kind in kinds:
            responsibilities = responsibilities_for(kind)
            self._registries[kind] = registry_for(responsibilities, deps)
            self._prompts[kind] = SystemPrompt(stable=(system_prompt_for(responsibilities),))

    async def run(self, session_id: int) -> bool:
        """Look after the session once; False when there was nothing to do or it failed."""
        session = await self._stores.sessions.get(session_id)
        if session is None:
            return False
        stored = await self._stores.messages.history(
            session_id, session.context_start_message_id, self._config.context_messages
        )
        conversation = in_conversation_order(stored)
        if not conversation:
            log.debug("brain_skipped", session_id=session_id, reason="no conversation")
            return False
        kind: SessionKind = "child" if session.kind == "child" else "parent"
        responsibilities = responsibilities_for(kind)
        goals = await self._stores.goals.open_tree(session_id)
        state = BrainState(session, goals, self._library)
        message = (
            f"<session_state>\n{render_state(responsibilities, state)}\n</session_state>\n\n"
            f"<recent_conversation>\n{condensed_conversation(conversation)}\n"
            f"</recent_conversation>\n\n{INSTRUCTION}"
        )
        started = time.perf_counter()
        log.info("brain_started", session_id=session_id, kind=kind, messages=len(conversation))
        try:
            run = await run_agent_loop(
                self._llm,
                self._registries[kind],
                self._prompts[kind],
                [ChatMessage("user", message)],
                self._config.max_rounds,
                context=ToolContext(
                    session_id=session.id, channel=session.channel, chat_id=session.chat_id
                ),
                observer=AuditRecorder(self._stores.audit, session_id, log_actions_only=True),
                purpose=PURPOSE,
                finish_tools=(FINISH_TOOL,),
            )
        except LLMError as exc:
            log.warning(
                "brain_failed", session_id=session_id, reason=exc.reason, detail=exc.detail[:300]
            )
            return False
        log.info(
            "brain_finished",
            session_id=session_id,
            rounds=run.turns,
            actions=[e.call.name for e in run.executions if not e.result.is_error],
            errors=sum(1 for e in run.executions if e.result.is_error),
            finished=run.succeeded(FINISH_TOOL),
            seconds=round(time.perf_counter() - started, 3),
        )
        return True


class AnalyticalBrain:
    """Runs the brain in the background after exchanges: one run per session at a time."""

    def __init__(self, runner: BrainRunner, max_concurrent: int = 4) -> None:
        self._runner = runner
        self._slots = asyncio.Semaphore(max_concurrent)
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._again: set[int] = set()
        self._stopping = False

    def observe(self, session_id: int) -> None:
        """An exchange finished: look after the session soon, without waiting for it.

        While a run for the session is in progress, any number of further exchanges lead to
        exactly one more run after it, which sees all of them.
        """
        if self._stopping:
            return
        if session_id in self._tasks:
            self._again.add(session_id)
            return
        self._tasks[session_id] = asyncio.create_task(
            self._work(session_id), name=f"brain-{session_id}"
        )

    async def _work(self, session_id: int) -> None:
        try:
            while True:
                self._again.discard(session_id)
                async with self._slots:
                    try:
                        await self._runner.run(session_id)
                    except Exception:  # a bug here must never reach the user or kill the loop
                        log.exception("brain_crashed", session_id=session_id)
                if self._stopping or session_id not in self._again:
                    return
        finally:
            self._tasks.pop(session_id, None)
            self._again.discard(session_id)

    @property
    def busy_sessions(self) -> int:
        return len(self._tasks)

    async def idle(self) -> None:
        """Return once no run is in progress or due (including the coalesced ones)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def stop(self, grace_seconds: float) -> None:
        """Take no more work; let running runs finish within `grace_seconds`, then cancel them."""
        self._stopping = True
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_seconds)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if pending:
            log.info("brain_runs_cancelled", sessions=len(pending))
