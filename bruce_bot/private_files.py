"""The data dir is the daemon user's only: folders 0700, the files people sent 0600.

It holds the database (chats, keys and tokens saved in the dashboard), the dashboard's own token,
the media and uploads people sent and the artifacts: nothing another user of the machine should
read. At start the data dir and its `media`, `media/uploads` and `artifacts` folders are made
0700, and tightened to 0700 when found looser (logged as `data_dir_mode_tightened`; a folder
Bruce may not change is logged as `data_dir_mode_kept`, and Bruce still starts). Media and
upload files are written 0600 whatever the umask.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
PRIVATE_SUBDIRS = ("media", "media/uploads", "artifacts")


def private_dir(path: Path) -> None:
    """`path` exists, and is 0700 if it was just made (parents made along are 0700 too)."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
        folder.chmod(DIR_MODE)  # mkdir's mode goes through the umask; this does not


def tighten(path: Path) -> None:
    """`path` (a folder) to 0700 when group or others may use it."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            path.chmod(DIR_MODE)
            log.warning("data_dir_mode_tightened", path=str(path), was=oct(mode), now="0o700")
    except OSError as exc:
        log.warning("data_dir_mode_kept", path=str(path), error=exc.strerror or repr(exc))


def secure_data_dir(data_dir: Path) -> None:
    """The data dir and its private folders made, or tightened, to 0700."""
    for folder in (data_dir, *(data_dir / sub for sub in PRIVATE_SUBDIRS)):
        private_dir(folder)
        tighten(folder)


def write_private(path: Path, data: bytes) -> None:
    """`data` into `path`, created (or truncated) 0600, its missing folders 0700."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), FILE_MODE)  # a file that was there keeps no looser mode
        file.write(data)
