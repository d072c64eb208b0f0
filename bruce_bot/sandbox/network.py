"""The network of a run that asked for it: slirp4netns, a user-mode TCP/IP stack.

The sandbox keeps its own network namespace even then; slirp4netns gives it a tap device
(10.0.2.100, DNS at 10.0.2.3) whose traffic it makes as ordinary sockets of the host. With
`--disable-host-loopback` the host's loopback (10.0.2.2) is refused, and 127.0.0.1 in the
sandbox is the sandbox's own: Bruce's dashboard, the database server and whatever else listens
on the host's loopback stay out of reach. Other addresses of the host and of its network are
reachable like any address: the reason a run with the network waits for the user's approval
under `approval: risky`. Without slirp4netns installed (Debian's `slirp4netns`), a run asking
for the network is refused with that fix.

bubblewrap reports the sandbox's PID on `--info-fd`; the sandbox's launcher says it is set up
(its first line) and waits on a pipe until the network is configured, so the code never runs
before it is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

SLIRP = "slirp4netns"
DNS = "10.0.2.3"
START_TIMEOUT_SECONDS = 10.0


class NetworkUnavailable(Exception):
    """The network could not be given to the sandbox; the message says why and the fix."""


def available() -> bool:
    return shutil.which(SLIRP) is not None


@dataclass(slots=True)
class Pipes:
    """bubblewrap's ends (`child_*`, passed to it) and ours."""

    child_block: int
    child_info: int
    block_writer: int
    info_reader: int


def pipes(keep_for_child: Callable[[int], int]) -> Pipes:
    block_r, block_w = os.pipe()
    info_r, info_w = os.pipe()
    for fd in (block_r, info_w):
        os.set_inheritable(fd, True)
        keep_for_child(fd)  # closed in this process once bubblewrap started
    return Pipes(block_r, info_w, block_w, info_r)


@dataclass(slots=True)
class Slirp:
    process: asyncio.subprocess.Process | None

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


def _read_pid(fd: int) -> int:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
        with contextlib.suppress(ValueError):
            return int(json.loads(data)["child-pid"])
    raise NetworkUnavailable("bubblewrap did not report the sandbox's process")


async def start(pipes: Pipes, sandbox_ready: asyncio.Event) -> Slirp:
    """Give the sandbox bubblewrap is starting its network, then let the code run. On a
    failure the code is still held: the caller kills the sandbox, then closes `block_writer`."""
    slirp = Slirp(None)
    try:
        pid = await asyncio.wait_for(
            asyncio.to_thread(_read_pid, pipes.info_reader), START_TIMEOUT_SECONDS
        )
        # The sandbox is set up (its launcher wrote its first line) and waits for us.
        await asyncio.wait_for(sandbox_ready.wait(), START_TIMEOUT_SECONDS)
        ready_r, ready_w = os.pipe()
        try:
            slirp.process = await asyncio.create_subprocess_exec(
                SLIRP,
                "--configure",
                "--mtu=65520",
                "--disable-host-loopback",
                "--enable-sandbox",
                "--enable-seccomp",
                f"--ready-fd={ready_w}",
                *([] if os.geteuid() == 0 else [f"--userns-path=/proc/{pid}/ns/user"]),
                str(pid),
                "tap0",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(ready_w,),
                env={"PATH": "/usr/bin:/bin"},
            )
        finally:
            os.close(ready_w)
        try:
            ready = await asyncio.wait_for(
                asyncio.to_thread(os.read, ready_r, 1), START_TIMEOUT_SECONDS
            )
        finally:
            os.close(ready_r)
        if ready != b"1":
            error = b""
            if slirp.process.stderr is not None:
                with contextlib.suppress(TimeoutError):
                    error = await asyncio.wait_for(slirp.process.stderr.read(2000), 2.0)
            raise NetworkUnavailable(
                f"slirp4netns failed: {error.decode(errors='replace').strip()}"
            )
        log.info("sandbox_network_up", pid=pid)
    except (OSError, TimeoutError) as exc:
        await slirp.stop()
        raise NetworkUnavailable(f"slirp4netns could not start: {exc}") from exc
    except NetworkUnavailable:
        await slirp.stop()
        raise
    finally:
        os.close(pipes.info_reader)
    os.write(pipes.block_writer, b"go\n")
    os.close(pipes.block_writer)
    return slirp
