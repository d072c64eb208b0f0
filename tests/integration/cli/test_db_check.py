"""`bruce db check` through the real CLI on a real SQLite file: a clean database passes; rows a
crash or a hand edit left unusable are each named with their id and what to do."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml

from bruce_bot.domain import SessionKey
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.stores import Stores


async def check(config: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "BRUCE_CONFIG"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bruce_bot",
        "db",
        "check",
        "--config",
        str(config),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_db_check_names_each_unusable_row_and_passes_a_clean_database(
    tmp_path: Path,
) -> None:
    db = tmp_path / "bruce.db"
    url = f"sqlite+aiosqlite:///{db}"
    config = tmp_path / "config.yml"
    config.write_text(
        yaml.safe_dump({"app": {"data_dir": str(tmp_path)}, "database": {"url": url}}),
        encoding="utf-8",
    )
    await upgrade_schema(url)
    database = Database(url)
    stores = Stores.open(database)
    session = await stores.sessions.get_or_create(SessionKey("console", "local"))
    at = datetime(2020, 1, 1, 9, 0, tzinfo=UTC)
    task = await stores.tasks.create(
        session_id=session.id,
        channel="console",
        chat_id="local",
        title="Old",
        mode="message",
        content="x",
        run_at=at,
        cron=None,
        timezone="UTC",
        next_run_at=at,
        status="done",
    )
    await database.dispose()

    code, out = await check(config)
    assert (code, "no problems found") == (0, out.strip().split(" in ")[0]), out

    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO messages (session_id, role, kind, content, status, created_at) "
            "VALUES (?, 'user', 'chat', 'hi', 'weird', ?)",
            (session.id, at.isoformat()),
        )
        connection.execute(
            "UPDATE proactive_tasks SET status = 'active', cron = '99 * * * *', run_at = NULL "
            "WHERE id = ?",
            (task.id,),
        )
        # A process that died holding the conversation while a message waited in it.
        connection.execute(
            "INSERT INTO messages (session_id, role, kind, content, status, created_at) "
            "VALUES (?, 'user', 'chat', 'still waiting', 'pending', ?)",
            (session.id, at.isoformat()),
        )
        connection.execute(
            "INSERT INTO session_leases (session_id, owner, expires_at) VALUES (?, ?, ?)",
            (session.id, "db-host:4242:dead", "2020-01-01 09:00:30.000000"),
        )
    code, out = await check(config)
    assert code == 1, out
    assert "messages #" in out and "unknown status 'weird'" in out
    assert f"proactive_tasks #{task.id}: schedule unreadable" in out
    assert f"session_leases #{session.id}: conversation with unanswered messages held by " in out
    assert "db-host:4242:dead, which stopped renewing its lease at 2020-01-01 09:00:30" in out
