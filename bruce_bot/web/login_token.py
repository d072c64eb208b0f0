"""The dashboard's own token when config.yml sets none, and the one-time sign-in link.

On loopback without `web.auth_token`, Bruce makes a token on first start (`token_urlsafe(32)`)
and keeps it in `<data_dir>/web_token`, created 0600 (tightened to 0600 if found looser) and
reused on every later start: it is the bearer token for scripts (`bruce token --show` prints
it) and what the login form takes. It never goes into a URL.

At each start Bruce also makes a sign-in nonce, kept only in this process's memory, and prints
`http://127.0.0.1:8080/login?token=<nonce>` on the console, as Jupyter does. Opening it signs the
browser in (the usual server-side session) and redirects to the dashboard, which drops it from
the address bar; the nonce is spent by that first use, and a restart makes a new one, so a link
found later in a terminal's scrollback or the browser's history grants nothing.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

TOKEN_FILE = "web_token"
TOKEN_BYTES = 32  # 43 URL-safe characters, 256 bits: passes config.token_weakness
FILE_MODE = 0o600


def token_path(data_dir: Path) -> Path:
    return data_dir / TOKEN_FILE


def read_token(data_dir: Path) -> str | None:
    """The stored token, or None when there is none (yet)."""
    try:
        text = token_path(data_dir).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text or None


def load_or_create(data_dir: Path) -> str:
    """The token kept in the data dir; made (0600, never overwritten) when there is none."""
    path = token_path(data_dir)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = read_token(data_dir)
    if existing is not None:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            path.chmod(FILE_MODE)
            log.warning("web_token_file_mode_tightened", path=str(path), was=oct(mode))
        return existing
    token = secrets.token_urlsafe(TOKEN_BYTES)
    path.unlink(missing_ok=True)  # an empty file left by a crash mid-write
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:  # another process made it first: use that one
        return read_token(data_dir) or token
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(token + "\n")
        file.flush()
        os.fsync(file.fileno())
    log.info("web_token_created", path=str(path))
    return token


class OneTimeLogin:
    """The nonce of this start's sign-in link: good for one sign-in, in this process only."""

    def __init__(self) -> None:
        self._nonce: str | None = secrets.token_urlsafe(TOKEN_BYTES)

    def link(self, base_url: str) -> str | None:
        """The sign-in link under `base_url` (None once it was used)."""
        if self._nonce is None:
            return None
        return f"{base_url.rstrip('/')}/login?token={self._nonce}"

    def redeem(self, candidate: str) -> bool:
        """Whether `candidate` is the unused nonce; a match spends it."""
        nonce = self._nonce
        if nonce is None or not candidate:
            return False
        if not hmac.compare_digest(candidate.encode(), nonce.encode()):
            return False
        self._nonce = None
        return True
