"""Bruce's SQLite driver on real database files: what it stores and reads is what aiosqlite
would give, and the event loop keeps running while a big read or another process's lock is
waited for (a ticker task advances meanwhile)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from bruce_bot.storage.database import Database

# A read SQLite needs far longer than the inline budget for (a few hundred ms).
BIG_READ = text(
    "SELECT (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) "
    "SELECT count(*) FROM n)"
)


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'driver.db'}")
    async with db.engine.begin() as connection:
        await connection.execute(
            text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT UNIQUE NOT NULL)")
        )
    yield db
    await db.dispose()


@contextlib.asynccontextmanager
async def ticker() -> AsyncIterator[list[int]]:
    ticks: list[int] = []

    async def tick() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0.001)

    task = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        yield ticks
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_writes_and_reads_round_trip(database: Database) -> None:
    async with database.engine.begin() as connection:
        first = await connection.execute(text("INSERT INTO notes (body) VALUES ('a') RETURNING id"))
        assert first.scalar_one() == 1
        await connection.execute(text("INSERT INTO notes (body) VALUES ('b'), ('c')"))
    async with database.engine.connect() as connection:
        rows = (await connection.execute(text("SELECT id, body FROM notes ORDER BY id"))).all()
        assert [tuple(row) for row in rows] == [(1, "a"), (2, "b"), (3, "c")]
        assert (await connection.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
        assert (await connection.execute(text("PRAGMA foreign_keys"))).scalar() == 1


async def test_a_failed_transaction_leaves_nothing(database: Database) -> None:
    with pytest.raises(IntegrityError):
        async with database.engine.begin() as connection:
            await connection.execute(text("INSERT INTO notes (body) VALUES ('x')"))
            await connection.execute(text("INSERT INTO notes (body) VALUES ('x')"))
    async with database.engine.connect() as connection:
        assert (await connection.execute(text("SELECT count(*) FROM notes"))).scalar() == 0


async def test_a_big_read_runs_off_the_event_loop_and_still_answers(database: Database) -> None:
    async with ticker() as ticks, database.engine.connect() as connection:
        assert (await connection.execute(BIG_READ)).scalar() == 3_000_000
    assert len(ticks) > 5  # the loop ran while SQLite counted


async def test_a_big_read_inside_a_transaction_keeps_the_transaction(database: Database) -> None:
    async with database.engine.begin() as connection:
        await connection.execute(text("INSERT INTO notes (body) VALUES ('kept')"))
        assert (await connection.execute(BIG_READ)).scalar() == 3_000_000
        await connection.execute(text("INSERT INTO notes (body) VALUES ('also kept')"))
    async with database.engine.connect() as connection:
        bodies = (await connection.execute(text("SELECT body FROM notes ORDER BY id"))).scalars()
        assert list(bodies) == ["kept", "also kept"]


async def test_a_write_waits_for_another_process_lock_without_blocking_the_loop(
    database: Database, tmp_path: Path
) -> None:
    other = sqlite3.connect(tmp_path / "driver.db", check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    other.execute("INSERT INTO notes (body) VALUES ('theirs')")
    released = threading.Timer(0.3, other.commit)
    released.start()
    try:
        async with ticker() as ticks:
            async with database.engine.begin() as connection:
                await connection.execute(text("INSERT INTO notes (body) VALUES ('ours')"))
        assert len(ticks) > 5
    finally:
        released.join()
        other.close()
    async with database.engine.connect() as connection:
        bodies = (await connection.execute(text("SELECT body FROM notes ORDER BY id"))).scalars()
        assert list(bodies) == ["theirs", "ours"]


async def test_deletes_cascade(database: Database) -> None:
    async with database.engine.begin() as connection:
        await connection.execute(
            text(
                "CREATE TABLE tags (id INTEGER PRIMARY KEY, "
                "note_id INTEGER REFERENCES notes(id) ON DELETE CASCADE)"
            )
        )
        await connection.execute(text("INSERT INTO notes (body) VALUES ('n')"))
        await connection.execute(text("INSERT INTO tags (note_id) VALUES (1), (1)"))
    async with database.engine.begin() as connection:
        await connection.execute(text("DELETE FROM notes"))
    async with database.engine.connect() as connection:
        assert (await connection.execute(text("SELECT count(*) FROM tags"))).scalar() == 0
