"""Leases: which process works on a session's inbox, and which one is delivering a reply.

On SQLite the instance lock makes the daemon the only process, so `LocalLeases` grants every
session at once and only remembers which ones this run holds. On PostgreSQL several processes
share the database, so a session is worked on by the process holding its row in
`session_leases`: taken with one atomic upsert that succeeds only when the row is free, lapsed or
already ours, renewed while held, deleted when the session has nothing left to do, and taken over
by another process only once it lapsed (its owner died or stalled longer than
`database.lease_seconds`). One process at a time per session keeps a chat's messages answered
once and in order, whichever process stored them.

Replies carry a claim of their own (`messages.lease_owner` / `lease_until`), stamped when the
reply is stored (`Claimant.stamp`): another process's redelivery takes a pending reply only when
its claim has lapsed, and claims it (`SELECT … FOR UPDATE SKIP LOCKED`, so two sweeping processes
never take the same one). Lease times come from each process's own clock: the machines' clocks
must agree to well within `lease_seconds` (any NTP client does that).
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog
from sqlalchemy import bindparam, delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import MessageStatus, utcnow
from bruce_bot.storage.models import MessageRow, SessionLeaseRow, SessionRow, table_of

log = structlog.get_logger(__name__)

_leases = table_of(SessionLeaseRow)
_messages = table_of(MessageRow)
_sessions = table_of(SessionRow)
UNANSWERED: tuple[MessageStatus, ...] = ("pending", "processing")
DEFAULT_LEASE_SECONDS = 30.0


def new_owner() -> str:
    """A name for this run of the daemon in leases and claims: host, pid and a random part (a
    pid is reused after a restart, and the new run must not take the dead one's claims for its
    own; tests even run the daemon twice in one process)."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class Claimant:
    """Who this process is, and how long its claims last without renewal."""

    owner: str
    seconds: float

    def until(self, now: datetime | None = None) -> datetime:
        return (now or utcnow()) + timedelta(seconds=self.seconds)

    def stamp(self) -> dict[str, Any]:
        """The claim columns of a reply this process stores and is about to deliver."""
        return {"lease_owner": self.owner, "lease_until": self.until()}


@functools.cache
def default_claimant() -> Claimant:
    """The claimant of stores built without one (tools and tests outside the daemon)."""
    return Claimant(new_owner(), DEFAULT_LEASE_SECONDS)


class Leases(Protocol):
    claimant: Claimant

    @property
    def shared(self) -> bool:
        """Whether other processes take part (PostgreSQL)."""
        ...

    def holds(self, session_id: int) -> bool: ...

    def forget(self, session_id: int) -> None:
        """The session was taken over (found out by a turn): no longer ours, nothing to free."""
        ...

    async def acquire(self, session_id: int) -> bool: ...

    async def release(self, session_id: int) -> None: ...

    async def release_all(self) -> None: ...

    async def renew(self) -> set[int]:
        """Extend every lease held; returns the sessions whose lease another process took."""
        ...

    async def orphaned(self, channels: Collection[str]) -> list[int]:
        """Sessions of `channels` with unanswered messages that no live process holds."""
        ...


# Sessions with a user message no turn has finished, oldest message first.
_UNANSWERED_SESSIONS = (
    select(_messages.c.session_id)
    .join(_sessions, _sessions.c.id == _messages.c.session_id)
    .where(
        _messages.c.role == "user",
        _messages.c.status.in_(UNANSWERED),
        _sessions.c.channel.in_(bindparam("channels", expanding=True)),
    )
    .group_by(_messages.c.session_id)
    .order_by(_messages.c.session_id)
)


class _HeldSessions:
    """What both kinds of leases keep in memory: the sessions this process holds."""

    def __init__(self, engine: AsyncEngine, claimant: Claimant) -> None:
        self._engine = engine
        self.claimant = claimant
        self._held: set[int] = set()

    def holds(self, session_id: int) -> bool:
        return session_id in self._held

    def forget(self, session_id: int) -> None:
        self._held.discard(session_id)


class LocalLeases(_HeldSessions):
    """One process (SQLite): every session is ours for the asking."""

    shared = False

    async def acquire(self, session_id: int) -> bool:
        self._held.add(session_id)
        return True

    async def release(self, session_id: int) -> None:
        self._held.discard(session_id)

    async def release_all(self) -> None:
        self._held.clear()

    async def renew(self) -> set[int]:
        return set()

    async def orphaned(self, channels: Collection[str]) -> list[int]:
        async with self._engine.connect() as connection:
            rows = await connection.execute(_UNANSWERED_SESSIONS, {"channels": list(channels)})
            return [int(row[0]) for row in rows if row[0] not in self._held]


