"""Memories on a real PostgreSQL server: the tsvector search (GIN index of migration 0010) finds
a person's memories by their words in any language, reads the person's own search syntax, falls
back to any word, keeps each person to their own, and follows edits. The server is the one of
`tests/integration/postgres/server.py`; Bruce reaches it through asyncpg as in production."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.fulltext import POSTGRES_DOCUMENT
from bruce_bot.storage.memories import MemoryStore

ALICE, BOB, ALICE_ON_DISCORD = "telegram:1", "telegram:2", "discord:77"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[MemoryStore]:
    await upgrade_schema(postgres_url)
    database = Database(postgres_url)
    try:
        yield MemoryStore(database.engine)
    finally:
        await database.dispose()


def contents(memories: list[object]) -> list[str]:
    return [memory.content for memory in memories]  # type: ignore[attr-defined]


async def test_search_finds_a_persons_memories_by_their_words_in_any_language(
    store: MemoryStore,
) -> None:
    await store.save(ALICE, "Is vegetarian", ["diet"])
    await store.save(ALICE, "Sou alérgica a amendoim", ["saúde"])
    await store.save(ALICE, "Lives in Lisbon with a cat called Miso")
    await store.save(BOB, "Is vegetarian too, and loves Lisbon")

    assert contents(await store.search(ALICE, "vegetarian")) == ["Is vegetarian"]
    assert contents(await store.search(ALICE, "amendoim")) == ["Sou alérgica a amendoim"]
    assert contents(await store.search(ALICE, "saúde")) == ["Sou alérgica a amendoim"]  # tags
    # The person's own syntax (websearch_to_tsquery): a phrase, a word left out.
    assert contents(await store.search(ALICE, '"cat called" -dog')) == [
        "Lives in Lisbon with a cat called Miso"
    ]
    # No memory has all the words: any of them is enough, the best match first.
    found = await store.search(ALICE, "what's my diet and where is my cat?")
    assert set(contents(found)) == {"Is vegetarian", "Lives in Lisbon with a cat called Miso"}
    # Punctuation that is no syntax at all finds nothing, and raises nothing.
    assert await store.search(ALICE, "'&|!():*") == []
    assert BOB not in {memory.owner for memory in await store.search(ALICE, "Lisbon vegetarian")}


async def test_what_a_turn_shows_is_the_matches_then_the_newest_others(
    store: MemoryStore,
) -> None:
    for fact in ("Has a daughter, Ana", "Works as a nurse", "Is vegetarian", "Plays the cello"):
        await store.save(ALICE, fact)
    shown = await store.relevant(ALICE, "is there a vegetarian place near the hospital?", 3, 2)
    assert contents(shown) == ["Is vegetarian", "Plays the cello", "Works as a nurse"]
    assert await store.relevant(BOB, "vegetarian", 3, 2) == []


async def test_edits_and_links_follow_on_postgres(store: MemoryStore, postgres_url: str) -> None:
    memory, _ = await store.save(ALICE, "Lives in Lisbon")
    await store.update(memory.id, "Lives in Porto since May")
    assert await store.search(ALICE, "Lisbon") == []
    assert contents(await store.search(ALICE, "porto")) == ["Lives in Porto since May"]
    assert await store.search(ALICE_ON_DISCORD, "porto") == []
    await store.link(ALICE_ON_DISCORD, ALICE)
    assert contents(await store.search(ALICE_ON_DISCORD, "porto")) == ["Lives in Porto since May"]
    assert await store.of(BOB, memory.id) is None

    # The query's expression is the index's: the planner can use it.
    conninfo = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(conninfo) as connection:
        connection.execute("SET enable_seqscan = off")
        plan = connection.execute(
            f"EXPLAIN SELECT id FROM memories WHERE {POSTGRES_DOCUMENT} @@ "
            "plainto_tsquery('simple', 'porto')"
        ).fetchall()
    assert "ix_memories_search" in " ".join(row[0] for row in plan)
