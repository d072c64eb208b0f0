"""The sessions store: one conversation per (channel, chat id), cached in memory.

Once a session is known its record is kept in memory and the per-message path never has to look
it up again. There is one record object per session, and running turns hold it, so a change
changes that object in place: a write through this store right after its commit, and a write by
another process sharing the database when its notice arrives on the change feed (topic
`session`, the session id; `"*"` after the feed lost its connection): the row is read again in
the background and copied onto the record, and the by-key index follows a chat that moved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal

import structlog
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import SessionKey, utcnow
from bruce_bot.storage.changes import EVERYTHING, ChangeFeed, LocalFeed
from bruce_bot.storage.models import SessionRow, from_row, inserted_id, table_of

log = structlog.get_logger(__name__)

TOPIC = "session"
REFRESH_BATCH = 500  # sessions re-read per query
REFRESH_ATTEMPTS = 3
REFRESH_RETRY_SECONDS = 1.0

# A conversation with a chat, or a sub-agent's under one (`parent_id`).
SessionKind = Literal["parent", "child"]


@dataclass(slots=True)
class SessionRecord:
    id: int
    channel: str
    chat_id: str
    kind: SessionKind
    last_message_at: datetime | None
    context_start_message_id: int
    title: str | None = None
    # Kept by the analytical brain; shown to the agent through its system prompt.
    parent_id: int | None = None
    nickname: str | None = None
    active_skills: list[str] = field(default_factory=list)
    active_workflow: str | None = None

    def __post_init__(self) -> None:
        if self.active_skills is None:  # a row written before the column had a default
            self.active_skills = []


_table = table_of(SessionRow)
# In the order of SessionRecord's fields.
_COLUMNS = (
    _table.c.id,
    _table.c.channel,
    _table.c.chat_id,
    _table.c.kind,
    _table.c.last_message_at,
    _table.c.context_start_message_id,
    _table.c.title,
    _table.c.parent_id,
    _table.c.nickname,
    _table.c.active_skills,
    _table.c.active_workflow,
)
# Copied from a row read again onto the cached record; the last message time goes its own way.
_REFRESHED = tuple(f.name for f in fields(SessionRecord) if f.name != "last_message_at")


class SessionStore:
    def __init__(self, engine: AsyncEngine, feed: ChangeFeed | None = None) -> None:
        self._engine = engine
        self._feed = feed or LocalFeed()
        self._by_key: dict[SessionKey, SessionRecord] = {}
        self._by_id: dict[int, SessionRecord] = {}
        # Bumped by every notice and every write here: a row read while it moved may be older
        # than what is known by now, so that session is read again.
        self._epoch = 0
        self._notices = 0  # bumped by every notice only
        # Per cached session, bumped likewise: a refresh applies only rows read since the last.
        self._versions: dict[int, int] = {}
        self._stale: set[int] = set()  # cached sessions waiting to be read again
        self._refresher: asyncio.Task[None] | None = None
        self._feed.subscribe(TOPIC, self._changed_elsewhere)

    def _remember(self, record: SessionRecord, epoch: int) -> SessionRecord:
        """Cache a record read when the epoch was `epoch`; returns the one object for its id."""
        cached = self._by_id.get(record.id)
        if cached is not None:
            return cached  # kept true by writes and notices; turns may hold it
        self._by_key[SessionKey(record.channel, record.chat_id)] = record
        self._by_id[record.id] = record
        self._versions[record.id] = 0
        if self._epoch != epoch:
            self._mark_stale((record.id,))
        return record

    def _written(self, session_id: int, notices: int) -> None:
        """After a write here has been applied to the cached record (if any); `notices` is the
        count of notices when it began."""
        changed_meanwhile = self._notices != notices
        self._epoch += 1
        if session_id in self._versions:
            self._versions[session_id] += 1
            if changed_meanwhile:  # another process's write may have landed just before ours
                self._mark_stale((session_id,))

    # ---- changes made by other processes -----------------------------------------------------

    def _changed_elsewhere(self, key: str) -> None:
        self._epoch += 1
        self._notices += 1
        if key == EVERYTHING:
            self._mark_stale(tuple(self._by_id))
            return
        try:
            session_id = int(key)
        except ValueError:
            log.warning("session_notice_ignored", key=key)
            return
        if session_id in self._by_id:
            self._mark_stale((session_id,))

    def _mark_stale(self, session_ids: Sequence[int]) -> None:
        for session_id in session_ids:
            self._versions[session_id] = self._versions.get(session_id, 0) + 1
        self._stale.update(session_ids)
        if self._stale and (self._refresher is None or self._refresher.done()):
            self._refresher = asyncio.get_running_loop().create_task(
                self._refresh(), name="sessions-refresh"
            )

    async def _refresh(self) -> None:
        """Read the stale sessions again, a batch at a time, until none is left."""
        failures = 0
        while self._stale:
            batch = {sid: self._versions.get(sid, 0) for sid in list(self._stale)[:REFRESH_BATCH]}
            self._stale.difference_update(batch)
            try:
                async with self._engine.connect() as connection:
                    result = await connection.execute(
                        select(*_COLUMNS).where(_table.c.id.in_(batch))
                    )
                    rows = {row[0]: row for row in result}
            except Exception as exc:
                failures += 1
                self._stale.update(batch)
                if failures >= REFRESH_ATTEMPTS:  # the next notice tries again; a lost feed
                    # sends "*" once it is back
                    log.warning(
                        "sessions_refresh_failed", sessions=len(self._stale), error=repr(exc)
                    )
                    self._stale.clear()
                    return
                await asyncio.sleep(REFRESH_RETRY_SECONDS)
                continue
            failures = 0
            for session_id, version in batch.items():
                if session_id not in self._by_id:
                    continue
                if self._versions.get(session_id) != version:
                    self._stale.add(session_id)  # changed again while we read: read once more
                elif session_id in rows:
                    self._apply(self._by_id[session_id], rows[session_id])
                else:
                    self._forget(session_id)  # deleted elsewhere

    def _apply(self, record: SessionRecord, row: Sequence[Any]) -> None:
        fresh = from_row(SessionRecord, row)
        old_key = SessionKey(record.channel, record.chat_id)
        for name in _REFRESHED:
            setattr(record, name, getattr(fresh, name))
        # `touch` is ahead of the database until the turn persists it: never move it back.
        if fresh.last_message_at is not None and (
            record.last_message_at is None or fresh.last_message_at > record.last_message_at
        ):
            record.last_message_at = fresh.last_message_at
        new_key = SessionKey(record.channel, record.chat_id)
        if new_key != old_key:
            if self._by_key.get(old_key) is record:
                del self._by_key[old_key]
            self._by_key[new_key] = record
            log.info("session_chat_moved_elsewhere", session_id=record.id, chat_id=record.chat_id)

    def _forget(self, session_id: int) -> None:
        record = self._by_id.pop(session_id)
        self._versions.pop(session_id, None)
        key = SessionKey(record.channel, record.chat_id)
        if self._by_key.get(key) is record:
            del self._by_key[key]

    # ---- reading and writing -----------------------------------------------------------------

    async def get_or_create(self, key: SessionKey) -> SessionRecord:
        cached = self._by_key.get(key)
        if cached is not None:
            return cached
        query = select(*_COLUMNS).where(
            _table.c.channel == key.channel, _table.c.chat_id == key.chat_id
        )
        epoch = self._epoch
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            values = {
                "channel": key.channel,
                "chat_id": key.chat_id,
                "kind": "parent",
                "active_skills": [],
                "context_start_message_id": 0,
                "created_at": utcnow(),
            }
            try:
                async with self._engine.begin() as connection:
                    await connection.execute(_table.insert(), values)
            except IntegrityError:  # created concurrently: read it back below
                pass
            async with self._engine.connect() as connection:
                row = (await connection.execute(query)).one()
        return self._remember(from_row(SessionRecord, row), epoch)

    async def find(self, key: SessionKey) -> SessionRecord | None:
        """The session of `key` if there is one (never creates it)."""
        cached = self._by_key.get(key)
        if cached is not None:
            return cached
        query = select(*_COLUMNS).where(
            _table.c.channel == key.channel, _table.c.chat_id == key.chat_id
        )
        epoch = self._epoch
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return self._remember(from_row(SessionRecord, row), epoch) if row is not None else None

    async def move_chat(self, key: SessionKey, new_chat_id: str) -> SessionRecord | None:
        """The chat of `key` now has the id `new_chat_id`: the session follows it, keeping its
        id, history and summary (the cached record changes in place, so a turn running for it
        replies to the new id). Returns the moved session; None when `key` has no session, or
        when `new_chat_id` already has one of its own: two sessions are not merged, the old one
        stays where it is as history (the caller moves what must follow the chat)."""
        session = await self.find(key)
        if session is None or await self.find(SessionKey(key.channel, new_chat_id)) is not None:
            return None
        notices = self._notices
        async with self._engine.begin() as connection:
            await connection.execute(
                update(_table).where(_table.c.id == session.id).values(chat_id=new_chat_id)
            )
            await self._feed.publish_with(connection, TOPIC, str(session.id))
        if self._by_key.get(key) is session:
            del self._by_key[key]
        session.chat_id = new_chat_id
        self._by_key[SessionKey(session.channel, new_chat_id)] = session
        self._written(session.id, notices)
        return session

    async def get(self, session_id: int) -> SessionRecord | None:
        cached = self._by_id.get(session_id)
        if cached is not None:
            return cached
        query = select(*_COLUMNS).where(_table.c.id == session_id)
        epoch = self._epoch
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return self._remember(from_row(SessionRecord, row), epoch) if row is not None else None

    def touch(self, session_id: int, at: datetime) -> None:
        """Record in the cache that the session had a message at `at` (persisted by the turn)."""
        record = self._by_id.get(session_id)
        if record is not None:
            record.last_message_at = at

    async def set_context_start(self, session_id: int, message_id: int) -> None:
        await self._set(session_id, context_start_message_id=message_id)

    async def get_many(self, session_ids: Iterable[int]) -> dict[int, SessionRecord]:
        """The sessions with these ids that exist, by id (cached ones without a query)."""
        wanted = set(session_ids)
        found = {sid: self._by_id[sid] for sid in wanted if sid in self._by_id}
        missing = wanted - found.keys()
        if missing:
            query = select(*_COLUMNS).where(_table.c.id.in_(missing))
            epoch = self._epoch
            async with self._engine.connect() as connection:
                loaded = [from_row(SessionRecord, row) for row in await connection.execute(query)]
            for record in loaded:
                found[record.id] = self._remember(record, epoch)
        return found

    async def list_recent(self, limit: int = 100) -> list[SessionRecord]:
        """Sessions with the most recent activity first (for the dashboard and the API)."""
        query = (
            select(*_COLUMNS)
            .order_by(_table.c.last_message_at.desc().nulls_last(), _table.c.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as connection:
            return [from_row(SessionRecord, row) for row in await connection.execute(query)]

    async def children(self, parent_id: int) -> list[SessionRecord]:
        """The sub-agents' sessions under `parent_id`, oldest first."""
        query = select(*_COLUMNS).where(_table.c.parent_id == parent_id).order_by(_table.c.id)
        async with self._engine.connect() as connection:
            return [from_row(SessionRecord, row) for row in await connection.execute(query)]

    def forget(self, session_ids: Iterable[int]) -> None:
        """These sessions were deleted (storage/session_removal.py): the next message of their
        chat makes a new session instead of finding the cached record."""
        self._epoch += 1
        for session_id in session_ids:
            self._stale.discard(session_id)
            if session_id in self._by_id:
                self._forget(session_id)

    # ---- what the analytical brain maintains ---------------------------------------------------

    async def create_child(self, parent_id: int, key: SessionKey) -> SessionRecord:
        """A sub-agent's session under `parent_id` (kind `child`)."""
        values = {
            "channel": key.channel,
            "chat_id": key.chat_id,
            "kind": "child",
            "parent_id": parent_id,
            "active_skills": [],
            "context_start_message_id": 0,
            "created_at": utcnow(),
        }
        epoch = self._epoch
        async with self._engine.begin() as connection:
            result = await connection.execute(_table.insert(), values)
            query = select(*_COLUMNS).where(_table.c.id == inserted_id(result))
            row = (await connection.execute(query)).one()
        return self._remember(from_row(SessionRecord, row), epoch)

    async def _set(self, session_id: int, **values: object) -> None:
        notices = self._notices
        async with self._engine.begin() as connection:
            await connection.execute(update(_table).where(_table.c.id == session_id).values(values))
            await self._feed.publish_with(connection, TOPIC, str(session_id))
        record = self._by_id.get(session_id)
        if record is not None:
            for name, value in values.items():
                setattr(record, name, value)
        self._written(session_id, notices)

    async def set_title(self, session_id: int, title: str) -> None:
        await self._set(session_id, title=title)

    async def set_active_skills(self, session_id: int, names: list[str]) -> None:
        await self._set(session_id, active_skills=list(names))

    async def set_active_workflow(self, session_id: int, name: str | None) -> None:
        await self._set(session_id, active_workflow=name)

    async def nickname_taken(self, nickname: str, by_other_than: int) -> bool:
        query = select(_table.c.id).where(
            _table.c.nickname == nickname, _table.c.id != by_other_than
        )
        async with self._engine.connect() as connection:
            return (await connection.execute(query)).first() is not None

    async def set_nickname(self, session_id: int, nickname: str) -> bool:
        """Give the session `nickname`; False when another session already has it."""
        try:
            await self._set(session_id, nickname=nickname)
        except IntegrityError:  # the unique index: taken by another session meanwhile
            return False
        return True
