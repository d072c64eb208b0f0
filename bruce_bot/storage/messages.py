"""The messages store: the durable inbox, the conversation history and delivery status.

Every per-message query of the hot path lives here and uses plain Core statements, so a message
costs a handful of short transactions: insert it, mark its batch processing, read the history,
and finish the turn (reply + statuses + usage) in one commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker

from bruce_bot.domain import InboundMessage, LLMCallRecord, MessageKind, utcnow
from bruce_bot.storage.models import LLMCallRow, MessageRow, SessionRow


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    session_id: int
    role: str
    kind: str
    content: str
    author: str | None
    status: str
    created_at: datetime
    extra: dict[str, Any] | None = None


def usage_row(session_id: int | None, record: LLMCallRecord, at: datetime) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "purpose": record.purpose,
        "model": record.model,
        "input_tokens": record.usage.input_tokens,
        "output_tokens": record.usage.output_tokens,
        "cache_read_tokens": record.usage.cache_read_tokens,
        "cache_write_tokens": record.usage.cache_write_tokens,
        "duration_ms": record.duration_ms,
        "error": record.error,
        "created_at": at,
    }


_COLUMNS = (
    MessageRow.id,
    MessageRow.session_id,
    MessageRow.role,
    MessageRow.kind,
    MessageRow.content,
    MessageRow.author,
    MessageRow.status,
    MessageRow.created_at,
    MessageRow.extra,
)


def _stored(row: Any) -> StoredMessage:
    return StoredMessage(*row)


class MessageStore:
    def __init__(self, sessions: async_sessionmaker) -> None:
        self._sessions = sessions

    async def add_inbound(self, session_id: int, message: InboundMessage, text: str) -> int | None:
        """Persist a user message as `pending`; None when its platform id was already stored."""
        values = {
            "session_id": session_id,
            "role": "user",
            "kind": message.kind,
            "content": text,
            "user_id": message.user_id or None,
            "author": message.user_name or None,
            "platform_message_id": message.platform_message_id,
            "status": "pending",
            "extra": message.metadata or None,
            "created_at": message.received_at,
        }
        async with self._sessions() as db:
            try:
                result = await db.execute(insert(MessageRow).values(**values))
                await db.commit()
            except IntegrityError:
                await db.rollback()
                return None
        return int(result.inserted_primary_key[0])

    async def set_status(self, message_ids: Sequence[int], status: str) -> None:
        if not message_ids:
            return
        async with self._sessions() as db:
            await db.execute(
                update(MessageRow).where(MessageRow.id.in_(message_ids)).values(status=status)
            )
            await db.commit()

    async def unfinished_inbound(self) -> list[StoredMessage]:
        """User messages a previous run accepted but never finished, oldest first."""
        query = (
            select(*_COLUMNS)
            .where(MessageRow.role == "user", MessageRow.status.in_(("pending", "processing")))
            .order_by(MessageRow.id)
        )
        async with self._sessions() as db:
            return [_stored(row) for row in await db.execute(query)]

    async def history(self, session_id: int, after_id: int, limit: int) -> list[StoredMessage]:
        """The newest `limit` messages after `after_id`, oldest first (notices excluded)."""
        query = (
            select(*_COLUMNS)
            .where(
                MessageRow.session_id == session_id,
                MessageRow.id > after_id,
                MessageRow.kind != "notice",
            )
            .order_by(MessageRow.id.desc())
            .limit(limit)
        )
        async with self._sessions() as db:
            rows = [_stored(row) for row in await db.execute(query)]
        rows.reverse()
        return rows

    async def recent(
        self, session_id: int, after_id: int = 0, limit: int = 200
    ) -> list[StoredMessage]:
        """Messages of a session for display (notices included), oldest first."""
        query = (
            select(*_COLUMNS)
            .where(MessageRow.session_id == session_id, MessageRow.id > after_id)
            .order_by(MessageRow.id)
            .limit(limit)
        )
        async with self._sessions() as db:
            return [_stored(row) for row in await db.execute(query)]

    async def finish_turn(
        self,
        session_id: int,
        inbound_ids: Sequence[int],
        inbound_status: str,
        reply: str,
        reply_kind: MessageKind,
        usage: Sequence[LLMCallRecord] = (),
    ) -> tuple[int, datetime]:
        """Store the reply, settle the inbound messages and record usage, in one commit."""
        now = utcnow()
        async with self._sessions() as db:
            result = await db.execute(
                insert(MessageRow).values(
                    session_id=session_id,
                    role="assistant",
                    kind=reply_kind,
                    content=reply,
                    status="pending",
                    created_at=now,
                )
            )
            if inbound_ids:
                await db.execute(
                    update(MessageRow)
                    .where(MessageRow.id.in_(inbound_ids))
                    .values(status=inbound_status)
                )
            await db.execute(
                update(SessionRow).where(SessionRow.id == session_id).values(last_message_at=now)
            )
            if usage:
                await db.execute(
                    insert(LLMCallRow),
                    [usage_row(session_id, record, now) for record in usage],
                )
            await db.commit()
        return int(result.inserted_primary_key[0]), now

    async def add_outbound(
        self, session_id: int, text: str, kind: MessageKind, extra: dict[str, Any] | None = None
    ) -> int:
        """Store a message Bruce sends on its own (reminders): pending until delivered."""
        async with self._sessions() as db:
            result = await db.execute(
                insert(MessageRow).values(
                    session_id=session_id,
                    role="assistant",
                    kind=kind,
                    content=text,
                    status="pending",
                    extra=extra,
                    created_at=utcnow(),
                )
            )
            await db.commit()
        return int(result.inserted_primary_key[0])

    async def undelivered(self) -> list[StoredMessage]:
        """Replies stored but never confirmed delivered (a crash between store and send)."""
        query = (
            select(*_COLUMNS)
            .where(MessageRow.role == "assistant", MessageRow.status == "pending")
            .order_by(MessageRow.id)
        )
        async with self._sessions() as db:
            return [_stored(row) for row in await db.execute(query)]
