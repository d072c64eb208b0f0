"""The pairing store: who the owner let in on a chat platform, and the codes strangers wait with.

`approved_users` holds the people let in from the dashboard or the CLI (config.yml's
`allowed_user_ids` stay in the file); `pairing_codes` the one-time codes given to strangers,
one per stranger and channel, each valid until `expires_at`. Nothing is cached: a channel asks
`is_approved` for each message of someone not in config.yml, so an approval or a revocation
made by another process (the `bruce pairing` CLI beside a running daemon on SQLite, another
daemon on PostgreSQL) counts from the next message on. Approving takes the code away in the
same transaction as it lets the person in, so a code works once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bruce_bot.storage.models import (
    ApprovedUserRow,
    PairingCodeRow,
    columns_for,
    from_row,
    table_of,
)

_approved = table_of(ApprovedUserRow)
_codes = table_of(PairingCodeRow)
NEW_CODE_TRIES = 5  # a fresh random code that is already taken: draw again


@dataclass(frozen=True, slots=True)
class ApprovedUser:
    channel: str
    user_id: int | str  # a number on Telegram and Discord, text on Matrix and Slack
    name: str
    chat_id: str
    approved_by: str  # "dashboard" | "cli"
    approved_at: datetime
    username: str = ""  # the platform's @username, without the @ ("" when it has none)


@dataclass(frozen=True, slots=True)
class PendingCode:
    code: str  # normalised: upper case, no separator
    channel: str
    user_id: int | str  # a number on Telegram and Discord, text on Matrix and Slack
    name: str
    chat_id: str
    created_at: datetime
    expires_at: datetime
    username: str = ""  # the platform's @username, without the @ ("" when it has none)


@dataclass(frozen=True, slots=True)
class Offered:
    """What `offer` gave: the stranger's code (`fresh`: made now, not one they had), or None
    when the channel already has `max_pending` strangers waiting."""

    code: PendingCode | None
    fresh: bool = False


_APPROVED = columns_for(_approved, ApprovedUser)
_PENDING = columns_for(_codes, PendingCode)


class PairingStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def is_approved(self, channel: str, user_id: int | str) -> bool:
        query = select(_approved.c.user_id).where(
            _approved.c.channel == channel, _approved.c.user_id == user_id
        )
        async with self._engine.connect() as connection:
            return (await connection.execute(query)).first() is not None

    async def approved(self) -> list[ApprovedUser]:
        query = select(*_APPROVED).order_by(_approved.c.channel, _approved.c.approved_at)
        async with self._engine.connect() as connection:
            return [from_row(ApprovedUser, row) for row in await connection.execute(query)]

    async def pending(self, now: datetime) -> list[PendingCode]:
        """The codes still valid at `now`, oldest first."""
        query = select(*_PENDING).where(_codes.c.expires_at > now).order_by(_codes.c.created_at)
        async with self._engine.connect() as connection:
            return [from_row(PendingCode, row) for row in await connection.execute(query)]

    async def offer(
        self,
        channel: str,
        user_id: int | str,
        name: str,
        chat_id: str,
        *,
        now: datetime,
        valid_for: timedelta,
        max_pending: int,
        new_code: Callable[[], str],
        username: str = "",
    ) -> Offered:
        """The stranger's still-valid code, else a new one (`new_code()`, normalised), unless
        `max_pending` others of the channel are waiting. Expired codes go first."""
        for _ in range(NEW_CODE_TRIES):
            try:
                async with self._engine.begin() as connection:
                    return await self._offer(
                        connection,
                        channel,
                        user_id,
                        name,
                        chat_id,
                        now,
                        valid_for,
                        max_pending,
                        new_code(),
                        username,
                    )
            except IntegrityError:
                continue  # the code drawn was taken, or the same stranger raced in: again
        raise RuntimeError("could not store a new pairing code")

    async def _offer(
        self,
        connection: AsyncConnection,
        channel: str,
        user_id: int | str,
        name: str,
        chat_id: str,
        now: datetime,
        valid_for: timedelta,
        max_pending: int,
        code: str,
        username: str,
    ) -> Offered:
        await connection.execute(delete(_codes).where(_codes.c.expires_at <= now))
        mine = (
            await connection.execute(
                select(*_PENDING).where(_codes.c.channel == channel, _codes.c.user_id == user_id)
            )
        ).first()
        if mine is not None:
            return Offered(from_row(PendingCode, mine))
        waiting = (
            await connection.execute(
                select(func.count()).select_from(_codes).where(_codes.c.channel == channel)
            )
        ).scalar_one()
        if waiting >= max_pending:
            return Offered(None)
        made = PendingCode(code, channel, user_id, name, chat_id, now, now + valid_for, username)
        await connection.execute(_codes.insert(), [_values(made)])
        return Offered(made, fresh=True)

    async def approve(
        self, code: str, *, now: datetime, by: str
    ) -> tuple[PendingCode, ApprovedUser] | None:
        """Let the holder of `code` (normalised) in and take the code away, in one commit; None
        when no such code is valid at `now` (unknown, used, denied or expired). The code is
        taken first (a write from the first statement: two approvals at once, or the CLI
        beside the daemon, find it once)."""
        async with self._engine.begin() as connection:
            pending = await _take(connection, code, now)
            if pending is None:
                return None
            await connection.execute(
                delete(_approved).where(
                    _approved.c.channel == pending.channel,
                    _approved.c.user_id == pending.user_id,
                )
            )
            person = ApprovedUser(
                pending.channel,
                pending.user_id,
                pending.name,
                pending.chat_id,
                by,
                now,
                pending.username,
            )
            await connection.execute(_approved.insert(), [_values(person)])
        return pending, person

    async def deny(self, code: str, *, now: datetime) -> PendingCode | None:
        """Take a valid code away without letting its holder in; None when there is none."""
        async with self._engine.begin() as connection:
            return await _take(connection, code, now)

    async def revoke(self, channel: str, user_id: int | str) -> ApprovedUser | None:
        """Shut an approved person out again; None when they were not approved here."""
        query = (
            delete(_approved)
            .where(_approved.c.channel == channel, _approved.c.user_id == user_id)
            .returning(*_APPROVED)
        )
        async with self._engine.begin() as connection:
            found = (await connection.execute(query)).first()
        return from_row(ApprovedUser, found) if found else None


async def _take(connection: AsyncConnection, code: str, now: datetime) -> PendingCode | None:
    """Delete `code` if it is still valid at `now`, returning it."""
    query = (
        delete(_codes).where(_codes.c.code == code, _codes.c.expires_at > now).returning(*_PENDING)
    )
    found = (await connection.execute(query)).first()
    return from_row(PendingCode, found) if found else None


def _values(record: ApprovedUser | PendingCode) -> dict[str, object]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}
