"""Rolling summaries: fold a long conversation's older messages into one short text.

When a session's history outgrows its budget (`agent.history_max_messages` messages or
`agent.history_max_chars` characters), the background model merges the previous summary with the
older messages, keeping the newest `agent.summary_keep_messages` verbatim. The prompt then holds
the summary plus the recent messages only, so its size stays bounded however long the session.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import structlog

from bruce_bot.agent.context_budget import ContextBudget
from bruce_bot.config import AgentConfig, LLMConfig
from bruce_bot.domain import ChatMessage, LLMCallRecord, SystemPrompt
from bruce_bot.llm.base import LLMError, LLMRequest, LLMService
from bruce_bot.llm.context_windows import context_window
from bruce_bot.storage.audit import AuditStore
from bruce_bot.storage.messages import MessageStore, StoredMessage
from bruce_bot.storage.summaries import SummaryStore

log = structlog.get_logger(__name__)

SUMMARY_INSTRUCTIONS = (
    "You keep the running memory of a conversation between a user and their assistant, Bruce. "
    "Merge the previous summary (if any) and the new messages into one updated summary in "
    "concise markdown, at most about 300 words. Keep what matters later: facts about the user, "
    "preferences, decisions, promises, open tasks and reminders, names, dates and links that "
    "were produced. Drop greetings and small talk. Write only the summary."
)
MAX_CHARS_PER_MESSAGE = 4_000
SUMMARY_MAX_TOKENS = 1024


def over_budget(history: Sequence[StoredMessage], config: AgentConfig) -> bool:
    if len(history) >= config.history_max_messages:
        return True
    return sum(len(m.content) for m in history) > config.history_max_chars


def _oldest_within(messages: Sequence[StoredMessage], max_chars: int) -> list[StoredMessage]:
    """The oldest messages whose transcript lines fit `max_chars` (at least one)."""
    taken: list[StoredMessage] = []
    total = 0
    for message in messages:
        total += min(len(message.content), MAX_CHARS_PER_MESSAGE) + 40  # + time and speaker
        if taken and total > max_chars:
            break
        taken.append(message)
    return taken


def _transcript(previous: str | None, messages: Sequence[StoredMessage]) -> str:
    lines = []
    for m in messages:
        speaker = "Bruce" if m.role == "assistant" else (m.author or "User")
        content = (
            m.content
            if len(m.content) <= MAX_CHARS_PER_MESSAGE
            else m.content[:MAX_CHARS_PER_MESSAGE] + " [...]"
        )
        lines.append(f"[{m.created_at:%Y-%m-%d %H:%M}] {speaker}: {content}")
    previous_block = previous.strip() if previous else "(none yet)"
    return (
        f"<previous_summary>\n{previous_block}\n</previous_summary>\n\n"
        "<new_messages>\n" + "\n".join(lines) + "\n</new_messages>"
    )


class Summarizer:
    def __init__(
        self,
        llm: LLMService,
        llm_config: LLMConfig,
        config: AgentConfig,
        messages: MessageStore,
        summaries: SummaryStore,
        audit: AuditStore,
    ) -> None:
        self._llm = llm
        self._model = llm_config.effective_background_model
        # What the background model can read at once: a long backlog is folded in several
        # steps rather than overflowing a small local model's window.
        window = context_window(llm_config, self._model)
        self._max_transcript_chars = ContextBudget(window, SUMMARY_MAX_TOKENS).history_chars(
            SystemPrompt(stable=(SUMMARY_INSTRUCTIONS,)), ()
        )
        self._config = config
        self._messages = messages
        self._summaries = summaries
        self._audit = audit

    async def fold(self, session_id: int, context_start: int) -> bool:
        """Fold everything but the newest messages into the summary; False when nothing to do."""
        previous = await self._summaries.latest(session_id)
        if previous is not None and previous.covers_until_message_id <= context_start:
            previous = None  # a summary from before `/new` is not carried into the new context
        after = max(context_start, previous.covers_until_message_id if previous else 0)
        # Read a bounded window: a huge backlog is folded over several turns, never all at once.
        window = await self._messages.history(
            session_id, after, self._config.history_max_messages * 2
        )
        keep = self._config.summary_keep_messages
        to_fold = _oldest_within(
            window[: len(window) - keep] if keep else window, self._max_transcript_chars
        )
        if not to_fold:
            return False
        transcript = _transcript(previous.content if previous else None, to_fold)
        started = time.perf_counter()
        try:
            response = await self._llm.complete(
                LLMRequest(
                    SystemPrompt(stable=(SUMMARY_INSTRUCTIONS,)),
                    [ChatMessage("user", transcript)],
                    model=self._model,
                    max_tokens=SUMMARY_MAX_TOKENS,
                )
            )
        except LLMError as exc:
            log.warning("summary_failed", session_id=session_id, error=str(exc))
            await self._audit.record_usage(
                session_id, [LLMCallRecord("summary", self._model, error=str(exc))]
            )
            return False
        duration = (time.perf_counter() - started) * 1000
        await self._audit.record_usage(
            session_id,
            [LLMCallRecord("summary", response.model or self._model, response.usage, duration)],
        )
        if not response.text.strip():
            log.warning("summary_empty", session_id=session_id)
            return False
        await self._summaries.save(session_id, response.text.strip(), to_fold[-1].id)
        log.info(
            "summary_folded",
            session_id=session_id,
            folded=len(to_fold),
            kept=len(window) - len(to_fold),
        )
        return True
