"""One Bruce per data directory: an exclusive lock file held for the life of the process.

APScheduler must have exactly one scheduler per job store, and two daemons on one SQLite file
would fire every reminder twice. `bruce run` and `bruce chat` therefore take an exclusive
`flock` on `<data_dir>/bruce.lock` (released by the kernel even if the process is killed) and
refuse to start, saying which process holds it, when another instance is running.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class AlreadyRunningError(Exception):
    def __init__(self, path: Path, holder: str) -> None:
        self.path = path
        self.holder = holder
        who = f"process {holder}" if holder else "another process"
        super().__init__(
            f"Bruce is already running on this data directory ({who} holds {path}). Stop it "
            "first, or talk to it through its web chat; two instances would fire reminders twice."
        )


class InstanceLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "bruce.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        # A new data_dir is the daemon user's only: it holds the database, where keys and tokens
        # saved in the dashboard are kept (an existing folder keeps the mode its owner gave it).
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise AlreadyRunningError(self.path, holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
