"""Discord's side of `bruce doctor`: the REST login discord.py does first (`GET /users/@me`
with the bot token), without opening the gateway, answering with the bot's name or a
`ProbeError` that names the key."""

from __future__ import annotations

import asyncio

import aiohttp
import discord

from bruce_bot.channels.discord.gateway import point_library_at
from bruce_bot.channels.probe import ProbeError
from bruce_bot.config import DiscordConfig
from bruce_bot.platforms import BotIdentity

# The invite's permissions: view channels, send messages, attach files, read message history.
INVITE_PERMISSIONS = 1024 | 2048 | 32768 | 65536


async def identify(config: DiscordConfig, timeout_seconds: float) -> BotIdentity:
    """The bot the token belongs to, with its invite link (the platform registry's probe);
    ProbeError when Discord refuses the token or does not answer within `timeout_seconds`
    (discord.py retries a connection error a few times on its own)."""
    try:
        async with asyncio.timeout(timeout_seconds):
            name, user_id = await discord_bot_identity(config)
    except TimeoutError:
        raise ProbeError(
            f"Discord did not answer within {timeout_seconds:g} s",
            "check the network (or channels.discord.api_base_url)",
        ) from None
    return BotIdentity(name, invite_url(user_id) if user_id else None)


def invite_url(application_id: str) -> str:
    """The link that adds the bot to a server (a bot's user id is its application's id)."""
    return (
        f"https://discord.com/oauth2/authorize?client_id={application_id}"
        f"&scope=bot&permissions={INVITE_PERMISSIONS}"
    )


async def discord_bot_identity(config: DiscordConfig) -> tuple[str, str]:
    """(user name, id) of the bot the token belongs to; ProbeError as `identify`."""
    point_library_at(config)
    http = discord.http.HTTPClient(asyncio.get_running_loop())
    try:
        user = await http.static_login(config.token)
        return str(user.get("username") or user.get("id") or "?"), str(user.get("id") or "")
    except discord.LoginFailure as exc:
        raise ProbeError(
            "Discord refused the token (401 Unauthorized)",
            "set channels.discord.token to the bot token of your application (Developer Portal)",
        ) from exc
    except discord.HTTPException as exc:
        raise ProbeError(
            f"Discord answered {exc.status}: {exc.text or exc}",
            "check channels.discord.token and channels.discord.api_base_url",
        ) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise ProbeError(
            f"Discord unreachable: {exc}",
            "check the network (or channels.discord.api_base_url)",
        ) from exc
    finally:
        await http.close()
