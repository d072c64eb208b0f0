"""The inbox: a durable, per-session queue and the workers that drain it.

`submit` stores a message (status `pending`) before returning, so a channel acknowledges the
platform only once nothing can be lost. Each busy session has one worker task: it takes *all*
of the session's waiting messages as one batch (messages that arrive during a turn are folded
into the next one, with no timer), so a session's messages are handled in arrival order and
never two turns at once, while different sessions run concurrently under a global cap. A turn
shows the model exactly its batch (`MessageStore.start_turn`): a message stored after the batch
was taken waits for the next turn, whatever the timing. On start-up `recover` re-queues what a
crash left `pending` or `processing`, every message of a session before its worker starts; on
shutdown `drain` lets running turns finish within a timeout and puts the rest back to `pending`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from bruce_bot.channels.base import Submission
from bruce_bot.domain import InboundMessage, MessageKind
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.stores import Stores

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """A stored message waiting for its session's next turn."""

    id: int
    kind: MessageKind = "chat"
    metadata: dict[str, Any] = field(default_factory=dict)
    text: str = ""


TurnProcessor = Callable[[SessionRecord, list[QueuedMessage]], Awaitable[None]]


def _next_batch(queue: list[QueuedMessage]) -> list[QueuedMessage]:
    """Take the next turn's messages off `queue`: a scheduled task alone (its turn runs without
    the scheduling tools, and its answer is a titled briefing), else the chat messages up to the
    next task. A user's "remind me…" is never answered in a briefing's turn."""
    if not queue:
        return []
    if queue[0].kind == "task":
        return [queue.pop(0)]
    end = next((i for i, item in enumerate(queue) if item.kind == "task"), len(queue))
    batch = queue[:end]
    del queue[:end]
    return batch


def prepare_text(text: str, max_chars: int) -> str | None:
    """The text to store: None for empty messages, long ones cut with a note for the model."""
    if not text or not text.strip():
        return None
    if len(text) <= max_chars:
        return text
    return (
        text[:max_chars]
        + f"\n\n[Note: this message was truncated; it had {len(text)} characters and only the "
        f"first {max_chars} are shown. Tell the user if the missing part matters.]"
    )


class Inbox:
    def __init__(
        self,
        stores: Stores,
        process_turn: TurnProcessor,
        *,
        max_concurrent_sessions: int,
        max_message_chars: int,
    ) -> None:
        self._stores = stores
        self._process_turn = process_turn
        self._slots = asyncio.Semaphore(max_concurrent_sessions)
        self._max_message_chars = max_message_chars
        self._queues: dict[int, list[QueuedMessage]] = {}
        self._sessions: dict[int, SessionRecord] = {}
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._in_flight: dict[int, list[int]] = {}
        self._accepting = True

    @property
    def busy_sessions(self) -> int:
        return len(self._workers)

    async def submit(self, message: InboundMessage) -> Submission:
        """Store the message durably and wake its session's worker."""
        if not self._accepting:
            return Submission(False, reason="stopping")
        text = prepare_text(message.text, self._max_message_chars)
        if text is None:
            return Submission(False, reason="empty")
        session = await self._stores.sessions.get_or_create(message.session_key)
        # Stored and queued as one step: a caller cancelled in between (a platform request that
        # went away) must not leave a stored message that no worker will ever take.
        return await asyncio.shield(self._store(session, message, text))

    async def _store(
        self, session: SessionRecord, message: InboundMessage, text: str
    ) -> Submission:
        message_id = await self._stores.messages.add_inbound(session.id, message, text)
        if message_id is None:
            log.info(
                "inbound_duplicate",
                channel=message.channel,
                chat_id=message.chat_id,
                platform_message_id=message.platform_message_id,
            )
            return Submission(False, reason="duplicate")
        self._enqueue(session, QueuedMessage(message_id, message.kind, message.metadata, text))
        return Submission(True, message_id=message_id)

    async def recover(self) -> int:
        """Re-queue messages a previous run accepted but did not finish; returns how many."""
        unfinished = await self._stores.messages.unfinished_inbound()
        # Every session first, then every message, with no await in between: a worker starts
        # with all of its session's messages queued, so its first turn answers all of them.
        sessions: dict[int, SessionRecord | None] = {}
        for row in unfinished:
            if row.session_id not in sessions:
                sessions[row.session_id] = await self._stores.sessions.get(row.session_id)
        for row in unfinished:
            if (session := sessions[row.session_id]) is not None:
                self._enqueue(
                    session,
                    QueuedMessage(row.id, row.kind, row.extra or {}, row.content),  # type: ignore[arg-type]
                )
        if unfinished:
            log.info("inbox_recovered", messages=len(unfinished), sessions=len(self._queues))
        return len(unfinished)

    def enqueue_stored(self, session: SessionRecord, item: QueuedMessage) -> bool:
        """Queue a message its caller already stored as `pending` in a commit of its own (a
        scheduled briefing, stored with its task run). False while stopping: the message stays
        `pending` and `recover` queues it on the next start."""
        if not self._accepting:
            return False
        self._enqueue(session, item)
        return True

    def _enqueue(self, session: SessionRecord, item: QueuedMessage) -> None:
        self._queues.setdefault(session.id, []).append(item)
        self._sessions[session.id] = session
        if session.id not in self._workers:
            self._workers[session.id] = asyncio.create_task(
                self._work(session.id), name=f"session-{session.id}"
            )

    async def _work(self, session_id: int) -> None:
        try:
            while self._queues.get(session_id):
                async with self._slots:
                    # Take what is waiting now, including what arrived while queued.
                    batch = _next_batch(self._queues.get(session_id, []))
                    if not self._queues.get(session_id):
                        self._queues.pop(session_id, None)
                    if not batch:
                        continue
                    ids = [item.id for item in batch]
                    self._in_flight[session_id] = ids
                    try:
                        await self._process_turn(self._sessions[session_id], batch)
                    except Exception:  # the turn runner handles its own errors; this is a bug
                        log.exception("turn_crashed", session_id=session_id, message_ids=ids)
                        await self._stores.messages.set_status(ids, "failed")
                    finally:
                        self._in_flight.pop(session_id, None)
        finally:
            # No await between the last empty check and this line: nothing can slip in between.
            self._workers.pop(session_id, None)

    def stop_intake(self) -> None:
        self._accepting = False

    async def drain(self, grace_seconds: float) -> None:
        """Let running turns finish for up to `grace_seconds`; re-queue what could not."""
        self.stop_intake()
        workers = list(self._workers.values())
        if not workers:
            return
        log.info("inbox_draining", sessions=len(workers), grace_seconds=grace_seconds)
        _, still_running = await asyncio.wait(workers, timeout=grace_seconds)
        interrupted = [mid for ids in self._in_flight.values() for mid in ids]
        for task in still_running:
            task.cancel()
        await asyncio.gather(*still_running, return_exceptions=True)
        if interrupted:
            await self._stores.messages.set_status(interrupted, "pending")
            log.warning("inbox_requeued", messages=len(interrupted))
