"""The database handle: an async engine, its session factory, and schema upgrades.

SQLite (the default) gets WAL mode, a busy timeout and foreign keys on every connection so that
concurrent sessions read while one writes. PostgreSQL (asyncpg) gets a pool of connections checked
before use, so a restarted server costs a reconnect, not failed messages. Schema changes only ever
happen through alembic (`upgrade_schema`), also at start-up, so a user's database follows the code
across releases; a database already at the newest revision is recognised without loading alembic,
and a new SQLite file gets the newest schema in one transaction without it (`fresh_schema.py`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import event, pool, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bruce_bot.storage.sql_stats import attach_if_asked
from bruce_bot.storage.sqlite_driver import Checkpointer, InlineConnection, connector

log = structlog.get_logger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"
# The newest migration's revision id. Kept here so that start-up can see that a database is
# current without importing alembic (a test checks it matches migrations/).
SCHEMA_HEAD = "0017"
SQLITE_BUSY_TIMEOUT_MS = 10_000
# PostgreSQL advisory lock held (for one transaction) by whoever migrates: processes starting
# together on a fresh database migrate one after the other, not over each other.
MIGRATION_LOCK_KEY = int.from_bytes(b"Bruce-DB", "big")


def _sqlite_file(url: str) -> Path | None:
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return Path(database)


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    if not isinstance(dbapi_connection.driver_connection, InlineConnection):
        # (Bruce's driver waits for locks in a thread, never on the event loop: see there.)
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def sync_url(url: str) -> str:
    """The same database for synchronous users (alembic offline, APScheduler's job store)."""
    parsed = make_url(url)
    driver = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg"}[parsed.get_backend_name()]
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


class Database:
    """Owns the async engine that every store shares."""

    def __init__(self, url: str) -> None:
        self.url = url
        sqlite_file = _sqlite_file(url)
        if sqlite_file is not None:
            sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        self.is_sqlite = make_url(url).get_backend_name() == "sqlite"
        self._checkpointer: Checkpointer | None = None
        if self.is_sqlite:
            # SQLite has one writer at a time; several connections only fight over the lock (and
            # its busy handler sleeps). One connection serialises statements without contention.
            # Every store either commits or only reads, so the pool's rollback-on-return (one more
            # statement per query) is skipped. A database file gets Bruce's driver, which runs
            # short statements without a round trip to a thread (storage/sqlite_driver.py).
            options: dict[str, Any] = {}
            if sqlite_file is not None:
                options["async_creator"] = connector(sqlite_file, SQLITE_BUSY_TIMEOUT_MS)
                self._checkpointer = Checkpointer(sqlite_file)
                self._checkpointer.start()
            self.engine: AsyncEngine = create_async_engine(
                url, pool_size=1, max_overflow=0, pool_reset_on_return=None, **options
            )
        else:
            # Up to 10 connections kept (20 at peak); each checked with a ping before use.
            self.engine = create_async_engine(
                url, pool_size=10, max_overflow=10, pool_pre_ping=True
            )
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _on_sqlite_connect)
        attach_if_asked(self.engine.sync_engine)

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.stop)


def _alembic_config(url: str) -> Any:
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["database_url"] = url
    return config


def _sqlite_revision(path: Path) -> str | None:
    import sqlite3

    if not path.exists():
        return None
    connection = sqlite3.connect(path)
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return row[0] if row else None


async def _postgres_revision(url: str) -> str | None:
    """The revision of a PostgreSQL database's schema (None: never migrated), on one connection."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            if (await connection.execute(text("SELECT to_regclass('alembic_version')"))).scalar():
                result = await connection.execute(text("SELECT version_num FROM alembic_version"))
                return result.scalar()
            return None
    finally:
        await engine.dispose()


def _upgrade_blocking(url: str) -> bool:
    sqlite_file = _sqlite_file(url)
    if sqlite_file is not None:
        revision = _sqlite_revision(sqlite_file)
        if revision == SCHEMA_HEAD:
            return False  # fast path: current schema, no need to load alembic at all
        if revision is None:
            from bruce_bot.storage.fresh_schema import create_if_empty

            if create_if_empty(sqlite_file, SCHEMA_HEAD, SQLITE_BUSY_TIMEOUT_MS / 1000):
                return True  # a new database: the newest schema in one step (see there)
    from alembic import command

    command.upgrade(_alembic_config(url), "head")
    return True


async def upgrade_schema(url: str) -> None:
    """Apply pending alembic migrations (idempotent); alembic runs in a thread, off the event
    loop."""
    sqlite_file = _sqlite_file(url)
    if sqlite_file is not None:
        sqlite_file.parent.mkdir(parents=True, exist_ok=True)
    is_postgres = make_url(url).get_backend_name() == "postgresql"
    if is_postgres and await _postgres_revision(url) == SCHEMA_HEAD:
        return  # fast path: current schema, no need to load alembic at all
    if await asyncio.to_thread(_upgrade_blocking, url):
        log.info("database_upgraded", head=SCHEMA_HEAD)
