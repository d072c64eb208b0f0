"""Bruce's SQLite driver for SQLAlchemy's asyncio engine: short statements run where they are
awaited, anything that would make the event loop wait runs in a thread.

Why not aiosqlite alone: it sends every driver call (cursor, execute, fetch, close, commit) to
its thread and back, about 40 µs of CPU and one trip through the event loop's ready queue each.
Bruce's statements are indexed lookups and single-row writes that SQLite runs in 10-30 µs, so
the trips were most of a message's database cost; worse, with one connection (SQLite has one
writer) every trip stretched the time the connection was held, and under load the turns queued
behind it. Here a statement runs on the loop's thread, with two guards that keep the loop from
waiting:
  - a SELECT that has not finished after `INLINE_BUDGET_SECONDS` (a big dashboard query) is
    interrupted by SQLite's progress handler and run again, whole, in a thread;
  - a statement that finds the database locked by another connection (the CLI, APScheduler's
    job store) is run again in a thread with the usual busy timeout, instead of waiting here;
  - writes other than INSERT and UPDATE (DELETE cascades, schema changes) go to the thread at
    once, as does closing.
Checkpoints (copying the write-ahead log into the database file, with an fsync) would happen
inside some commit; automatic ones are off on this connection and a background thread runs them
(`Checkpointer`). Every call on the connection is awaited by SQLAlchemy before the next, so the
connection is never used by two threads at once.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")
INLINE_BUDGET_SECONDS = 0.002
PROGRESS_EVERY_INSTRUCTIONS = 2000
CHECKPOINT_EVERY_SECONDS = 1.0
CHECKPOINT_WAL_BYTES = 4 * 2**20  # SQLite's own default: 1000 pages of 4 KiB
# Statements that run inline besides reads: single-row writes and this connection's own
# transaction control. DELETE (cascades), schema changes and the rest go to the thread.
_INLINE_WRITES = ("INSERT", "UPDATE", "BEGIN", "SAVEPOINT", "RELEASE", "COMMIT", "ROLLBACK")


def _verb(sql: str) -> str:
    return sql.lstrip()[:9].upper()


class InlineCursor:
    """aiosqlite's cursor interface; rows are fetched with the statement and served from memory."""

    def __init__(self, connection: InlineConnection) -> None:
        self._connection = connection
        self._cursor = connection.raw.cursor()
        self._rows: list[Any] = []
        self.arraysize = 1

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> InlineCursor:
        def run() -> list[Any]:
            self._cursor.execute(sql, parameters or ())
            return self._cursor.fetchall() if self._cursor.description else []

        self._rows = await self._connection.run(run, sql)
        return self

    async def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]]) -> Any:
        rows = list(seq_of_parameters)
        await self._connection.run(lambda: self._cursor.executemany(sql, rows), sql)
        self._rows = []
        return self

    async def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        count = size or self.arraysize
        taken, self._rows = self._rows[:count], self._rows[count:]
        return taken

    async def fetchall(self) -> list[Any]:
        taken, self._rows = self._rows, []
        return taken

    async def close(self) -> None:
        self._rows = []
        self._cursor.close()


class _CursorContext:
    """What `connection.cursor()` returns: SQLAlchemy enters it to get the cursor."""

    def __init__(self, connection: InlineConnection) -> None:
        self._connection = connection

    async def __aenter__(self) -> InlineCursor:
        return InlineCursor(self._connection)

    async def __aexit__(self, *exc: object) -> None:
        return None


class InlineConnection:
    """aiosqlite's connection interface over one sqlite3 connection (see the module's doc)."""

    def __init__(self, raw: sqlite3.Connection, busy_timeout_ms: int) -> None:
        self.raw = raw
        self._busy_timeout_ms = busy_timeout_ms
        self._deadline = 0.0  # while > 0: interrupt a statement still running after it
        raw.set_progress_handler(self._progress, PROGRESS_EVERY_INSTRUCTIONS)

    # the attribute SQLAlchemy's adapter checks to know the connection is open
    @property
    def _connection(self) -> sqlite3.Connection | None:
        return self.raw

    @property
    def isolation_level(self) -> str | None:
        return self.raw.isolation_level

    def _progress(self) -> int:
        return 1 if self._deadline and time.perf_counter() > self._deadline else 0

    async def run(self, call: Callable[[], T], sql: str) -> T:
        verb = _verb(sql)
        reads = verb.startswith(("SELECT", "PRAGMA"))
        if not reads and not verb.startswith(_INLINE_WRITES):
            return await self._in_thread(call)
        if reads:
            self._deadline = time.perf_counter() + INLINE_BUDGET_SECONDS
        try:
            return call()
        except sqlite3.OperationalError as exc:
            self._deadline = 0.0  # the thread may take its time
            message = str(exc)
            if reads and message == "interrupted":
                log.debug("sqlite_slow_read_moved", sql=sql[:80])
            elif "locked" not in message and "busy" not in message:
                raise
            # Another connection holds the lock (or the read is big): wait for it elsewhere.
            return await self._in_thread(call)
        finally:
            self._deadline = 0.0

    async def _in_thread(self, call: Callable[[], T]) -> T:
        return await asyncio.to_thread(self._patiently, call)

    def _patiently(self, call: Callable[[], T]) -> T:
        self.raw.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
        try:
            return call()
        finally:
            self.raw.execute("PRAGMA busy_timeout=0")

    def cursor(self) -> _CursorContext:
        return _CursorContext(self)

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> InlineCursor:
        cursor = InlineCursor(self)
        return await cursor.execute(sql, parameters)

    async def commit(self) -> None:
        await self.run(self.raw.commit, "COMMIT")

    async def rollback(self) -> None:
        await self.run(self.raw.rollback, "ROLLBACK")

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self.raw.create_function(*args, **kwargs)

    async def close(self) -> None:
        await asyncio.to_thread(self.raw.close)

    def stop(self) -> None:
        """Terminate (SQLAlchemy's hard close)."""
        self.raw.close()


class Checkpointer:
    """Copies the write-ahead log into the database file from a thread of its own, so that no
    commit on the event loop's thread ever does it (it writes many pages and syncs the file)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._wal = path.with_name(path.name + "-wal")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sqlite-checkpoint", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while not self._stop.wait(CHECKPOINT_EVERY_SECONDS):
                try:
                    if self._wal.stat().st_size < CHECKPOINT_WAL_BYTES:
                        continue
                except FileNotFoundError:
                    continue
                if connection is None:
                    connection = sqlite3.connect(self._path, check_same_thread=False)
                try:
                    connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # busy or gone: the next round tries again
                    log.debug("sqlite_checkpoint_skipped", error=repr(exc))
        finally:
            if connection is not None:
                connection.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def connector(path: Path, busy_timeout_ms: int) -> Callable[[], Any]:
    """SQLAlchemy's `async_creator`: a coroutine function opening one inline connection."""

    async def connect() -> InlineConnection:
        raw = await asyncio.to_thread(lambda: sqlite3.connect(path, check_same_thread=False))
        raw.execute("PRAGMA busy_timeout=0")  # waiting for a lock happens in a thread
        raw.execute("PRAGMA wal_autocheckpoint=0")  # the Checkpointer's job
        return InlineConnection(raw, busy_timeout_ms)

    return connect
