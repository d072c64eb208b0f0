"""One run of code: bubblewrap started under the limits, its output read as it comes (kept up
to the cap, the rest only counted, never held in memory), the wall time and the workspace's size
watched, and the whole sandbox killed when either is exceeded. A program that exits non-zero or
runs out of time is an ordinary outcome; a sandbox that did not start says why (`failure`).

The sandbox's first output is a marker of the run's own (written by a one-line launcher before
it execs the code): stderr that does not begin with it came from bubblewrap failing to set the
sandbox up, and is the reason reported. Background processes cannot outlive a run: the code is
PID 2 of a new PID namespace, and when it (or bubblewrap, killed) ends, the kernel ends every
process in it.

`sandboxed=False` (`tools.run_code.sandbox: none`) runs the same command without bubblewrap, in
the workspace with the same limits and an empty environment: no isolation at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from bruce_bot.sandbox import bwrap, network, workspace
from bruce_bot.sandbox.limits import Limits, sandbox_owner

log = structlog.get_logger(__name__)

CHUNK = 65_536
WATCH_EVERY_SECONDS = 0.25
# The two readers of a run's output (stdout, stderr), gathered.
Readers = asyncio.Future[tuple[None, None]]
# $0: the marker; $1: "wait": stdin is a pipe to wait on for the network (bubblewrap's own
# --block-fd waits before it sets the sandbox's loopback up, which slirp4netns would race).
LAUNCHER = (
    'cd /workspace || exit 125; printf "%s\\n" "$0" >&2; '
    'if [ "$1" = wait ]; then read -r _ || exit 125; fi; shift; exec "$@" </dev/null'
)


@dataclass(frozen=True, slots=True)
class RunRequest:
    language: str  # "python" | "shell"
    code: str
    root: Path  # the session's workspace on the host
    limits: Limits
    network: bool = False
    python_env: Path | None = None
    sandboxed: bool = True


@dataclass(slots=True)
class Captured:
    """One stream: the bytes kept (up to the cap) and how many came in all."""

    cap: int
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0
    first_line: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if b"\n" in chunk:
            self.first_line.set()
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]

    @property
    def cut(self) -> int:
        return self.total - len(self.kept)

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class RunOutcome:
    exit_code: int | None  # None: killed (timeout, workspace) or never started
    stdout: str
    stderr: str
    stdout_cut: int  # bytes not kept
    stderr_cut: int
    duration: float
    killed_for: str = ""  # "" | "timeout" | "workspace"
    failure: str = ""  # the sandbox did not start: why (bubblewrap's own words)
    created: tuple[str, ...] = ()  # paths created or changed in the workspace
    removed: int = 0  # files of this run deleted because the workspace went over its size
    output_bytes: int = 0

    @property
    def started(self) -> bool:
        return not self.failure


def _memfd(name: str, content: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _Descriptors:
    """The descriptors handed to bubblewrap, closed in the parent once it started."""

    def __init__(self) -> None:
        self.fds: list[int] = []

    def add(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def _preexec(limits: Limits) -> Callable[[], None]:
    def apply() -> None:
        limits.apply()

    return apply


async def _read(stream: asyncio.StreamReader | None, into: Captured) -> None:
    if stream is None:
        return
    while chunk := await stream.read(CHUNK):
        into.add(chunk)


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


async def _watch_size(root: Path, limit: int, over: asyncio.Event) -> None:
    while True:
        await asyncio.sleep(WATCH_EVERY_SECONDS)
        if await asyncio.to_thread(workspace.disk_bytes, root) > limit:
            over.set()
            return


async def run(request: RunRequest) -> RunOutcome:
    """Run `request.code`; never raises for what the code does (see the module)."""
    limits = request.limits
    owner = sandbox_owner()
    await asyncio.to_thread(workspace.prepare, request.root, owner)
    before = await asyncio.to_thread(workspace.snapshot, request.root)
    marker = f"bruce-sandbox-{secrets.token_hex(8)}"
    descriptors = _Descriptors()
    try:
        code_fd = descriptors.add(_memfd("code", request.code.encode("utf-8", "replace")))
        os.set_inheritable(code_fd, True)
        net: network.Pipes | None = None
        if request.network and request.sandboxed:
            if not network.available():
                return _not_started(
                    "the network needs slirp4netns, which is not installed; install it "
                    "(Debian/Ubuntu: apt install slirp4netns) or run without network"
                )
            net = network.pipes(descriptors.add)
        if request.sandboxed:
            argv = _sandbox_argv(request, descriptors, code_fd, marker, net)
        else:
            argv = _unsandboxed_argv(request, code_fd, marker)
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL if net is None else net.child_block,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=_outer_env(request),
                cwd=str(request.root) if not request.sandboxed else "/",
                pass_fds=tuple(descriptors.fds),
                start_new_session=True,
                preexec_fn=_preexec(limits),
                # Without the sandbox, a root daemon's code runs as nobody all the same.
                user=owner[0] if owner and not request.sandboxed else None,
                group=owner[1] if owner and not request.sandboxed else None,
                extra_groups=[] if owner and not request.sandboxed else None,
            )
        except OSError as exc:
            log.warning("sandbox_not_started", error=str(exc), argv0=argv[0])
            return _not_started(f"{argv[0]}: {exc.strerror or exc}")
        descriptors.close()
        slirps: list[network.Slirp] = []
        try:
            return await _supervise(request, process, started, before, marker, (net, slirps))
        finally:
            for slirp in slirps:
                await slirp.stop()
    finally:
        descriptors.close()


def _not_started(reason: str) -> RunOutcome:
    return RunOutcome(None, "", "", 0, 0, 0.0, failure=reason)


def _outer_env(request: RunRequest) -> dict[str, str]:
    """bubblewrap's own environment (its /proc/1/environ in the sandbox): nothing of the
    daemon's. Without the sandbox, the code's."""
    if request.sandboxed:
        return {"PATH": bwrap.PATH}
    env = bwrap.environment(request.python_env)
    env["HOME"] = str(request.root)
    return env


def _sandbox_argv(
    request: RunRequest,
    descriptors: _Descriptors,
    code_fd: int,
    marker: str,
    net: network.Pipes | None,
) -> list[str]:
    workspace_fd = descriptors.add(workspace.open_dir(request.root))
    os.set_inheritable(workspace_fd, True)
    etc: dict[str, int] = {}
    for destination, content in bwrap.etc_files(request.network, network.DNS).items():
        fd = descriptors.add(_memfd(destination.rsplit("/", 1)[-1], content.encode()))
        os.set_inheritable(fd, True)
        etc[destination] = fd
    python_env = None
    if request.python_env is not None:
        env_fd = os.open(request.python_env, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        descriptors.add(env_fd)
        os.set_inheritable(env_fd, True)
        python_env = (env_fd, request.python_env)
    mounts = bwrap.Mounts(
        workspace_fd,
        etc,
        code=(code_fd, bwrap.code_path(request.language)),
        python_env=python_env,
    )
    inner = bwrap.interpreter(request.language, request.python_env)
    wait = "-" if net is None else "wait"
    return bwrap.bwrap_argv(
        ["/bin/sh", "-c", LAUNCHER, marker, wait, *inner],
        mounts,
        tmp_bytes=request.limits.file_bytes,
        info_fd=None if net is None else net.child_info,
        privileged=os.geteuid() == 0,
        # Found on the daemon's PATH, as the probe found it (the run's own PATH is the sandbox's).
        bwrap=shutil.which(bwrap.BWRAP) or bwrap.BWRAP,
    )


def _unsandboxed_argv(request: RunRequest, code_fd: int, marker: str) -> list[str]:
    inner = bwrap.interpreter(request.language, request.python_env)
    inner[-1] = f"/dev/fd/{code_fd}"
    return ["/bin/sh", "-c", LAUNCHER, marker, "-", *inner]


async def _supervise(
    request: RunRequest,
    process: asyncio.subprocess.Process,
    started: float,
    before: workspace.Snapshot,
    marker: str,
    networking: tuple[network.Pipes | None, list[network.Slirp]],
) -> RunOutcome:
    """Watch the started sandbox to its end and say what the run did."""
    limits = request.limits
    # The marker line is part of stderr: room for it besides the cap.
    out, err = Captured(limits.max_output_chars), Captured(limits.max_output_chars + 256)
    readers = asyncio.gather(_read(process.stdout, out), _read(process.stderr, err))
    net, slirps = networking
    if net is not None:
        failure = await _start_network(net, slirps, process, readers, err)
        if failure is not None:
            return failure
    killed_for = await _wait_within_limits(request, process, readers)
    duration = time.monotonic() - started
    if await asyncio.to_thread(workspace.disk_bytes, request.root) > limits.file_bytes:
        killed_for = killed_for or "workspace"
    stderr = err.text()
    first, newline, rest = stderr.partition("\n")
    if first != marker:
        reason = stderr.strip() or f"bubblewrap exited with {process.returncode}"
        log.error("sandbox_failed_to_start", error=reason[:2000], code=process.returncode)
        return RunOutcome(None, "", "", 0, 0, duration, failure=reason[:2000])
    removed = 0
    if killed_for == "workspace":
        removed = await asyncio.to_thread(workspace.remove_new, request.root, before)
    after = await asyncio.to_thread(workspace.snapshot, request.root)
    created = tuple(workspace.changed(before, after))
    exit_code = None if killed_for else process.returncode
    outcome = RunOutcome(
        exit_code=exit_code,
        stdout=out.text(),
        stderr=rest if newline else "",
        stdout_cut=out.cut,
        stderr_cut=err.cut,
        duration=duration,
        killed_for=killed_for,
        created=created,
        removed=removed,
        output_bytes=out.total + max(0, err.total - len(first) - 1),
    )
    _log_ran(request, outcome)
    return outcome


async def _start_network(
    net: network.Pipes,
    slirps: list[network.Slirp],
    process: asyncio.subprocess.Process,
    readers: Readers,
    err: Captured,
) -> RunOutcome | None:
    """Give the sandbox its network once it is up (its first stderr line); when that fails,
    the sandbox is killed and the outcome says why."""
    try:
        slirps.append(await network.start(net, err.first_line))
    except network.NetworkUnavailable as exc:
        _kill(process)
        await process.wait()
        readers.cancel()
        log.error("sandbox_network_failed", error=str(exc))
        return _not_started(str(exc))
    return None


async def _wait_within_limits(
    request: RunRequest, process: asyncio.subprocess.Process, readers: Readers
) -> str:
    """Wait for the code to end, killing it when it runs out of time or the workspace grows
    over its size, and for its output; why it was killed ("": it was not)."""
    limits = request.limits
    over = asyncio.Event()
    watcher = asyncio.create_task(_watch_size(request.root, limits.file_bytes, over))
    over_wait = asyncio.create_task(over.wait())
    exited = asyncio.create_task(process.wait())
    killed_for = ""
    try:
        done, _ = await asyncio.wait(
            {exited, over_wait}, timeout=limits.timeout_seconds, return_when="FIRST_COMPLETED"
        )
        if exited not in done:
            killed_for = "workspace" if over.is_set() else "timeout"
            _kill(process)
        await process.wait()
        # The pipes close when the last process holding them is gone (the namespace ended).
        try:
            await asyncio.wait_for(readers, 5.0)
        except TimeoutError:
            log.warning("sandbox_output_left_open", pid=process.pid)
    finally:
        watcher.cancel()
        over_wait.cancel()
        if not readers.done():
            readers.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await readers
    return killed_for


def _log_ran(request: RunRequest, outcome: RunOutcome) -> None:
    """One line per run of code: how it ended, how long it took, what it wrote."""
    log.info(
        "code_ran",
        language=request.language,
        exit_code=outcome.exit_code,
        killed_for=outcome.killed_for or None,
        seconds=round(outcome.duration, 3),
        output_bytes=outcome.output_bytes,
        files=len(outcome.created),
        network=request.network,
        sandboxed=request.sandboxed,
    )
