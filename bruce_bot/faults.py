"""Storage faults that pass, told apart from bugs; and the one place that says storage is down.

`transient_reason` reads a failed write's exception (SQLAlchemy's wrapper, the DBAPI error
under it, the OSError or asyncpg error under that) and names the fault when it is one that
goes away by itself: the disk is full, the database file is read-only or locked, the disk
failed an I/O, the PostgreSQL server is gone, restarting, out of space or refusing
connections. Anything else (a constraint, a wrong statement, a type error) is a bug and gets
None: retrying it would never end.

`StorageHealth` is told of each attempt to store an incoming message. It logs
`storage_unavailable` (with the reason) once when storing starts failing and
`storage_recovered` once it works again, not once per message, and `/healthz` reads it to
answer "degraded" meanwhile.
"""

from __future__ import annotations

import errno
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

# SQLite's primary result codes (the low byte of an extended code) that pass.
_SQLITE_FAULTS = {
    sqlite3.SQLITE_FULL: "the disk is full",
    sqlite3.SQLITE_READONLY: "the database is read-only",
    sqlite3.SQLITE_BUSY: "the database is locked",
    sqlite3.SQLITE_LOCKED: "the database is locked",
    sqlite3.SQLITE_IOERR: "the disk failed a read or write",
    sqlite3.SQLITE_CANTOPEN: "the database file cannot be opened",
}
# The same faults by message, for drivers that give no code.
_SQLITE_MESSAGES = {
    "database or disk is full": "the disk is full",
    "attempt to write a readonly database": "the database is read-only",
    "database is locked": "the database is locked",
    "disk i/o error": "the disk failed a read or write",
    "unable to open database file": "the database file cannot be opened",
}
_OS_FAULTS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EIO: "the disk failed a read or write",
}
_CONNECTION_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ETIMEDOUT,
    errno.EPIPE,
}
# PostgreSQL SQLSTATEs (by prefix) that pass: connection exceptions, insufficient resources
# (disk full, out of memory, too many connections), operator intervention (shut down,
# restarting), a read-only transaction (a standby, or default_transaction_read_only).
_POSTGRES_FAULTS = (
    ("08", "the database server cannot be reached"),
    ("53100", "the database server's disk is full"),
    ("53", "the database server is out of resources"),
    ("57P", "the database server is shutting down or starting"),
    ("25006", "the database is read-only"),
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what it wraps (SQLAlchemy's `orig`), its causes and contexts."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for inner in (getattr(current, "orig", None), current.__cause__, current.__context__):
            if isinstance(inner, BaseException):
                todo.append(inner)


def _reason_of(exc: BaseException) -> str | None:
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and (code & 0xFF) in _SQLITE_FAULTS:
            return _SQLITE_FAULTS[code & 0xFF]
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    if isinstance(state, str):
        for prefix, reason in _POSTGRES_FAULTS:
            if state.startswith(prefix):
                return reason
    if isinstance(exc, OSError):
        if exc.errno in _OS_FAULTS:
            return _OS_FAULTS[exc.errno]
        if isinstance(exc, ConnectionError) or exc.errno in _CONNECTION_ERRNOS:
            return "the database server cannot be reached"
    if isinstance(exc, TimeoutError):
        return "the database did not answer in time"
    if getattr(exc, "connection_invalidated", False):  # SQLAlchemy: the connection was lost
        return "the connection to the database was lost"
    name = type(exc).__name__
    if name == "TimeoutError" and type(exc).__module__.startswith("sqlalchemy"):
        return "no database connection was free in time"  # the pool's wait ran out
    if name in {"ConnectionDoesNotExistError", "InterfaceError"} and "connection" in str(exc):
        return "the connection to the database was lost"  # asyncpg: closed under us
    if isinstance(exc, sqlite3.Error) or name == "OperationalError":
        text = str(exc).lower()
        for words, reason in _SQLITE_MESSAGES.items():
            if words in text:
                return reason
    return None


def transient_reason(exc: BaseException) -> str | None:
    """What storage fault `exc` is, in words, when it is one that passes; None for a bug."""
    for inner in _chain(exc):
        reason = _reason_of(inner)
        if reason is not None:
            return reason
    return None


@dataclass(frozen=True, slots=True)
class Outage:
    reason: str
    since: float  # the clock's reading at the first failure
    failures: int


class StorageHealth:
    """Whether incoming messages can be stored right now, as the last attempts found."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._outage: Outage | None = None

    @property
    def outage(self) -> Outage | None:
        """The current outage (None: the last attempt to store worked)."""
        return self._outage

    def seconds_since(self, outage: Outage) -> float:
        return self._clock() - outage.since

    def failed(self, reason: str, error: BaseException | None = None) -> None:
        """An attempt to store failed with a fault that passes."""
        outage = self._outage
        if outage is None:
            self._outage = Outage(reason, self._clock(), 1)
            # Once per outage, with what the operator can act on; the messages themselves wait.
            log.error(
                "storage_unavailable",
                reason=reason,
                error=repr(error) if error is not None else None,
                hint="incoming messages are held back (not acknowledged) until they can be "
                "stored; free disk space or bring the database back",
            )
            return
        self._outage = Outage(outage.reason, outage.since, outage.failures + 1)
        if reason != outage.reason:
            log.info("storage_still_unavailable", reason=reason, first_reason=outage.reason)

    def stored(self) -> None:
        """An attempt to store worked: an outage, if there was one, is over."""
        outage, self._outage = self._outage, None
        if outage is not None:
            log.info(
                "storage_recovered",
                reason=outage.reason,
                seconds=round(self._clock() - outage.since, 3),
                failed_attempts=outage.failures,
            )
