"""The resource limits of one sandboxed run, applied with setrlimit before bubblewrap starts.

The limits are inherited by bubblewrap and everything the code starts: address space (memory),
CPU seconds, processes (RLIMIT_NPROC counts the processes of the user the code runs as: all of
`nobody`'s when the daemon is root, else the daemon user's, its own threads included), file size
and no core dumps. Wall
time and the workspace's size are watched by the runner.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

MB = 1024 * 1024
NOBODY = 65534  # the uid and gid a root daemon's sandboxes run as, outside and inside


@dataclass(frozen=True, slots=True)
class Limits:
    timeout_seconds: float = 30.0
    memory_mb: int = 1024
    max_processes: int = 128
    max_output_chars: int = 20_000
    workspace_mb: int = 100

    @property
    def cpu_seconds(self) -> int:
        # CPU time of each process; the wall time bounds the whole run.
        return max(1, int(self.timeout_seconds) + 1)

    @property
    def file_bytes(self) -> int:
        return self.workspace_mb * MB

    def rlimits(self) -> list[tuple[int, int]]:
        """(resource, limit) pairs, soft and hard the same."""
        return [
            (resource.RLIMIT_AS, self.memory_mb * MB),
            (resource.RLIMIT_CPU, self.cpu_seconds),
            (resource.RLIMIT_NPROC, self.max_processes),
            (resource.RLIMIT_FSIZE, self.file_bytes),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, 256),
        ]

    def apply(self) -> None:
        """Set the limits in this process (the child, between fork and exec)."""
        for which, value in self.rlimits():
            resource.setrlimit(which, (value, value))


def sandbox_owner() -> tuple[int, int] | None:
    """Who the workspace is given to: `nobody`, whom the code runs as, when the daemon runs as
    root (bwrap.py: root's processes are exempt from RLIMIT_NPROC, so the code must not keep
    root's uid); None when the daemon is an ordinary user (the code keeps its uid outside)."""
    return (NOBODY, NOBODY) if os.geteuid() == 0 else None
