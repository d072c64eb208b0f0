"""SQL counters for the benchmark: statements, commits and time spent, per statement shape.

Off unless the environment variable BRUCE_SQL_STATS names a file. Then every statement the
engine runs is counted (by its SQL text, parameters apart) with the time the driver spent on it,
and every commit too, and the totals are written to that file as JSON twice a second and at
exit. bench/e2e.py reads it before and after a scenario to report statements and commits per
message. The hooks are SQLAlchemy engine events; they run in the driver's thread, so the times
are the database's own, not the event loop's.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

ENV = "BRUCE_SQL_STATS"
WRITE_EVERY_SECONDS = 0.5


class SqlStats:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.statements: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self.commits = 0
        self.checkouts = 0
        self.held_seconds = 0.0
        self.longest_hold = 0.0
        self.long_holds = 0  # connection held over 50 ms
        self._lock = threading.Lock()

    def attach(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)
        event.listen(engine, "commit", self._commit)
        event.listen(engine.pool, "checkout", self._checkout)
        event.listen(engine.pool, "checkin", self._checkin)

    def _checkout(self, dbapi_connection: Any, record: Any, proxy: Any) -> None:
        record.info["bruce_checked_out"] = time.perf_counter()

    def _checkin(self, dbapi_connection: Any, record: Any) -> None:
        started = record.info.pop("bruce_checked_out", None)
        if started is None:
            return
        held = time.perf_counter() - started
        with self._lock:
            self.checkouts += 1
            self.held_seconds += held
            self.longest_hold = max(self.longest_hold, held)
            if held > 0.05:
                self.long_holds += 1

    def _before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info["bruce_sql_started"] = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        spent = time.perf_counter() - conn.info.pop("bruce_sql_started", time.perf_counter())
        key = " ".join(statement.split())
        with self._lock:
            entry = self.statements[key]
            entry[0] += 1
            entry[1] += spent

    def _commit(self, conn: Any) -> None:
        with self._lock:
            self.commits += 1

    def write(self) -> None:
        with self._lock:
            data = {
                "commits": self.commits,
                "statements": sum(int(v[0]) for v in self.statements.values()),
                "seconds": round(sum(v[1] for v in self.statements.values()), 4),
                "checkouts": self.checkouts,
                "held_seconds": round(self.held_seconds, 4),
                "longest_hold_seconds": round(self.longest_hold, 4),
                "holds_over_50ms": self.long_holds,
                "by_statement": {
                    k: {"count": int(v[0]), "seconds": round(v[1], 4)}
                    for k, v in self.statements.items()
                },
            }
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data), encoding="utf-8")
        temporary.replace(self.path)

    def keep_writing(self) -> None:
        def loop() -> None:
            while True:
                time.sleep(WRITE_EVERY_SECONDS)
                self.write()

        threading.Thread(target=loop, name="sql-stats", daemon=True).start()
        atexit.register(self.write)


def attach_if_asked(engine: Engine) -> None:
    """Count this engine's statements when BRUCE_SQL_STATS names a file."""
    target = os.environ.get(ENV)
    if not target:
        return
    stats = SqlStats(Path(target))
    stats.attach(engine)
    stats.keep_writing()
