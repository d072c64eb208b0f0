"""The memories store: what each person told Bruce about themselves, across conversations.

A memory belongs to an owner, "<channel>:<user id>" of the person who said it; the dashboard may
link owners (the same person on Telegram and Discord) into one person, whose memories are then
shared by those owners and nobody else. Every read and write that comes from a chat names the
owner it acts for, and only that person's memories are found, changed or forgotten: a memory id
of somebody else's is "not found", never another person's text. Search is full-text
(`fulltext.py`): SQLite's FTS5 ranked by bm25, PostgreSQL's tsvector ranked by ts_rank. Rows are
read fresh every time (no cache): they are small, few per person, and other processes may write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import bindparam, delete, func, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import BindParameter

from bruce_bot.domain import utcnow
from bruce_bot.storage.fulltext import FTS_TABLE, POSTGRES_DOCUMENT, fts5_any, search_terms
from bruce_bot.storage.models import (
    MemoryLinkRow,
    MemoryRow,
    MessageRow,
    SessionRow,
    columns_for,
    from_row,
    inserted_id,
    table_of,
)

log = structlog.get_logger(__name__)

MAX_MEMORY_CHARS = 500
MAX_TAGS = 8
MAX_TAG_CHARS = 40


@dataclass(frozen=True, slots=True)
class Memory:
    id: int
    owner: str
    content: str
    tags: list[str]
    source_session_id: int | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Owner:
    """An owner as the dashboard lists it: who, under which person, how many memories."""

    owner: str
    person: str
    name: str | None
    memories: int
    last_updated_at: datetime | None


def owner_key(channel: str, user_id: str) -> str:
    """The owner of what a user of a channel says ("" when the message has no user)."""
    return f"{channel}:{user_id}" if channel and user_id else ""


def clean_tags(tags: Sequence[str] | None) -> list[str]:
    """Tags as stored: lower case, single words joined by hyphens, distinct, a few."""
    cleaned: dict[str, None] = {}
    for tag in tags or ():
        tag = "-".join(tag.lower().split())[:MAX_TAG_CHARS].strip("-#")
        if tag:
            cleaned.setdefault(tag, None)
    return list(cleaned)[:MAX_TAGS]


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.casefold().split()).rstrip(".") == " ".join(b.casefold().split()).rstrip(".")


_memories = table_of(MemoryRow)
_links = table_of(MemoryLinkRow)
_messages = table_of(MessageRow)
_sessions = table_of(SessionRow)
_COLUMNS = columns_for(_memories, Memory)
_SELECTED = ", ".join(f"memories.{column.name}" for column in _COLUMNS)
_owners: BindParameter[list[str]] = bindparam("owners", expanding=True)
SQLITE_SEARCH = (
    text(
        f"SELECT {_SELECTED} FROM memories JOIN {FTS_TABLE} ON {FTS_TABLE}.rowid = memories.id "
        f"WHERE {FTS_TABLE} MATCH :query AND memories.owner IN :owners "
        f"ORDER BY bm25({FTS_TABLE}), memories.updated_at DESC LIMIT :limit"
    )
    .bindparams(_owners)
    .columns(*_COLUMNS)
)
_POSTGRES_SEARCH = (
    f"SELECT {_SELECTED} FROM memories, {{tsquery}} AS query "
    f"WHERE memories.owner IN :owners AND {POSTGRES_DOCUMENT} @@ query "
    f"ORDER BY ts_rank({POSTGRES_DOCUMENT}, query) DESC, memories.updated_at DESC LIMIT :limit"
)
# The person's own words, as a search engine reads them ("vegan -cheese", "quoted phrase").
POSTGRES_SEARCH_AS_WRITTEN = (
    text(_POSTGRES_SEARCH.format(tsquery="websearch_to_tsquery('simple', :query)"))
    .bindparams(_owners)
    .columns(*_COLUMNS)
)
# Any of the words: `:query` is "'word' | 'word'", each word a `\w+` run (no quote inside).
POSTGRES_SEARCH_ANY = (
    text(_POSTGRES_SEARCH.format(tsquery="to_tsquery('simple', :query)"))
    .bindparams(_owners)
    .columns(*_COLUMNS)
)


class MemoryStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"

    # ---- who is one person -------------------------------------------------------------------

    async def _person(self, connection: AsyncConnection, owner: str) -> str:
        query = select(_links.c.person).where(_links.c.owner == owner)
        return (await connection.execute(query)).scalar() or owner

    async def _owners_of(self, connection: AsyncConnection, owner: str) -> list[str]:
        """Every owner whose memories `owner` sees: itself, and those linked with it."""
        person = await self._person(connection, owner)
        query = select(_links.c.owner).where(_links.c.person == person)
        linked = [str(row[0]) for row in await connection.execute(query)]
        return sorted({owner, person, *linked})

    async def owners_of(self, owner: str) -> list[str]:
        async with self._engine.connect() as connection:
            return await self._owners_of(connection, owner)

    async def link(self, owner: str, other: str) -> str:
        """Make `owner` and `other` one person (with everyone already linked to either); the
        person's key is returned."""
        async with self._engine.begin() as connection:
            person = await self._person(connection, owner)
            absorbed = await self._person(connection, other)
            if person == absorbed:
                return person
            now = utcnow()
            await connection.execute(
                update(_links).where(_links.c.person == absorbed).values(person=person)
            )
            existing = {
                str(row[0])
                for row in await connection.execute(
                    select(_links.c.owner).where(_links.c.owner.in_([owner, absorbed, other]))
                )
            }
            rows = [
                {"owner": key, "person": person, "created_at": now}
                for key in dict.fromkeys([owner, absorbed, other])
                if key not in existing
            ]
            if rows:
                await connection.execute(_links.insert(), rows)
        log.info("memory_owners_linked", owner=owner, other=other, person=person)
        return person

    async def unlink(self, owner: str) -> bool:
        """`owner` becomes a person of its own again; False if it was linked to nobody."""
        async with self._engine.begin() as connection:
            person = await self._person(connection, owner)
            group = await self._owners_of(connection, owner)
            if len(group) < 2:
                return False
            rest = [key for key in group if key != owner]
            await connection.execute(delete(_links).where(_links.c.owner == owner))
            if person == owner:  # the others stay one person, under another key
                await connection.execute(
                    update(_links).where(_links.c.person == owner).values(person=rest[0])
                )
            if len(rest) == 1:  # a person of one owner needs no link
                await connection.execute(delete(_links).where(_links.c.owner == rest[0]))
        log.info("memory_owner_unlinked", owner=owner)
        return True

    # ---- reading -----------------------------------------------------------------------------

    async def get(self, memory_id: int) -> Memory | None:
        query = select(*_COLUMNS).where(_memories.c.id == memory_id)
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return from_row(Memory, row) if row is not None else None

    async def of(self, owner: str, memory_id: int) -> Memory | None:
        """The memory `memory_id` if it is one of `owner`'s (linked owners included)."""
        async with self._engine.connect() as connection:
            owners = await self._owners_of(connection, owner)
            query = select(*_COLUMNS).where(
                _memories.c.id == memory_id, _memories.c.owner.in_(owners)
            )
            row = (await connection.execute(query)).first()
        return from_row(Memory, row) if row is not None else None

    async def recent(self, owner: str, limit: int = 50, offset: int = 0) -> list[Memory]:
        """The person's memories, the most recently saved or changed first."""
        async with self._engine.connect() as connection:
            owners = await self._owners_of(connection, owner)
            return await self._recent(connection, owners, limit, offset)

    async def _recent(
        self, connection: AsyncConnection, owners: list[str], limit: int, offset: int = 0
    ) -> list[Memory]:
        query = (
            select(*_COLUMNS)
            .where(_memories.c.owner.in_(owners))
            .order_by(_memories.c.updated_at.desc(), _memories.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        return [from_row(Memory, row) for row in await connection.execute(query)]

    async def count(self, owner: str) -> int:
        async with self._engine.connect() as connection:
            owners = await self._owners_of(connection, owner)
            query = select(func.count()).where(_memories.c.owner.in_(owners))
            return int((await connection.execute(query)).scalar() or 0)

    async def search(self, owner: str, query: str, limit: int = 10) -> list[Memory]:
        """The person's memories matching `query`, best first: as written (the search syntax
        of the database), else, when that finds nothing or cannot be read, any of its words."""
        async with self._engine.connect() as connection:
            owners = await self._owners_of(connection, owner)
            found = await self._as_written(connection, owners, query, limit)
            if not found:
                found = await self._any_word(connection, owners, search_terms(query), limit)
        return found

    async def relevant(self, owner: str, said: str, matches: int, recent: int) -> list[Memory]:
        """What a turn shows the model: up to `matches` memories matching what the person
        just said (any of its words), then up to `recent` of the newest others."""
        async with self._engine.connect() as connection:
            owners = await self._owners_of(connection, owner)
            found = await self._any_word(connection, owners, search_terms(said), matches)
            newest = await self._recent(connection, owners, recent + len(found))
        shown = {memory.id for memory in found}
        return [*found, *[m for m in newest if m.id not in shown][:recent]]

    async def _as_written(
        self, connection: AsyncConnection, owners: list[str], query: str, limit: int
    ) -> list[Memory]:
        if not query.strip():
            return []
        statement = SQLITE_SEARCH if self._sqlite else POSTGRES_SEARCH_AS_WRITTEN
        params = {"query": query, "owners": owners, "limit": limit}
        try:
            # A savepoint: on PostgreSQL a failed statement would end the whole transaction.
            async with connection.begin_nested():
                rows = await connection.execute(statement, params)
                return [from_row(Memory, row) for row in rows]
        except OperationalError as exc:  # FTS5 syntax it cannot read: "what's", "a:b", "("
            log.debug("memory_query_as_words", error=str(exc.orig)[:200])
            return []

    async def _any_word(
        self, connection: AsyncConnection, owners: list[str], terms: list[str], limit: int
    ) -> list[Memory]:
        if not terms or limit <= 0:
            return []
        if self._sqlite:
            statement, query = SQLITE_SEARCH, fts5_any(terms)
        else:
            statement, query = POSTGRES_SEARCH_ANY, " | ".join(f"'{term}'" for term in terms)
        rows = await connection.execute(
            statement, {"query": query, "owners": owners, "limit": limit}
        )
        return [from_row(Memory, row) for row in rows]

    # ---- writing -----------------------------------------------------------------------------

    async def save(
        self, owner: str, content: str, tags: Sequence[str] = (), session_id: int | None = None
    ) -> tuple[Memory, bool]:
        """Store a memory for `owner`; (the memory, True) — or (the one the person already has
        with the same text, False), its tags merged."""
        content = " ".join(content.split())[:MAX_MEMORY_CHARS]
        tags = clean_tags(tags)
        async with self._engine.begin() as connection:
            owners = await self._owners_of(connection, owner)
            # A person has tens of memories, not thousands: compared here, in any language.
            theirs = select(*_COLUMNS).where(_memories.c.owner.in_(owners))
            existing = next(
                (
                    memory
                    for memory in (
                        from_row(Memory, row) for row in await connection.execute(theirs)
                    )
                    if _same_text(memory.content, content)
                ),
                None,
            )
            if existing is not None:
                merged = clean_tags([*existing.tags, *tags])
                if merged != existing.tags:
                    await self._change(connection, existing.id, {"tags": merged})
                return await self._one(connection, existing.id), False
            now = utcnow()
            values: dict[str, Any] = {
                "owner": owner,
                "content": content,
                "tags": tags,
                "source_session_id": session_id,
                "created_at": now,
                "updated_at": now,
            }
            memory_id = inserted_id(await connection.execute(_memories.insert(), values))
            memory = await self._one(connection, memory_id)
        log.info("memory_saved", memory_id=memory.id, owner=owner, session_id=session_id)
        return memory, True

    async def update(
        self, memory_id: int, content: str | None = None, tags: Sequence[str] | None = None
    ) -> Memory | None:
        """Change a memory's text and/or tags (the dashboard, or an owner's own tools after
        `of` found it theirs); None if it no longer exists."""
        values: dict[str, Any] = {}
        if content is not None:
            values["content"] = " ".join(content.split())[:MAX_MEMORY_CHARS]
        if tags is not None:
            values["tags"] = clean_tags(tags)
        async with self._engine.begin() as connection:
            if values and not await self._change(connection, memory_id, values):
                return None
            row = (
                await connection.execute(select(*_COLUMNS).where(_memories.c.id == memory_id))
            ).first()
        return from_row(Memory, row) if row is not None else None

    async def delete(self, memory_id: int) -> Memory | None:
        """Forget a memory for good; the memory it was, or None if there was none."""
        async with self._engine.begin() as connection:
            row = (
                await connection.execute(select(*_COLUMNS).where(_memories.c.id == memory_id))
            ).first()
            if row is None:
                return None
            await connection.execute(delete(_memories).where(_memories.c.id == memory_id))
        log.info("memory_forgotten", memory_id=memory_id)
        return from_row(Memory, row)

    async def _change(
        self, connection: AsyncConnection, memory_id: int, values: dict[str, Any]
    ) -> bool:
        result = await connection.execute(
            update(_memories)
            .where(_memories.c.id == memory_id)
            .values(**values, updated_at=utcnow())
        )
        return bool(result.rowcount)

    async def _one(self, connection: AsyncConnection, memory_id: int) -> Memory:
        row = (await connection.execute(select(*_COLUMNS).where(_memories.c.id == memory_id))).one()
        return from_row(Memory, row)

    # ---- the dashboard's view ----------------------------------------------------------------

    async def everyone(self, limit: int) -> list[Memory]:
        """Every person's memories, the most recently saved or changed first (the dashboard)."""
        query = (
            select(*_COLUMNS)
            .order_by(_memories.c.updated_at.desc(), _memories.c.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as connection:
            return [from_row(Memory, row) for row in await connection.execute(query)]

    async def count_all(self) -> int:
        async with self._engine.connect() as connection:
            return int((await connection.execute(select(func.count(_memories.c.id)))).scalar() or 0)

    async def owners(self) -> list[Owner]:
        """Every owner with memories or a link, with the person it belongs to and the name it
        last wrote under."""
        counts = select(
            _memories.c.owner,
            func.count().label("memories"),
            func.max(_memories.c.updated_at).label("last"),
        ).group_by(_memories.c.owner)
        async with self._engine.connect() as connection:
            seen = {str(row[0]): (int(row[1]), row[2]) for row in await connection.execute(counts)}
            links = {
                str(row[0]): str(row[1])
                for row in await connection.execute(select(_links.c.owner, _links.c.person))
            }
            listed: list[Owner] = []
            for owner in sorted(set(seen) | set(links)):
                memories, last = seen.get(owner, (0, None))
                listed.append(
                    Owner(
                        owner,
                        links.get(owner, owner),
                        await self._name(connection, owner),
                        memories,
                        last,
                    )
                )
        return listed

    async def _name(self, connection: AsyncConnection, owner: str) -> str | None:
        channel, _, user_id = owner.partition(":")
        query = (
            select(_messages.c.author)
            .join(_sessions, _sessions.c.id == _messages.c.session_id)
            .where(
                _sessions.c.channel == channel,
                _messages.c.user_id == user_id,
                _messages.c.author.is_not(None),
            )
            .order_by(_messages.c.id.desc())
            .limit(1)
        )
        return (await connection.execute(query)).scalar()
