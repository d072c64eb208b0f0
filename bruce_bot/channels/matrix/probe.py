"""Matrix's side of `bruce doctor` and the dashboard's token test: who the credentials log in
as on the homeserver (whoami with an access token; with a password, a login whose device is
logged out again at once, so a check leaves no device behind)."""

from __future__ import annotations

import asyncio

import aiohttp

from bruce_bot.channels.matrix.session import LoginRefused, new_client, password_login, whoami
from bruce_bot.channels.probe import ProbeError
from bruce_bot.config.matrix import MatrixConfig
from bruce_bot.platforms import BotIdentity

FIX = "check channels.matrix.homeserver, user_id and password (or access_token)"


async def identify(config: MatrixConfig, timeout_seconds: float) -> BotIdentity:
    try:
        async with asyncio.timeout(timeout_seconds):
            user_id = await _who(config)
    except TimeoutError:
        raise ProbeError(
            f"the homeserver did not answer within {timeout_seconds:g} s",
            "check the network and channels.matrix.homeserver",
        ) from None
    except LoginRefused as exc:
        raise ProbeError(f"the homeserver refused the login: {exc}", FIX) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise ProbeError(f"the homeserver is unreachable: {exc}", FIX) from exc
    return BotIdentity(user_id, f"https://matrix.to/#/{user_id}")


async def _who(config: MatrixConfig) -> str:
    # Never Bruce's own device: logging in as it would end the running daemon's session.
    client = new_client(config)
    try:
        if config.access_token:
            return (await whoami(client, config.access_token)).user_id
        await password_login(client, config.password)
        await client.logout()
        return client.user_id
    finally:
        await client.close()
