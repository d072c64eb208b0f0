"""Group commit on a real SQLite file: writes that arrive together share a commit, a bad one
fails alone, and a caller that goes away does not take its write with it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bruce_bot.storage.database import Database
from bruce_bot.storage.group_commit import GroupCommit


@pytest.fixture
async def database(tmp_path: Path):
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'g.db'}")
    async with db.engine.begin() as connection:
        await connection.execute(
            text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT UNIQUE)")
        )
    yield db
    await db.dispose()


def insert(body: str):
    async def work(connection: AsyncConnection) -> int:
        result = await connection.execute(
            text("INSERT INTO notes (body) VALUES (:body) RETURNING id"), {"body": body}
        )
        return int(result.scalar_one())

    return work


async def bodies(db: Database) -> list[str]:
    async with db.engine.connect() as connection:
        return list(
            (await connection.execute(text("SELECT body FROM notes ORDER BY id"))).scalars()
        )


async def test_writes_arriving_together_share_one_commit(database: Database) -> None:
    commits: list[int] = []
    event.listen(database.engine.sync_engine, "commit", lambda conn: commits.append(1))
    group = GroupCommit(database.engine)
    ids = await asyncio.gather(*(group.run(insert(f"note {i}")) for i in range(50)))
    assert sorted(ids) == list(range(1, 51))
    assert await bodies(database) == [f"note {i}" for i in range(50)]
    assert len(commits) == 1


async def test_a_failing_write_fails_alone(database: Database) -> None:
    group = GroupCommit(database.engine)
    await group.run(insert("taken"))
    outcomes = await asyncio.gather(
        group.run(insert("first")),
        group.run(insert("taken")),  # violates UNIQUE
        group.run(insert("last")),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], IntegrityError)
    assert await bodies(database) == ["taken", "first", "last"]


async def test_a_cancelled_caller_does_not_cancel_its_write(database: Database) -> None:
    group = GroupCommit(database.engine)
    caller = asyncio.create_task(group.run(insert("kept")))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await group.run(insert("after"))
    assert await bodies(database) == ["kept", "after"]
