"""A process killed in the middle of a migration leaves the database as it was before it, so
the next start migrates it normally: `bruce db upgrade` as a real subprocess, SIGKILLed inside
its migration transaction over and over, each time on a file reset to the start, then run to the
end. Both ways a schema is built are killed: a new file (created in one transaction,
storage/fresh_schema.py) and a file at the first revision (alembic runs the other migrations).

The transaction is a sliver of the command's run (about 15 ms of 3 s for a new file, 100 ms
for the migrations from 0001: the rest is Python starting and exiting), so a kill at a random
moment of the run would almost never land in it. Each kill therefore waits until the
transaction has begun (SQLite's rollback journal appears next to the file) and comes a seeded
fraction of the transaction's measured length later; a kill counts as mid-migration when the
journal was still there after it (the transaction had not committed). At least `MIN_MID` of
the `KILLS` must be. The seed is printed; BRUCE_MIGRATION_SEED=<seed> replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest
import yaml

from bruce_bot.storage.database import SCHEMA_HEAD, _alembic_config

KILLS = 10
MIN_MID = 6  # kills that must land inside the migration's transaction
SEED_ENV = "BRUCE_MIGRATION_SEED"
POLL_SECONDS = 0.0005  # how often the journal is looked for (the transaction lasts 15-100 ms)


def write_config(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    config = {
        "app": {"data_dir": str(data_dir)},
        "database": {"url": f"sqlite+aiosqlite:///{data_dir / 'bruce.db'}"},
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def spawn_upgrade(config: Path) -> asyncio.Future[asyncio.subprocess.Process]:
    env = {k: v for k, v in os.environ.items() if k != "BRUCE_CONFIG"}
    return asyncio.ensure_future(
        asyncio.create_subprocess_exec(
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
    )


def journal(db: Path) -> Path:
    return db.with_name(db.name + "-journal")


async def upgrade(config: Path, db: Path) -> float:
    """Run an upgrade to the end (it must succeed); returns how long its migration transaction
    lasted (the journal's lifetime; 0 when none was seen)."""
    process = await spawn_upgrade(config)
    began = ended = None
    while process.returncode is None:
        there = journal(db).exists()
        now = time.monotonic()
        if there and began is None:
            began = now
        elif not there and began is not None and ended is None:
            ended = now
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), POLL_SECONDS)
    err = await process.stderr.read() if process.stderr else b""
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return (ended or time.monotonic()) - began if began is not None else 0.0


async def upgrade_killed_in_transaction(
    config: Path, db: Path, delay: float
) -> tuple[str, float | None]:
    """Start an upgrade, SIGKILL it `delay` seconds after its migration transaction began. How
    it ended: "mid" (the journal outlived the kill: the transaction never committed), "after"
    (it had committed: its length is returned too), "never" (it exited with no transaction)."""
    process = await spawn_upgrade(config)
    while process.returncode is None and not journal(db).exists():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), POLL_SECONDS)
    began = time.monotonic()
    if process.returncode is not None:
        return "never", None
    committed: float | None = None
    while (waited := time.monotonic() - began) < delay and process.returncode is None:
        if not journal(db).exists():
            committed = waited
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), min(POLL_SECONDS, delay - waited))
    if process.returncode is None:
        process.kill()
        await process.wait()
    if committed is None and journal(db).exists():
        return "mid", None
    return "after", committed if committed is not None else time.monotonic() - began


async def prepare(db: Path, revision: str | None) -> None:
    """The file the upgrades start from: none, or one migrated by alembic to `revision`."""
    if revision is None:
        return
    from alembic import command

    db.parent.mkdir(parents=True, exist_ok=True)
    config = _alembic_config(f"sqlite+aiosqlite:///{db}")
    await asyncio.to_thread(command.upgrade, config, revision)  # (env.py runs its own loop)


def reset(start: Path, db: Path) -> None:
    """`db` as the start: a copy of `start`, or no file at all when there is none."""
    db.parent.mkdir(parents=True, exist_ok=True)
    for leftover in (db, journal(db), db.with_name(db.name + "-wal")):
        leftover.unlink(missing_ok=True)
    if start.exists():
        shutil.copyfile(start, db)


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
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1_000_000))
    print(f"{SEED_ENV}={seed}")
    rng = random.Random(f"{seed}:{starting_from}")
    # The start, kept aside: every kill begins from a copy of it.
    start = tmp_path / "start.db"
    await prepare(start, starting_from)
    # How long the migration transaction lasts here, on a scratch copy.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    reset(start, scratch / "data" / "bruce.db")
    length = await upgrade(write_config(scratch), scratch / "data" / "bruce.db")
    assert length > 0, "the scratch upgrade showed no migration transaction (no journal seen)"
    config = write_config(tmp_path)
    db = tmp_path / "data" / "bruce.db"
    outcomes: list[str] = []
    seen: set[str | None] = set()
    for _ in range(KILLS):
        reset(start, db)
        # A seeded point of the transaction; it is shorter in some runs than in the scratch
        # one (a warm page cache): a transaction seen to commit sooner shortens the estimate.
        outcome, committed = await upgrade_killed_in_transaction(
            config, db, rng.uniform(0.05, 0.7) * length
        )
        outcomes.append(outcome)
        length = min(length, committed or length)
        # Killed or not, the file holds a whole revision (or none): never half of one. Reading
        # it rolls back what the kill left in the journal.
        current = revision(db)
        seen.add(current)
        if current is None and db.exists():
            with sqlite3.connect(db) as connection:
                tables = connection.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                ).fetchall()
            assert tables in ([], [("alembic_version",)]), (seed, tables)
    story = f"{SEED_ENV}={seed}: transaction {length * 1000:.0f} ms, kills ended {outcomes}"
    print(story)
    assert outcomes.count("mid") >= MIN_MID, f"too few kills landed mid-migration; {story}"
    assert seen <= {starting_from, SCHEMA_HEAD}, f"a kill left revision(s) {seen}; {story}"
    # The last file a kill left is migrated by the next start.
    await upgrade(config, db)
    assert revision(db) == SCHEMA_HEAD
    with sqlite3.connect(db) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"sessions", "messages", "tool_executions", "web_sessions"} <= names
