"""The deliveries store: every attempt to send a part of an outgoing message, and its outcome.

A message's attempts are written together with its final status in one commit (the hot path
pays one transaction per reply, however many parts it had). The parts already sent are how a
later redelivery avoids sending them twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import utcnow
from bruce_bot.storage.messages import SET_STATUS
from bruce_bot.storage.models import DeliveryRow

_deliveries = DeliveryRow.__table__
INSERT_DELIVERY = _deliveries.insert()
SENT_PARTS = select(_deliveries.c.part).where(
    _deliveries.c.message_id == bindparam("mid"), _deliveries.c.status == "sent"
)


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    channel: str
    chat_id: str
    part: int
    attempt: int
    status: str  # sent | retrying | failed
    error: str | None = None


class DeliveryStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def settle(
        self, message_id: int | None, status: str, attempts: Sequence[DeliveryAttempt]
    ) -> None:
        """Record the attempts and the message's delivery status in one commit."""
        now = utcnow()
        rows = [
            {
                "message_id": message_id,
                "created_at": now,
                "channel": attempt.channel,
                "chat_id": attempt.chat_id,
                "part": attempt.part,
                "attempt": attempt.attempt,
                "status": attempt.status,
                "error": attempt.error,
            }
            for attempt in attempts
        ]
        async with self._engine.begin() as connection:
            if rows:
                await connection.execute(INSERT_DELIVERY, rows)
            if message_id is not None:
                await connection.execute(SET_STATUS, {"ids": [message_id], "new_status": status})

    async def sent_parts(self, message_id: int) -> set[int]:
        async with self._engine.connect() as connection:
            return {row[0] for row in await connection.execute(SENT_PARTS, {"mid": message_id})}
