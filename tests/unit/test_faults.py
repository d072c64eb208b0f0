"""Which storage failures pass (a full disk, a locked or read-only file, a server away) and which
are bugs, on errors real SQLite raises, bare and wrapped by SQLAlchemy; and StorageHealth says so
once per outage."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy
from structlog.testing import capture_logs

from bruce_bot.faults import StorageHealth, transient_reason


def _database(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, timeout=0, isolation_level=None)
    connection.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body BLOB)")
    return connection


def _raised(action: object) -> BaseException:
    with pytest.raises(Exception) as caught:
        action()  # type: ignore[operator]
    return caught.value


def test_a_full_database_is_a_full_disk(tmp_path: Path) -> None:
    connection = _database(tmp_path / "full.db")
    pages = connection.execute("PRAGMA page_count").fetchone()[0]
    connection.execute(f"PRAGMA max_page_count={pages}")  # SQLite's own SQLITE_FULL
    error = _raised(lambda: connection.execute("INSERT INTO t (body) VALUES (?)", (b"x" * 65536,)))
    assert isinstance(error, sqlite3.OperationalError)
    assert "database or disk is full" in str(error)
    assert transient_reason(error) == "the disk is full"


def test_read_only_and_locked_files_pass(tmp_path: Path) -> None:
    path = tmp_path / "bruce.db"
    _database(path).close()
    read_only = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    error = _raised(lambda: read_only.execute("INSERT INTO t (body) VALUES (x'00')"))
    assert transient_reason(error) == "the database is read-only"

    holder, other = _database(path), _database(path)
    holder.execute("BEGIN IMMEDIATE")
    error = _raised(lambda: other.execute("INSERT INTO t (body) VALUES (x'00')"))
    assert "database is locked" in str(error)
    assert transient_reason(error) == "the database is locked"
    holder.execute("ROLLBACK")


def test_sqlalchemy_wrapped_faults_are_read_through(tmp_path: Path) -> None:
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'wrapped.db'}")
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
    with engine.connect() as connection:
        pages = connection.exec_driver_sql("PRAGMA page_count").scalar()
        connection.exec_driver_sql(f"PRAGMA max_page_count={pages}")

        def insert() -> None:
            connection.exec_driver_sql("INSERT INTO t (body) VALUES (?)", (b"x" * 65536,))

        error = _raised(insert)
    assert isinstance(error, sqlalchemy.exc.OperationalError)
    assert transient_reason(error) == "the disk is full"
    engine.dispose()


def test_bugs_are_not_faults_that_pass(tmp_path: Path) -> None:
    connection = _database(tmp_path / "bugs.db")
    connection.execute("INSERT INTO t (id) VALUES (1)")
    duplicate = _raised(lambda: connection.execute("INSERT INTO t (id) VALUES (1)"))
    assert isinstance(duplicate, sqlite3.IntegrityError)
    missing = _raised(lambda: connection.execute("SELECT * FROM nowhere"))
    assert isinstance(missing, sqlite3.OperationalError)  # an OperationalError, and a bug
    for error in (duplicate, missing, TypeError("bad argument"), KeyError("x")):
        assert transient_reason(error) is None


def test_the_operating_system_and_a_server_away() -> None:
    assert transient_reason(OSError(errno.ENOSPC, "No space left on device")) == (
        "the disk is full"
    )
    assert transient_reason(OSError(errno.EROFS, "Read-only file system")) == (
        "the file system is read-only"
    )
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")
    assert transient_reason(refused) == "the database server cannot be reached"
    try:  # how SQLAlchemy's asyncpg adapter passes a server shutting down on: cause + sqlstate
        try:
            raise RuntimeError("terminating connection due to administrator command")
        except RuntimeError as cause:
            wrapper = sqlalchemy.exc.DBAPIError("SELECT 1", {}, cause)
            wrapper.orig.sqlstate = "57P01"  # type: ignore[union-attr]
            raise wrapper from cause
    except sqlalchemy.exc.DBAPIError as error:
        assert transient_reason(error) == "the database server is shutting down or starting"
    assert transient_reason(FileNotFoundError(errno.ENOENT, "gone")) is None


def test_health_says_so_once_per_outage() -> None:
    now = [100.0]
    health = StorageHealth(clock=lambda: now[0])
    with capture_logs() as logs:
        for _ in range(5):
            health.failed("the disk is full")
            now[0] += 1
        assert health.outage is not None and health.outage.failures == 5
        health.stored()
        health.stored()
    assert health.outage is None
    events = [entry["event"] for entry in logs]
    assert events == ["storage_unavailable", "storage_recovered"]
    assert logs[0]["reason"] == "the disk is full"
    assert logs[1]["seconds"] == 5.0 and logs[1]["failed_attempts"] == 5