def _take_statement() -> Any:
    """Taken when free, lapsed or ours already; a live lease of another process stays as it is.
    (Built on first use: SQLite never needs PostgreSQL's dialect.)"""
    from sqlalchemy.dialects.postgresql import insert

    offer = insert(_leases).values(
        session_id=bindparam("sid"), owner=bindparam("me"), expires_at=bindparam("until")
    )
    return offer.on_conflict_do_update(
        index_elements=[_leases.c.session_id],
        set_={"owner": offer.excluded.owner, "expires_at": offer.excluded.expires_at},
        where=(_leases.c.expires_at < bindparam("now")) | (_leases.c.owner == bindparam("me")),
    ).returning(_leases.c.session_id)


# Only the leases a worker holds: a row of ours no worker has (its release failed, or it was
# judged lost) is let lapse, so that a recovery round, ours or another's, takes the session.
_RENEW = (
    _leases.update()
    .where(
        _leases.c.owner == bindparam("me"),
        _leases.c.session_id.in_(bindparam("held", expanding=True)),
    )
    .values(expires_at=bindparam("until"))
    .returning(_leases.c.session_id)
)
_LIVE_LEASES = select(_leases.c.session_id).where(_leases.c.expires_at >= bindparam("now"))


class PostgresLeases(_HeldSessions):
    """Leases in `session_leases`, shared by every process on the database."""

    shared = True

    def __init__(self, engine: AsyncEngine, claimant: Claimant) -> None:
        super().__init__(engine, claimant)
        self._take = _take_statement()
        # Which taking of a session the lease is (a count): a renewal judges only the ones it
        # saw, not a session released and taken again while it ran.
        self._takings: dict[int, int] = {}
        self._count = 0

    async def acquire(self, session_id: int) -> bool:
        now = utcnow()
        params = {
            "sid": session_id,
            "me": self.claimant.owner,
            "until": self.claimant.until(now),
            "now": now,
        }
        async with self._engine.begin() as connection:
            won = (await connection.execute(self._take, params)).first() is not None
        if won:
            self._held.add(session_id)
            self._count += 1
            self._takings[session_id] = self._count
        return won

    async def release(self, session_id: int) -> None:
        self._held.discard(session_id)
        self._takings.pop(session_id, None)
        async with self._engine.begin() as connection:
            await connection.execute(
                delete(_leases).where(
                    _leases.c.session_id == session_id, _leases.c.owner == self.claimant.owner
                )
            )

    async def release_all(self) -> None:
        self._held.clear()
        self._takings.clear()
        async with self._engine.begin() as connection:
            await connection.execute(delete(_leases).where(_leases.c.owner == self.claimant.owner))

    async def renew(self) -> set[int]:
        # Judged on the leases held when the round began: a session taken (or let go and taken
        # again) while the update ran is not in its answer, yet ours; judged lost, its worker
        # would stop and its row live on with nobody to answer the session.
        seen = {sid: self._takings.get(sid) for sid in self._held}
        if not seen:
            return set()
        params = {"me": self.claimant.owner, "until": self.claimant.until(), "held": list(seen)}
        async with self._engine.begin() as connection:
            kept = {int(row[0]) for row in await connection.execute(_RENEW, params)}
        lost = {
            sid
            for sid, taking in seen.items()
            if sid not in kept and sid in self._held and self._takings.get(sid) == taking
        }
        if lost:
            # This process stalled past its leases and another one took them over.
            log.error("session_leases_lost", session_ids=sorted(lost))
            self._held -= lost
        return lost

    async def orphaned(self, channels: Collection[str]) -> list[int]:
        async with self._engine.connect() as connection:
            live = {
                int(row[0]) for row in await connection.execute(_LIVE_LEASES, {"now": utcnow()})
            }
            rows = await connection.execute(_UNANSWERED_SESSIONS, {"channels": list(channels)})
            return [int(row[0]) for row in rows if row[0] not in live]


def open_leases(engine: AsyncEngine, claimant: Claimant, *, shared: bool) -> Leases:
    return PostgresLeases(engine, claimant) if shared else LocalLeases(engine, claimant)
