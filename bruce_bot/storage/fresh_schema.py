"""A new SQLite database gets the newest schema in one transaction, without alembic.

On the first start there is nothing to migrate: running the migrations one after the
other through alembic costs about 0.3 s and 12 MB of a 2-core machine's start-up, for a result
the models already describe. So an empty SQLite file gets the models' tables and indexes, the
full-text table of memories the models cannot describe (from `fulltext.py`, as migration 0010
makes it), and `alembic_version` stamped at SCHEMA_HEAD, inside one `BEGIN IMMEDIATE`
transaction: a crash leaves an empty file (SQLite rolls the transaction back), and a second
process creating the same file at the same moment waits for the lock, then finds the tables and
leaves them alone. Every other case (an older revision, a file with tables but no version,
PostgreSQL) goes through alembic as before. tests/unit/test_migrations.py checks that both ways
give the same schema.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.schema import CreateIndex, CreateTable

from bruce_bot.storage.fulltext import SQLITE_DDL
from bruce_bot.storage.models import Base

# The same table alembic creates for itself (alembic/runtime/migration.py).
ALEMBIC_VERSION_DDL = (
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
    "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
)


def schema_statements() -> list[str]:
    """The DDL of the models' tables and indexes, in dependency order, then what the models do
    not describe (the memories' full-text table and its triggers, `fulltext.py`), for SQLite."""
    dialect = sqlite_dialect.dialect()
    statements: list[str] = []
    for table in Base.metadata.sorted_tables:
        statements.append(str(CreateTable(table).compile(dialect=dialect)))
        statements.extend(
            str(CreateIndex(index).compile(dialect=dialect))
            for index in sorted(table.indexes, key=lambda index: index.name or "")
        )
    statements.extend(SQLITE_DDL)
    return statements


def create_if_empty(path: Path, head: str, busy_timeout_s: float) -> bool:
    """Create the newest schema in `path` if it holds no tables; True if it did. A file that
    cannot be read as SQLite is left to alembic, whose error names the database."""
    try:
        connection = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            if connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                connection.execute("ROLLBACK")
                return False
            for statement in schema_statements():
                connection.execute(statement)
            connection.execute(ALEMBIC_VERSION_DDL)
            connection.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (head,))
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return True
    except sqlite3.Error:
        return False
    finally:
        connection.close()
