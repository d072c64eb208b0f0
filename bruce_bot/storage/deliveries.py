"""The deliveries store: every attempt to send a part of an outgoing message, and its outcome.

Attempts are written as they happen (`record`): a part the platform accepted is on disk before
the next part is tried, so a crash repeats at most the part that was in flight. The parts
recorded sent are how a later redelivery avoids sending them twice; of a part the platform took
as several messages, the attempt that failed records how many of them got through (`pieces`),
and the redelivery starts after those. The last attempt goes in
one commit with the message's final status (`settle`): a one-part reply costs one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import DeliveryStatus, MessageKind, utcnow
from bruce_bot.storage.models import DeliveryRow, MessageRow, SessionRow, table_of

_deliveries = table_of(DeliveryRow)
_messages = table_of(MessageRow)
_sessions = table_of(SessionRow)
# How one attempt to send one part ended: `retrying` is a failure another attempt follows.
AttemptStatus = Literal["sent", "retrying", "failed"]
INSERT_DELIVERY = _deliveries.insert()
# The outcome lets the reply go: an `undelivered` one is any process's to try again.
SETTLE = (
    _messages.update()
    .where(_messages.c.id == bindparam("mid"))
    .values(status=bindparam("new_status"), lease_owner=None, lease_until=None)
)
SENT_PARTS = select(_deliveries.c.part).where(
    _deliveries.c.message_id == bindparam("mid"), _deliveries.c.status == "sent"
)
SENT_PIECES = (
    select(_deliveries.c.part, func.max(_deliveries.c.pieces))
    .where(_deliveries.c.message_id == bindparam("mid"), _deliveries.c.pieces.is_not(None))
    .group_by(_deliveries.c.part)
)


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    channel: str
    chat_id: str
    part: int
    attempt: int
    status: AttemptStatus
    error: str | None = None
    pieces: int | None = None  # a failed part's messages that got through (see DeliveryRow)


@dataclass(frozen=True, slots=True)
class FailedDelivery:
    """A stored outgoing message that did not reach its chat, with how its attempts ended."""

    message_id: int
    session_id: int
    channel: str
    chat_id: str
    kind: MessageKind
    content: str
    status: DeliveryStatus  # failed (permanent) or undelivered (retried later)
    created_at: datetime
    attempts: int
    error: str | None
    last_attempt_at: datetime | None


def _rows(message_id: int | None, attempts: Sequence[DeliveryAttempt]) -> list[dict[str, object]]:
    now = utcnow()
    return [
        {
            "message_id": message_id,
            "created_at": now,
            "channel": attempt.channel,
            "chat_id": attempt.chat_id,
            "part": attempt.part,
            "attempt": attempt.attempt,
            "status": attempt.status,
            "error": attempt.error,
            "pieces": attempt.pieces,
        }
        for attempt in attempts
    ]


class DeliveryStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record(self, message_id: int | None, attempts: Sequence[DeliveryAttempt]) -> None:
        """Commit attempts as they happen; the message's status stays as it is."""
        if not attempts:
            return
        async with self._engine.begin() as connection:
            await connection.execute(INSERT_DELIVERY, _rows(message_id, attempts))

    async def settle(
        self,
        message_id: int | None,
        status: DeliveryStatus,
        attempts: Sequence[DeliveryAttempt] = (),
    ) -> None:
        """Record the last attempts and the message's delivery status in one commit."""
        rows = _rows(message_id, attempts)
        async with self._engine.begin() as connection:
            if rows:
                await connection.execute(INSERT_DELIVERY, rows)
            if message_id is not None:
                await connection.execute(SETTLE, {"mid": message_id, "new_status": status})

    async def sent_parts(self, message_id: int) -> set[int]:
        async with self._engine.connect() as connection:
            return {row[0] for row in await connection.execute(SENT_PARTS, {"mid": message_id})}

    async def sent_pieces(self, message_id: int) -> dict[int, int]:
        """Part -> how many of its messages were delivered, for the parts a platform took as
        several messages whose delivery failed midway."""
        async with self._engine.connect() as connection:
            rows = await connection.execute(SENT_PIECES, {"mid": message_id})
            return {int(row[0]): int(row[1]) for row in rows if row[1]}

    async def not_delivered(
        self, statuses: Sequence[DeliveryStatus], before_id: int | None = None, limit: int = 50
    ) -> list[FailedDelivery]:
        """Outgoing messages in one of `statuses`, newest first, each with its attempt count
        and the last attempt's error (`before_id` pages back from an earlier answer)."""
        page = (
            select(
                _messages.c.id,
                _messages.c.session_id,
                _sessions.c.channel,
                _sessions.c.chat_id,
                _messages.c.kind,
                _messages.c.content,
                _messages.c.status,
                _messages.c.created_at,
            )
            .join(_sessions, _sessions.c.id == _messages.c.session_id)
            .where(_messages.c.role == "assistant", _messages.c.status.in_(list(statuses)))
        )
        if before_id is not None:
            page = page.where(_messages.c.id < before_id)
        page = page.order_by(_messages.c.id.desc()).limit(limit)
        async with self._engine.connect() as connection:
            messages: list[Sequence[Any]] = list(await connection.execute(page))
            ids = [row[0] for row in messages]
            counts = (
                select(
                    _deliveries.c.message_id,
                    func.count().label("attempts"),
                    func.max(_deliveries.c.id).label("last_id"),
                )
                .where(_deliveries.c.message_id.in_(ids))
                .group_by(_deliveries.c.message_id)
                .subquery()
            )
            last = select(
                counts.c.message_id,
                counts.c.attempts,
                _deliveries.c.error,
                _deliveries.c.created_at,
            ).join(_deliveries, _deliveries.c.id == counts.c.last_id)
            attempts = {row[0]: row[1:] for row in await connection.execute(last)} if ids else {}
        return [FailedDelivery(*row, *attempts.get(row[0], (0, None, None))) for row in messages]
