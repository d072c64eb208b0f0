"""A process killed in the middle of a migration leaves the database as it was before it, so
the next start migrates it normally: `bruce db upgrade` as a real subprocess, SIGKILLed at seeded
random moments over and over on one SQLite file, then run to the end. Both ways a schema is
built are killed: a new file (created in one transaction, storage/fresh_schema.py) and a file
at the first revision (alembic runs the other migrations)."""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import sys
from pathlib import Path

import pytest
import yaml

from bruce_bot.storage.database import SCHEMA_HEAD, _alembic_config

KILLS = 10


def write_config(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    config = {
        "app": {"data_dir": str(data_dir)},
        "database": {"url": f"sqlite+aiosqlite:///{data_dir / 'bruce.db'}"},
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


async def upgrade(config: Path, kill_after: float | None) -> int | None:
    env = {k: v for k, v in os.environ.items() if k != "BRUCE_CONFIG"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bruce_bot",
        "db",
        "upgrade",
        "--config",
        str(config),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    if kill_after is None:
        _, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode(errors="replace")[-2000:]
        return process.returncode
    try:
        await asyncio.wait_for(process.wait(), kill_after)
    except TimeoutError:
        process.kill()
        await process.wait()
    return process.returncode


async def prepare(db: Path, revision: str | None) -> None:
    """The file the upgrades start from: none, or one migrated by alembic to `revision`."""
    if revision is None:
        return
    from alembic import command

    db.parent.mkdir(parents=True)
    config = _alembic_config(f"sqlite+aiosqlite:///{db}")
    await asyncio.to_thread(command.upgrade, config, revision)  # (env.py runs its own loop)


def revision(db: Path) -> str | None:
    if not db.exists():
        return None
    with sqlite3.connect(db) as connection:
        try:
            row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.OperationalError:
            return None
    return row[0] if row else None


@pytest.mark.parametrize("starting_from", [None, "0001"], ids=["new-file", "from-0001"])
async def test_a_migration_killed_at_any_moment_is_redone_cleanly_on_the_next_start(
    tmp_path: Path, starting_from: str | None
) -> None:
    seed = int(os.environ.get("BRUCE_CHAOS_SEED", random.randrange(1_000_000)))
    print(f"migration kill seed: {seed}")
    rng = random.Random(seed)
    # How long a whole upgrade takes here: the kills land in its second half, where the
    # migrations run (the first is mostly Python starting up).
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    await prepare(scratch / "data" / "bruce.db", starting_from)
    started = asyncio.get_running_loop().time()
    await upgrade(write_config(scratch), kill_after=None)
    whole = asyncio.get_running_loop().time() - started
    config = write_config(tmp_path)
    db = tmp_path / "data" / "bruce.db"
    await prepare(db, starting_from)
    seen: set[str | None] = set()
    for _ in range(KILLS):
        await upgrade(config, kill_after=rng.uniform(0.4 * whole, 1.0 * whole))
        # Killed or not, the file holds a whole revision (or none): never half of one.
        current = revision(db)
        seen.add(current)
        if starting_from is not None:
            assert current is not None, seed  # never back to nothing
        if db.exists() and current is None:
            with sqlite3.connect(db) as connection:
                tables = connection.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                ).fetchall()
            assert tables in ([], [("alembic_version",)]), (seed, tables)
    assert await upgrade(config, kill_after=None) == 0
    assert revision(db) == SCHEMA_HEAD
    with sqlite3.connect(db) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"sessions", "messages", "tool_executions", "web_sessions"} <= names
