"""Slack's side of `bruce doctor` and the dashboard's token test: `auth.test` with the bot
token, answering with the bot's name and its workspace's address, or a `ProbeError` that names
the key (`invalid_auth`, `not_authed`, `token_revoked`... name channels.slack.bot_token)."""

from __future__ import annotations

import asyncio

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bruce_bot.channels.probe import ProbeError
from bruce_bot.channels.slack.texts import BOT_TOKEN_FIX
from bruce_bot.config.slack import SlackConfig
from bruce_bot.platforms import BotIdentity

TOKEN_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "not_allowed_token_type",
    }
)
NETWORK_FIX = "check the network (or channels.slack.api_base_url)"


def web_client(
    config: SlackConfig, session: aiohttp.ClientSession | None = None, token: str | None = None
) -> AsyncWebClient:
    """A Web API client on the configured address (Slack's own by default)."""
    base = (config.api_base_url or "https://slack.com/api").rstrip("/") + "/"
    return AsyncWebClient(token=token or config.bot_token, base_url=base, session=session)


async def identify(config: SlackConfig, timeout_seconds: float) -> BotIdentity:
    """The bot the token belongs to (the registry's probe); ProbeError when Slack refuses the
    token or does not answer within `timeout_seconds`."""
    try:
        async with aiohttp.ClientSession() as session, asyncio.timeout(timeout_seconds):
            answer = await web_client(config, session).auth_test()
    except TimeoutError:
        raise ProbeError(
            f"Slack did not answer within {timeout_seconds:g} s", NETWORK_FIX
        ) from None
    except SlackApiError as exc:
        code = str(exc.response.get("error", ""))
        if code in TOKEN_ERRORS:
            raise ProbeError(f"Slack refused the bot token ({code})", BOT_TOKEN_FIX) from exc
        status = getattr(exc.response, "status_code", "?")
        raise ProbeError(f"Slack answered {status}: {code}", BOT_TOKEN_FIX) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise ProbeError(f"Slack unreachable: {exc}", NETWORK_FIX) from exc
    name = str(answer.get("user") or answer.get("user_id") or "?")
    team = answer.get("team")
    url = answer.get("url")
    return BotIdentity(f"{name} ({team})" if team else name, str(url) if url else None)
