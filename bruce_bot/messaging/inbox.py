"""The inbox: a durable, per-session queue and the workers that drain it.

`submit` stores a message (status `pending`) before returning, so a channel acknowledges the
platform only once nothing can be lost. When storing fails with a fault that passes (a full
disk, a locked or read-only file, the PostgreSQL server away: faults.py) it raises
`StorageUnavailableError` instead, and `health` (read by /healthz) says storage is down until a
message is stored again; the channels hold such a message back and try again.

The database is the queue: a session's worker takes *all* of the session's waiting messages as
one batch (`MessageStore.claim_batch`; messages that arrive during a turn are folded into the
next one, with no timer), so a session's messages are handled in arrival order and never two
turns at once, while different sessions run concurrently under a global cap. A turn shows the
model exactly its batch (`MessageStore.start_turn`).

A worker runs only while its process holds the session's lease (storage/leases.py): on SQLite
always; on PostgreSQL one process at a time, so two processes that store messages of one chat
never answer them twice or out of order. A process that cannot take a session's lease leaves the
message to the holder and pokes it (`announce`, a notification to the other processes); a worker
gives the lease up when nothing is left, then looks once more, so a message stored meanwhile is
never stranded. `recover` (at start-up, and periodically with other processes) takes the
sessions with unanswered messages that no live process holds; on shutdown `drain` lets running
turns finish within a timeout and puts the rest back to `pending`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import structlog

from bruce_bot.domain import InboundMessage, MessageKind, StorageUnavailableError, Submission
from bruce_bot.faults import StorageHealth, transient_reason
from bruce_bot.storage.leases import Leases
from bruce_bot.storage.messages import LeaseLostError, StoredMessage
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
    user_id: str = ""  # the platform's id of the person who wrote it ("" when unknown)

    @classmethod
    def of(cls, row: StoredMessage) -> QueuedMessage:
        return cls(row.id, row.kind, row.extra or {}, row.content, row.user_id or "")


TurnProcessor = Callable[[SessionRecord, list[QueuedMessage]], Awaitable[None]]


async def _nobody(session_id: int) -> None:
    return None


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


@dataclass(frozen=True, slots=True)
class InboxSettings:
    """How the inbox works, as configured: the channels this process runs (the sessions it
    recovers are theirs), how many sessions' turns run at once, and the longest message stored
    whole (`agent.max_concurrent_sessions`, `agent.max_message_chars`)."""

    channels: Collection[str]
    max_concurrent_sessions: int
    max_message_chars: int


class Inbox:
    def __init__(
        self,
        stores: Stores,
        process_turn: TurnProcessor,
        leases: Leases,
        settings: InboxSettings,
        *,
        announce: Callable[[int], Awaitable[None]] = _nobody,
        health: StorageHealth | None = None,
    ) -> None:
        self._stores = stores
        self.health = health or StorageHealth()
        self._process_turn = process_turn
        self._leases = leases
        self._channels = set(settings.channels)
        self._announce = announce  # tells the other processes a session has new messages
        self._slots = asyncio.Semaphore(settings.max_concurrent_sessions)
        self._max_message_chars = settings.max_message_chars
        self._sessions: dict[int, SessionRecord] = {}
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._more: set[int] = set()  # sessions with messages stored since their last claim
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
        if text is None and message.attachments:
            text = ""  # a photo or a voice note without words: the attachment is the message
        if text is None:
            return Submission(False, reason="empty")
        try:
            session = await self._stores.sessions.get_or_create(message.session_key)
            # Stored and woken as one step: a caller cancelled in between (a platform request
            # that went away) must not leave a stored message that no worker will look at.
            submission = await asyncio.shield(self._store(session, message, text))
        except Exception as exc:
            reason = transient_reason(exc)
            if reason is None:
                raise  # a bug: the channel says it could not be saved
            # The disk is full, the database away...: nothing was stored. The channel does not
            # acknowledge the message, so it comes again (or is kept) and is stored later.
            self.health.failed(reason, exc)
            raise StorageUnavailableError(reason) from exc
        self.health.stored()
        return submission

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
        self.wake(session)
        return Submission(True, message_id=message_id)

    async def recover(self) -> int:
        """Take the sessions with messages a previous run (or a process that died) accepted but
        did not finish, and that no live process holds; returns how many sessions."""
        if not self._accepting:
            return 0
        orphaned = await self._leases.orphaned(self._channels)
        found = await self._stores.sessions.get_many(orphaned)
        for session_id in orphaned:
            if (session := found.get(session_id)) is not None:
                self.wake(session)
        if orphaned:
            log.info("inbox_recovered", sessions=len(orphaned), session_ids=orphaned[:20])
        return len(orphaned)

    def enqueue_stored(self, session: SessionRecord, item: QueuedMessage) -> bool:
        """Wake the session for a message its caller already stored as `pending` in a commit of
        its own (a scheduled briefing, stored with its task run). False while stopping: the
        message stays `pending` and is taken on the next start."""
        if not self._accepting:
            return False
        self.wake(session)
        return True

    def wake(self, session: SessionRecord) -> None:
        """The session has a new message: its worker takes it, or one starts for it."""
        self._sessions[session.id] = session
        if session.id in self._workers:
            self._more.add(session.id)
            return
        self._workers[session.id] = asyncio.create_task(
            self._work(session.id), name=f"session-{session.id}"
        )

    def poke(self, session_id: int | None) -> None:
        """Another process stored a message of a session (None: of any, notices may have been
        missed): wake its worker if this process has one (else the process holding the session
        has it, or our worker's last look will)."""
        if session_id is None:
            self._more.update(self._workers)
        elif session_id in self._workers:
            self._more.add(session_id)

    async def _work(self, session_id: int) -> None:
        try:
            if not await self._take(session_id):
                return
            while self._leases.holds(session_id):
                self._more.discard(session_id)
                async with self._slots:
                    rows = await self._stores.messages.claim_batch(session_id)
                    if rows:
                        await self._answer(session_id, [QueuedMessage.of(row) for row in rows])
                        continue
                if session_id in self._more:
                    continue
                # Nothing left: give the session up, then look once more. A message another
                # process stored while we held it was committed before that process failed to
                # take the session, so this look sees it.
                await self._leases.release(session_id)
                if session_id not in self._more and not (
                    self._leases.shared and await self._stores.messages.has_unanswered(session_id)
                ):
                    return
                if not await self._take(session_id):
                    return
        except Exception:  # the database is away: the next recovery round takes the session
            log.exception("inbox_worker_failed", session_id=session_id)
        finally:
            # No await between the last look and this line: a wake() after it starts a worker.
            self._workers.pop(session_id, None)
            self._more.discard(session_id)

    async def _take(self, session_id: int) -> bool:
        if not self._accepting:
            return False
        if await self._leases.acquire(session_id):
            return True
        # Another live process works on this session: it takes the message (or its last look
        # does, if it is just letting the session go).
        await self._announce(session_id)
        return False

    async def _answer(self, session_id: int, batch: list[QueuedMessage]) -> None:
        ids = [item.id for item in batch]
        self._in_flight[session_id] = ids
        try:
            await self._process_turn(self._sessions[session_id], batch)
        except LeaseLostError:
            # This process stalled past its lease and another one took the session over: it
            # answers these messages; this turn's reply was not kept.
            log.warning("turn_abandoned_lease_lost", session_id=session_id, message_ids=ids)
            self._leases.forget(session_id)
        except Exception:  # the turn runner handles its own errors; this is a bug
            log.exception("turn_crashed", session_id=session_id, message_ids=ids)
            await self._stores.messages.set_status(ids, "failed", only_from="processing")
        finally:
            self._in_flight.pop(session_id, None)

    async def keep_leases(self) -> None:
        """Every third of a lease's life: renew this process's leases and take the sessions no
        live process holds (those of a process that died; on SQLite, one a failed worker left).
        Runs in the background for as long as the daemon does."""
        period = self._leases.claimant.seconds
        while True:
            await asyncio.sleep(period / 3)
            try:
                await self._leases.renew()
                if self._accepting:
                    await self.recover()
            except Exception as exc:  # the database is away: try again next round
                log.warning("session_leases_round_failed", error=repr(exc))

    def stop_intake(self) -> None:
        self._accepting = False

    async def drain(self, grace_seconds: float) -> None:
        """Let running turns finish for up to `grace_seconds`; re-queue what could not, and
        let the sessions go so that another process may take them at once."""
        self.stop_intake()
        workers = list(self._workers.values())
        if workers:
            log.info("inbox_draining", sessions=len(workers), grace_seconds=grace_seconds)
            _, still_running = await asyncio.wait(workers, timeout=grace_seconds)
            interrupted = [mid for ids in self._in_flight.values() for mid in ids]
            for task in still_running:
                task.cancel()
            await asyncio.gather(*still_running, return_exceptions=True)
            if interrupted:
                # Only what no ending settled: a turn stopped while its stored reply was being
                # sent is not run again (the outbox's redelivery sends what is missing).
                await self._stores.messages.set_status(
                    interrupted, "pending", only_from="processing"
                )
                log.warning("inbox_requeued", messages=len(interrupted))
        try:
            await self._leases.release_all()
        except Exception as exc:  # they lapse on their own
            log.warning("session_leases_not_released", error=repr(exc))
