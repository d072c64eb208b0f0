"""Does bubblewrap work here? One tiny sandbox is started, as a run would be, and the answer
says why not and how to fix it: `tools.run_code.enabled` defaults to it, and `bruce doctor`
shows it. The answer is kept for the process (the machine does not change under it).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import structlog

from bruce_bot.sandbox import bwrap

log = structlog.get_logger(__name__)

PROBE_TIMEOUT_SECONDS = 10.0
INSTALL = (
    "install bubblewrap (Debian/Ubuntu: sudo apt install bubblewrap; Fedora: sudo dnf install "
    "bubblewrap), then restart Bruce"
)
USERNS = (
    "allow unprivileged user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1 "
    "(Debian) or kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04), and "
    "user.max_user_namespaces above 0; inside a container, run it with user namespaces allowed "
    "(e.g. Docker's --security-opt seccomp=unconfined) or set tools.run_code.enabled: false"
)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    works: bool
    detail: str  # what was found
    fix: str = ""


@functools.cache
def probe() -> ProbeResult:
    result = _probe()
    log.info("sandbox_probe", works=result.works, detail=result.detail)
    return result


def _probe() -> ProbeResult:
    found = shutil.which(bwrap.BWRAP)
    if found is None:
        return ProbeResult(False, "bubblewrap (bwrap) is not installed", INSTALL)
    privileged = os.geteuid() == 0
    if privileged and not os.access("/usr/bin/setpriv", os.X_OK):
        return ProbeResult(
            False,
            "/usr/bin/setpriv is missing (Bruce runs as root: the code is made nobody with it)",
            "install util-linux (setpriv), or run Bruce as an ordinary user",
        )
    with tempfile.TemporaryDirectory(prefix="bruce-probe-") as folder:
        if privileged:
            os.chown(folder, bwrap.INNER_UID, bwrap.INNER_UID)
        directory = os.open(folder, os.O_PATH | os.O_DIRECTORY)
        try:
            argv = bwrap.bwrap_argv(
                ["/bin/sh", "-c", "cd /workspace && echo sandbox-ok"],
                bwrap.Mounts(directory),
                tmp_bytes=1024 * 1024,
                privileged=privileged,
                bwrap=found,
            )
            completed = subprocess.run(
                argv,
                pass_fds=(directory,),
                capture_output=True,
                env={"PATH": bwrap.PATH},
                timeout=PROBE_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return ProbeResult(False, f"bubblewrap could not be run: {exc}", INSTALL)
        finally:
            os.close(directory)
    if completed.returncode == 0 and completed.stdout.strip() == b"sandbox-ok":
        return ProbeResult(True, f"bubblewrap works ({found})")
    error = (
        completed.stderr.decode(errors="replace").strip()[:500] or f"exit {completed.returncode}"
    )
    log.warning("sandbox_probe_failed", error=error)
    lowered = error.lower()
    if any(word in lowered for word in ("namespace", "uid map", "operation not permitted")):
        return ProbeResult(False, f"bubblewrap cannot create its namespaces: {error}", USERNS)
    return ProbeResult(False, f"bubblewrap fails: {error}", USERNS)
