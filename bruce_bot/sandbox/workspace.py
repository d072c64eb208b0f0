"""A session's workspace on disk: `<data_dir>/workspaces/<session id>`, /workspace in the sandbox.

The daemon reads what the code left there without ever following a link or opening a special
file: every walk uses `lstat`, every open `O_NOFOLLOW` relative to a directory descriptor opened
`O_NOFOLLOW` as well, and only regular files are read, up to a size. The sandbox is gone when
the daemon reads (its PID namespace died with it), so nothing swaps a file meanwhile; the checks
hold even if something did. When the daemon runs as root, the workspace belongs to the sandbox's
user (`nobody`) and the files copied in are given to it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

WORKSPACES_DIR = "workspaces"
IN_DIR = "in"
OUT_DIR = "out"
MAX_WALK = 20_000  # entries looked at when measuring or listing a workspace
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]")

# path relative to the workspace -> (size in bytes, mtime ns)
Snapshot = dict[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class OutFile:
    """A file the code left in /workspace/out: its bytes, or why it was not taken."""

    name: str
    size: int
    data: bytes | None = None
    problem: str = ""


def workspace_dir(data_dir: Path, session_id: int) -> Path:
    return data_dir / WORKSPACES_DIR / str(session_id)


def safe_name(raw: str) -> str:
    """A plain file name for a file copied in (no separators, no leading dot)."""
    name = _UNSAFE.sub("_", raw.replace("/", "_").replace("\\", "_")).strip(" .")
    return name[:120] or "file"


def prepare(root: Path, owner: tuple[int, int] | None) -> None:
    """The workspace and its out/ folder exist, 0700, owned by the sandbox's user."""
    parent = root.parent
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in (root, root / OUT_DIR):
        st = os.lstat(folder) if os.path.lexists(folder) else None
        if st is None:
            folder.mkdir(mode=0o700)
        elif not stat.S_ISDIR(st.st_mode):  # a link or a file where a folder belongs
            os.unlink(folder)
            folder.mkdir(mode=0o700)
        if owner is not None:
            os.chown(folder, *owner, follow_symlinks=False)
        os.chmod(folder, 0o700)  # a folder: checked above, made by us


