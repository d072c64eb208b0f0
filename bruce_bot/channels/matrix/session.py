"""Logging Bruce's Matrix account in, keeping its device across restarts.

With `access_token`, that token is used (whoami says whose it is and on which device). With
`password`, the first start logs in (as `device_id` when one is set, else a new device the
homeserver names) and keeps the device and its access token in the sync-state file
(sync_state.py), so a restart goes on on the same device without logging in again; a stored
token the homeserver no longer takes is replaced by a new login on the same device.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from nio import AsyncClient, AsyncClientConfig, LoginResponse, WhoamiResponse

from bruce_bot.channels.matrix.sync_state import SyncState
from bruce_bot.config.matrix import MatrixConfig

log = structlog.get_logger(__name__)

DEVICE_NAME = "Bruce"
MAX_TIMEOUTS = 3


class LoginRefused(Exception):
    """The homeserver refused the credentials (not a network problem): say what to fix."""


@dataclass(frozen=True, slots=True)
class Session:
    client: AsyncClient
    access_token: str  # of a password login, to keep (empty with a configured token)


def new_client(config: MatrixConfig, device_id: str = "") -> AsyncClient:
    # Encryption off: olm is not installed (see channel.py). nio retries a connection error a
    # few times itself, then raises to the channel's loop, which reports the outage once.
    settings = AsyncClientConfig(
        encryption_enabled=False, store_sync_tokens=False, max_timeouts=MAX_TIMEOUTS
    )
    homeserver = config.homeserver or ""
    return AsyncClient(homeserver, config.user_id, device_id=device_id or None, config=settings)


async def whoami(client: AsyncClient, token: str, device_id: str = "") -> WhoamiResponse:
    """Use `token` on `client`; LoginRefused when the homeserver does not take it."""
    client.access_token = token
    answer = await client.whoami()
    if not isinstance(answer, WhoamiResponse):
        raise LoginRefused(f"{getattr(answer, 'status_code', '')} {answer.message}".strip())
    client.restore_login(answer.user_id, answer.device_id or device_id, token)
    return answer


async def password_login(client: AsyncClient, password: str) -> str:
    answer = await client.login(password, device_name=DEVICE_NAME)
    if not isinstance(answer, LoginResponse):
        raise LoginRefused(f"{getattr(answer, 'status_code', '')} {answer.message}".strip())
    return answer.access_token


async def log_in(config: MatrixConfig, stored: SyncState | None) -> Session:
    """A logged-in client (see the module docstring); LoginRefused as `whoami`."""
    if config.access_token:
        client = new_client(config, config.device_id)
        await whoami(client, config.access_token, config.device_id)
        return Session(client, "")
    device = config.device_id or (stored.device_id if stored else "")
    client = new_client(config, device)
    if stored is not None and stored.access_token and stored.device_id == device:
        try:
            await whoami(client, stored.access_token, device)
            return Session(client, stored.access_token)
        except LoginRefused:
            log.info("matrix_stored_login_refused", device_id=device)
    token = await password_login(client, config.password)
    log.info("matrix_logged_in", user_id=client.user_id, device_id=client.device_id)
    return Session(client, token)
