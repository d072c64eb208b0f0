"""PDFs parsed in a child process with memory, CPU and wall-time limits.

A PDF is a program of sorts: streams compressed a thousandfold, form objects that draw other
form objects ten times over, cross-references that loop. pypdf has limits of its own, but a
file of two kilobytes can still make its text extraction need gigabytes or run for hours, and in
the daemon that would stall every chat or get the whole process killed. So the parse runs in
`python -m bruce_bot.media.pdf_sandbox`, which caps its own address space (RLIMIT_AS) and CPU
time (RLIMIT_CPU) before it imports pypdf, lowers its priority, reads the file from stdin and
writes one JSON object to stdout: `{"text": ...}` (already cut to `documents.max_chars`),
`{"problem": ...}` or `{"limit": "memory"}`. The parent waits in a worker thread and kills it
after the wall-time limit; a child ended by SIGXCPU or SIGKILL ran out of time.

The child gets no secrets: a minimal environment, no inherited file descriptors, and Python's
`-P` (the working directory is not put on the import path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:  # the child process imports as little as it can before its limits are set
    from bruce_bot.config import DocumentsConfig

log = structlog.get_logger(__name__)

MODULE = "bruce_bot.media.pdf_sandbox"
_ENVIRONMENT = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
_MB = 1024 * 1024


class PdfLimitExceeded(Exception):
    """The PDF needs more memory or time than its limits; the message says which, for the user."""


@dataclass(frozen=True, slots=True)
class PdfLimits:
    memory_mb: int = 512
    cpu_seconds: int = 30

    @classmethod
    def from_config(cls, config: DocumentsConfig) -> PdfLimits:
        return cls(config.pdf_max_memory_mb, config.pdf_max_seconds)

    @property
    def wall_seconds(self) -> float:
        # Real time is allowed more than CPU time: the machine may be busy with other work, and
        # starting Python and importing pypdf takes a moment. A child that waits (it never
        # should) is killed all the same.
        return self.cpu_seconds * 2 + 5

    def too_slow(self) -> str:
        return (
            f"it needs more than {self.cpu_seconds} seconds to open (the limit is "
            "documents.pdf_max_seconds in config.yml)"
        )

    def too_large(self) -> str:
        return (
            f"it needs more than {self.memory_mb} MB of memory to open (the limit is "
            "documents.pdf_max_memory_mb in config.yml)"
        )


def read_pdf(data: bytes, max_chars: int, max_pages: int, limits: PdfLimits) -> str:
    """The PDF's text, cut like any document's (documents.read_document), read in a child
    process. Raises `documents.DocumentProblem` (damaged, password, ...) or `PdfLimitExceeded`.
    Blocks: callers run it in a thread."""
    from bruce_bot.media.documents import DocumentProblem

    command = [
        sys.executable,
        "-P",
        "-m",
        MODULE,
        str(max_chars),
        str(max_pages),
        str(limits.memory_mb),
        str(limits.cpu_seconds),
    ]
    environment = {key: os.environ[key] for key in _ENVIRONMENT if key in os.environ}
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            input=data,
            capture_output=True,
            timeout=limits.wall_seconds,
            env=environment,
            close_fds=True,
            check=False,
        )
    except subprocess.TimeoutExpired:  # subprocess.run has killed it (SIGKILL) and reaped it
        log.warning("pdf_read_stopped", reason="wall_time", seconds=limits.wall_seconds)
        raise PdfLimitExceeded(limits.too_slow()) from None
    elapsed = round(time.monotonic() - started, 2)
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        log.warning("pdf_read_stopped", reason="cpu_time", seconds=elapsed, bytes=len(data))
        raise PdfLimitExceeded(limits.too_slow())
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = None
    if done.returncode != 0 or not isinstance(answer, dict):
        log.warning(
            "pdf_reader_failed",
            returncode=done.returncode,
            stderr=done.stderr[-2000:].decode("utf-8", "replace"),
            seconds=elapsed,
        )
        if done.returncode in (-signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS):
            # What a failed allocation looks like in C code under RLIMIT_AS.
            raise PdfLimitExceeded(limits.too_large())
        raise DocumentProblem(
            f"the PDF reader stopped unexpectedly (exit status {done.returncode})"
        )
    if answer.get("limit") == "memory":
        log.warning("pdf_read_stopped", reason="memory", memory_mb=limits.memory_mb)
        raise PdfLimitExceeded(limits.too_large())
    if "problem" in answer:
        raise DocumentProblem(str(answer["problem"]))
    log.info("pdf_read", bytes=len(data), seconds=elapsed)
    return str(answer.get("text", ""))


# ---- the child --------------------------------------------------------------------------------


def _limit_this_process(memory_mb: int, cpu_seconds: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * _MB, memory_mb * _MB))
    # SIGXCPU at the soft limit, SIGKILL a second later should it be caught or ignored.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of a stranger's document
    os.nice(10)  # the daemon's own work first


def _child(arguments: list[str]) -> int:
    max_chars, max_pages, memory_mb, cpu_seconds = (int(value) for value in arguments)
    _limit_this_process(memory_mb, cpu_seconds)
    data = sys.stdin.buffer.read()
    from bruce_bot.media.documents import DocumentProblem, read_here

    answer: dict[str, str]
    try:
        answer = {"text": read_here(data, "pdf", max_chars, max_pages)}
    except DocumentProblem as exc:
        answer = {"problem": str(exc)}
    except MemoryError:  # the big objects are gone once it is raised: there is room to answer
        answer = {"limit": "memory"}
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