def open_dir(root: Path) -> int:
    """A descriptor of the workspace folder (for `--bind-fd`), never through a link."""
    return os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of everything under `root`, links not followed."""
    seen = 0
    stack = [""]
    while stack and seen < MAX_WALK:
        relative = stack.pop()
        try:
            with os.scandir(root / relative if relative else root) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_WALK:
                        return
                    path = f"{relative}/{entry.name}" if relative else entry.name
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    yield path, info
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(path)
        except OSError:
            continue


def snapshot(root: Path) -> Snapshot:
    return {
        path: (info.st_size, info.st_mtime_ns)
        for path, info in _walk(root)
        if not stat.S_ISDIR(info.st_mode)
    }


def disk_bytes(root: Path) -> int:
    """What the workspace takes on disk (blocks, so a sparse file counts what it uses)."""
    return sum(info.st_blocks * 512 for _, info in _walk(root))


def changed(before: Snapshot, after: Snapshot) -> list[str]:
    """The paths created or modified between two snapshots, sorted."""
    return sorted(path for path, mark in after.items() if before.get(path) != mark)


def remove_new(root: Path, before: Snapshot) -> int:
    """Delete the files that were not there `before` (a run that filled the workspace)."""
    removed = 0
    for path, _ in sorted(snapshot(root).items()):
        if path in before:
            continue
        with contextlib.suppress(OSError):
            os.unlink(root / path)  # unlink never follows a link
            removed += 1
    return removed


def read_out(root: Path, names: Iterable[str], max_bytes: int, max_files: int) -> list[OutFile]:
    """The regular files among `names` (paths relative to the workspace under out/, directly
    in it), read without following links; others come back with the reason they were not."""
    files: list[OutFile] = []
    try:
        workspace_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        log.warning("workspace_unreadable", path=str(root), error=str(exc))
        return files
    try:
        out_fd = os.open(OUT_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=workspace_fd)
    except OSError:
        os.close(workspace_fd)
        return files  # out/ replaced by a link or a file: nothing is taken from it
    try:
        for relative in names:
            folder, _, name = relative.partition("/")
            if folder != OUT_DIR or not name or "/" in name:
                continue
            if len(files) >= max_files:
                files.append(OutFile(name, 0, problem=f"more than {max_files} files: not sent"))
                break
            files.append(_read_one(out_fd, name, max_bytes))
    finally:
        os.close(out_fd)
        os.close(workspace_fd)
    return files


def _read_one(out_fd: int, name: str, max_bytes: int) -> OutFile:
    try:
        info = os.stat(name, dir_fd=out_fd, follow_symlinks=False)
    except OSError:
        return OutFile(name, 0, problem="gone")
    if stat.S_ISLNK(info.st_mode):
        return OutFile(name, 0, problem="a symbolic link: not followed, not sent")
    if not stat.S_ISREG(info.st_mode):
        return OutFile(name, 0, problem="not a regular file: not sent")
    if info.st_size > max_bytes:
        return OutFile(name, info.st_size, problem=f"over {max_bytes:,} bytes: not sent")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=out_fd)
    except OSError as exc:
        return OutFile(name, 0, problem=f"unreadable ({exc.strerror})")
    with os.fdopen(fd, "rb") as file:
        opened = os.fstat(file.fileno())
        if not stat.S_ISREG(opened.st_mode) or opened.st_ino != info.st_ino:
            return OutFile(name, 0, problem="changed while read: not sent")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        return OutFile(name, len(data), problem=f"over {max_bytes:,} bytes: not sent")
    return OutFile(name, len(data), data)


def copy_in(
    root: Path, files: Iterable[tuple[str, bytes]], owner: tuple[int, int] | None
) -> list[str]:
    """Write the user's files into in/ (an existing one of the same content is left); returns
    their names there."""
    names: list[str] = []
    folder = root / IN_DIR
    if os.path.lexists(folder) and not stat.S_ISDIR(os.lstat(folder).st_mode):
        os.unlink(folder)
    folder.mkdir(mode=0o700, exist_ok=True)
    if owner is not None:
        os.chown(folder, *owner, follow_symlinks=False)
    for raw, data in files:
        name = safe_name(raw)
        path = folder / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            with contextlib.suppress(OSError):
                os.unlink(path) if not path.is_dir() else shutil.rmtree(path)
        elif path.is_file() and path.stat().st_size == len(data):
            names.append(name)
            continue
        temporary = folder / f".{name}.part"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        if owner is not None:
            os.chown(temporary, *owner, follow_symlinks=False)
        os.replace(temporary, path)
        names.append(name)
    return names


def remove_workspaces(data_dir: Path, session_ids: Iterable[int]) -> int:
    """Delete the sessions' workspaces (the session was deleted); returns how many files."""
    removed = 0
    for session_id in session_ids:
        root = workspace_dir(data_dir, session_id)
        if root.is_dir() and not root.is_symlink():
            removed += sum(1 for _, info in _walk(root) if not stat.S_ISDIR(info.st_mode))
            shutil.rmtree(root, ignore_errors=True)  # rmtree does not follow links
    return removed


def sweep(data_dir: Path, retention_days: int, now: float | None = None) -> int:
    """Delete the workspaces untouched for `retention_days` (0: kept for ever)."""
    if retention_days <= 0:
        return 0
    parent = data_dir / WORKSPACES_DIR
    cutoff = (time.time() if now is None else now) - retention_days * 86_400
    removed = 0
    if not parent.is_dir():
        return 0
    for entry in os.scandir(parent):
        if not entry.is_dir(follow_symlinks=False):
            continue
        newest = max(
            (info.st_mtime for _, info in _walk(Path(entry.path))),
            default=entry.stat(follow_symlinks=False).st_mtime,
        )
        if newest < cutoff:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
            log.info("workspace_expired", session=entry.name)
    return removed
