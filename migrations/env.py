"""Alembic environment: runs Bruce's migrations on the configured async database URL.

The URL comes from `config.attributes["database_url"]` (set by `bruce db upgrade` and by start-up)
or from `-x url=...` on the alembic command line. APScheduler's `apscheduler_jobs` table is owned
by APScheduler and excluded from autogenerate. On PostgreSQL the migrations run in one transaction
that first takes an advisory lock, so processes starting together migrate one after the other (the
second finds the schema current); `render_as_batch` only changes how SQLite alters tables.
"""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import context
from sqlalchemy import event, pool, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import create_async_engine

from bruce_bot.storage.database import MIGRATION_LOCK_KEY
from bruce_bot.storage.fulltext import described_by_models
from bruce_bot.storage.models import Base

config = context.config
target_metadata = Base.metadata
EXCLUDED_TABLES = {"apscheduler_jobs"}


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    if type_ == "table" and name in EXCLUDED_TABLES:
        return False
    # The memories' full-text index (SQLite's FTS5 tables, PostgreSQL's expression index) is
    # made by migration 0010 from storage/fulltext.py, not described by the models.
    return described_by_models(obj, name, type_, reflected, compare_to)


def _database_url() -> str:
    url = config.attributes.get("database_url") or context.get_x_argument(as_dictionary=True).get(
        "url"
    )
    if not url:
        raise RuntimeError("no database URL: run `bruce db upgrade` or pass -x url=...")
    return str(url)


def _configure(connection: Connection | None = None, **kwargs: Any) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=include_object,
        render_as_batch=True,  # SQLite can only ALTER through table copies
        compare_type=True,
        **kwargs,
    )


def _run_sync(connection: Connection) -> None:
    # All migrations in one transaction on both databases (see _transactional_sqlite_ddl).
    _configure(connection, transactional_ddl=True)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Held until the commit; the current revision is read after it is granted.
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        context.run_migrations()


def _transactional_sqlite_ddl(engine: Engine) -> None:
    """Run SQLite's DDL inside the migration's transaction.

    Python's sqlite3 opens a transaction only before INSERT/UPDATE/DELETE, so CREATE and ALTER
    would each commit on their own: a process killed in the middle of a migration left tables
    without the revision that made them, and every later start failed ("table sessions already
    exists"). With the driver's own transaction handling off and an explicit BEGIN, a migration
    is all or nothing (SQLAlchemy's recipe for pysqlite).
    """

    @event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


async def _run_async(url: str) -> None:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    if engine.dialect.name == "sqlite":
        _transactional_sqlite_ddl(engine.sync_engine)
    async with engine.connect() as connection:
        await connection.run_sync(_run_sync)
    await engine.dispose()


if context.is_offline_mode():
    _configure(url=_database_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async(_database_url()))
